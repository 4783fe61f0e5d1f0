"""What every tick costs whatever the queue holds (issue 39 item 3: a fixed cost per batch ≤ 1 ms): the
checks for lost and unclaimed attempts look at the jobs holding a node, never walk the pending queue
(10,000 pending jobs made them ~1.4 ms of every tick, 100,000 ~14 ms)."""
from labq.scheduler.jobs import states
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, K, job, one_admitted, submit, woke


class Walked(dict):
    """The scheduler's job table, counting the walks over all of it."""
    walks = 0

    def values(self):
        Walked.walks += 1
        return super().values()

    def items(self):
        Walked.walks += 1
        return super().items()

    def __iter__(self):
        Walked.walks += 1
        return super().__iter__()


def test_lost_and_unclaimed_attempts_are_found_without_walking_the_pending_queue(conns):
    r, s, now = one_admitted(conns)
    for i in range(30):
        submit(r, "alice", {**BODY, "hold": True}, f"h{i}")
    s.tick(now + 1, woke(r))
    assert len(s.jobs) == 31 and job(r, 1).state == states.RUNNING
    s.jobs = Walked(s.jobs)
    Walked.walks = 0
    s._lost_attempts(now + 2)
    s._unclaimed(now + 2)
    assert Walked.walks == 0
    # The running job is still the one they judge: never claimed, it is withdrawn after start_timeout.
    AgentStore(r, K).runner_state("n1", 0, "idle")      # the node's agent runs persistent runners
    r.delete(K.dispatch("n1"))                          # lost: no runner will ever see it
    s._unclaimed(now + s.cfg.start_timeout + 10)
    assert job(r, 1).attempts[0].outcome == "withdrawn"
    assert Walked.walks == 0
