"""A runner the agent killed (its lease lapsing in a Redis outage: "no lease renewal; stopping local
jobs") or saw die while Redis was away: its attempt ends `node_failure` when Redis is back, posted
by the agent or by the slot's next runner. The end is when the runner (and its job, PDEATHSIG)
died, not when the post finally went through: the chaos soak billed four attempts 5-6 s past their
processes' last stamps after a 3 s outage (issue 35: charges are what ran)."""
import subprocess

from labq.worker import deadslot, launch, results


class Store:
    """The agent's store as deadslot.end uses it: the entry claimed by a dead runner, nothing kept."""

    def __init__(self, node: str, pid: int):
        self.claim, self.posts = f"{node}:{pid}", []

    def job(self, jid):
        return None

    def claimed_by(self, jid, attempt, rank):
        return self.claim

    def part_process(self, jid, attempt, rank):
        return None, None

    def post(self, kind, jid, attempt, node, body, ref=None):
        self.posts.append((kind, jid, attempt, body))


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_runner_that_died_in_an_outage_ends_its_attempt_when_it_died(tmp_path):
    s = launch.Settings(redis_url="", node="n1", spool=str(tmp_path))
    pid = dead_pid()
    results.mark_death(s.spool, 3, pid, 1000.0)
    store = Store("n1", pid)
    assert deadslot.end(store, s, 3, "7:1")
    (kind, jid, attempt, body), = store.posts
    assert (kind, jid, attempt, body["outcome"], body["end_time"]) == ("finished", 7, 1, "node_failure", 1000.0)
    # consumed: the slot's next death is timed afresh
    assert results.death(s.spool, 3, pid) is None


def test_a_death_mark_of_another_runner_is_not_taken(tmp_path):
    s = launch.Settings(redis_url="", node="n1", spool=str(tmp_path))
    pid = dead_pid()
    results.mark_death(s.spool, 3, pid + 1_000_000, 1000.0)
    store = Store("n1", pid)
    assert deadslot.end(store, s, 3, "7:1")
    assert store.posts[0][3]["end_time"] > 1000.0
