"""A multi-node job through the daemon and the store (fakeredis and a real redis-server): submitted,
placed whole, dispatched to each of its nodes, started by its parts, ended once for the whole job
when its last part has ended (a part that fails stops the others at once), requeued whole when a
node is lost, once its other parts have ended."""
import contextlib
import json

import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.errors import StalePlanError
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store import acctrows
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import GROUP
from tests.harness import FROZEN, K, job, push, reply, submit, woke

CFG = config.loads("""
[scheduler]
node_lease = "30s"
fence_margin = "5s"
[rates]
gpu_hour = 1.0
""")
NOW = 1_800_000_000.0
BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 2, "cpus": 2, "nodes": 2, "time_limit": 3600}


def _setup(r, raw, nodes=("a", "b", "c")):
    agent = AgentStore(r, K)
    for n in nodes:
        agent.register(n, 8, 64 << 30, 4, [Gpu(f"GPU-{n}-{i}", i, "fake") for i in range(2)], "h", 1, 10 ** 6,
                       addr="127.0.0.1")
    s = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s.tick(NOW)
    return s, agent


def _running_gang(r, raw):
    s, agent = _setup(r, raw)
    submit(r, "alice", BODY, "g")
    s.tick(NOW, woke(r))
    j = job(r, 1)
    assert j.state == states.RUNNING and j.nodes == 2
    return s, agent, j


def test_a_gang_is_dispatched_to_each_of_its_nodes(conns):
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    names = [n for n, _ in j.parts]
    assert names == ["a", "b"] and j.current.parts == j.parts and len(j.gpu_uuids) == 4
    for n in names:
        assert r.lrange(K.dispatch(n), 0, -1) == ["1:1"]
    assert r.lrange(K.dispatch("c"), 0, -1) == []
    # every part's `started` is accepted (the first read sets the start, the next is a no-op); a node not in the gang is not heard
    agent.post("started", 1, 1, "a", {"start_time": NOW + 1})
    agent.post("started", 1, 1, "b", {"start_time": NOW + 2})
    agent.post("finished", 1, 1, "c", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 3})
    s.tick(NOW + 3)
    j = job(r, 1)
    assert j.state == states.RUNNING and j.current.start_time == NOW + 1


def test_the_first_part_to_fail_stops_the_others_and_the_job_ends_once_when_the_last_has(conns):
    """A part fails: the others are stopped at once, but the attempt ends (FAILED, with the failed
    part's exit status) only when the last part has ended, billed to that end; late duplicates change
    nothing. Ended at the failure (before), it freed GPUs the other part still used."""
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    _parts_started(r, s, agent)
    agent.post("finished", 1, 1, "b", {"outcome": "exit", "exit_code": 3, "end_time": NOW + 20, "message": "x",
                                       "usage": {"cpu_s": 5.0}})
    s.tick(NOW + 21)
    j = job(r, 1)
    assert j.state == states.RUNNING and j.current.end_time is None
    assert r.get(K.control(1)) == "stop:1"
    for n in ("a", "b"):                        # both parts' runners are woken
        assert r.lrange(K.node_control(n, 1), 0, -1) == ["stop:1"]
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9, "end_time": NOW + 22,
                                       "usage": {"cpu_s": 1.0}})
    s.tick(NOW + 23)
    j = job(r, 1)
    assert j.state == states.FAILED and j.exit_code == 3 and len(j.attempts) == 1
    assert j.attempts[0].outcome == "exit" and j.attempts[0].end_time == NOW + 22
    cost = j.cost
    assert abs(cost - 4 * 21 / 3600 * 10 ** 6) <= 1     # 4 GPUs (2 nodes x 2) for 21 s, to the last part's end
    assert j.attempts[0].usage["nodes"]["b"]["cpu_s"] == 5.0 and j.attempts[0].usage["nodes"]["a"]["cpu_s"] == 1.0
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9, "end_time": NOW + 22})
    s.tick(NOW + 24)
    again = job(r, 1)
    assert again.state == states.FAILED and again.cost == cost and len(again.attempts) == 1
    # the control key cleared (a requeue's or an end's record write does) or replaced: a part whose
    # runner reads late still finds its stop, which names its attempt only
    r.delete(K.control(1))
    assert [agent.control(1, 1, rank) for rank in (0, 1)] == ["stop:1", "stop:1"] and agent.control(1, 2) is None
    # its acct row (store/acctrows.redis_row) was written with the end
    assert r.hget(K.acct_rows, "1") == acctrows.redis_row(again) and r.hlen(K.acct_rows) == 1
    # the room is free again on both nodes: a 2-node job of the whole nodes starts at once
    submit(r, "alice", {**BODY, "nodes": 3}, "g3")
    s.tick(NOW + 25, woke(r))
    assert job(r, 2).state == states.RUNNING


def _parts_started(r, s, agent):
    """Both parts of job 1 claimed, started at NOW + 1 and heart-beaten (on the test's clock)."""
    for rank, n in enumerate(("a", "b")):
        agent.claim(1, 1, n, 100 + rank, rank)
        agent.post("started", 1, 1, n, {"start_time": NOW + 1})
        r.hset(K.part(1, 1, rank), mapping={"claimed_at": NOW + 1, "hb": NOW + 1})
    s.tick(NOW + 2)


def test_a_cancelled_gang_holds_its_gpus_until_its_last_part_has_ended(conns):
    """`labq del` of a running gang: every part's runner gets the cancel and keeps its kill grace. The
    attempt ends, its GPUs are freed and billing stops only when the last part has ended. Ended at its
    first part's end (as before), a job was placed on GPUs the other part still used (overcommit), and
    the control key was cleared under a part's runner slow to read it (each part keeps its own copy)."""
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    _parts_started(r, s, agent)
    push(r, "alice", {"rid": "c", "op": "cancel", "body": json.dumps({"ids": ["1"]})})
    s.tick(NOW + 3, woke(r))
    assert job(r, 1).cancel_requested and r.get(K.control(1)) == "cancel"
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -15, "end_time": NOW + 4})
    submit(r, "alice", {**BODY, "nodes": 3}, "g3")      # needs a's and b's GPUs too
    s.tick(NOW + 4, woke(r))
    assert job(r, 1).state == states.RUNNING and job(r, 1).current.end_time is None
    assert job(r, 2).state == states.PENDING, "placed on GPUs b's part still holds"
    assert r.get(K.control(1)) == "cancel"
    assert [agent.control(1, 1, rank) for rank in (0, 1)] == ["cancel", "cancel"]
    agent.post("finished", 1, 1, "b", {"outcome": "cancelled", "exit_code": -9, "end_time": NOW + 6})
    s.tick(NOW + 6)
    j = job(r, 1)
    assert j.state == states.CANCELLED and j.attempts[0].end_time == NOW + 6 and r.get(K.control(1)) is None
    assert abs(j.cost - 4 * 5 / 3600 * 10 ** 6) <= 1     # 4 GPUs from NOW + 1 to the last part's end
    assert [agent.control(1, 1, rank) for rank in (0, 1)] == ["cancel", "cancel"]
    s.tick(NOW + 7, woke(r))
    assert job(r, 2).state == states.RUNNING


def test_a_gang_whose_part_failed_holds_its_gpus_until_its_last_part_has_ended(conns):
    """A part's runner dies (node_failure): the other parts are stopped at once, and the attempt keeps
    their GPUs until the last has ended, as a preempted or cancelled gang's does."""
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    _parts_started(r, s, agent)
    agent.post("finished", 1, 1, "a", {"outcome": "node_failure", "end_time": NOW + 4})
    submit(r, "alice", {**BODY, "nodes": 3}, "g3")      # needs a's and b's GPUs too
    s.tick(NOW + 4, woke(r))
    assert job(r, 2).state == states.PENDING, "placed on GPUs b's part still holds"
    assert job(r, 1).current.attempt == 1 and job(r, 1).current.end_time is None


def test_a_gang_completes_when_its_last_part_has(conns):
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    for n in ("a", "b"):
        agent.post("started", 1, 1, n, {"start_time": NOW + 1})
    agent.post("finished", 1, 1, "a", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 50,
                                       "usage": {"cpu_s": 1.0}})
    s.tick(NOW + 50)
    j = job(r, 1)
    assert j.state == states.RUNNING and j.current.end_time is None and r.get(K.control(1)) is None
    agent.post("finished", 1, 1, "b", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 52,
                                       "usage": {"cpu_s": 2.0}})
    s.tick(NOW + 52)
    j = job(r, 1)
    assert j.state == states.COMPLETED and len(j.attempts) == 1 and j.attempts[0].end_time == NOW + 52
    assert j.attempts[0].usage["nodes"] == {"a": {"cpu_s": 1.0}, "b": {"cpu_s": 2.0}}
    assert r.get(K.control(1)) is None          # nothing left to stop


@pytest.mark.parametrize("cancel", [False, True])
def test_a_part_that_has_ended_is_not_lost_while_another_part_runs_on(conns, cancel):
    """A part that completed (or ended in a cancel's grace) waits for the others, and its runner, gone,
    beats no more: that silence is not a lost part. Before, lease + margin after the part's end the gang
    was lost (NF), requeued and run again, though one part had finished its work and the other still ran."""
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    for rank, n in enumerate(("a", "b")):
        agent.post("started", 1, 1, n, {"start_time": NOW + 1})
        r.hset(K.part(1, 1, rank), mapping={"claimed_at": NOW + 1, "hb": NOW + 1})     # on our clock
    s.tick(NOW + 2)
    if cancel:
        push(r, "alice", {"rid": "c", "op": "cancel", "body": json.dumps({"ids": ["1"]})})
        s.tick(NOW + 3, woke(r))
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled" if cancel else "completed",
                                       "exit_code": -15 if cancel else 0, "end_time": NOW + 4})
    s.tick(NOW + 4)
    later = NOW + 4 + 30 + 5 + 10                        # past lease + margin after a's last beat
    r.hset(K.part(1, 1, 1), "hb", later - 1)            # b's runner still beats
    s.tick(later)
    j = job(r, 1)
    assert j.state == states.RUNNING and j.restart_count == 0 and j.current.end_time is None
    agent.post("finished", 1, 1, "b", {"outcome": "cancelled" if cancel else "completed",
                                       "exit_code": -9 if cancel else 0, "end_time": later})
    s.tick(later + 1)
    j = job(r, 1)
    assert j.state == (states.CANCELLED if cancel else states.COMPLETED) and len(j.attempts) == 1


def test_a_lost_node_requeues_the_gang_once_and_stops_its_other_part(conns):
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    for rank, n in enumerate(("a", "b")):
        agent.post("started", 1, 1, n, {"start_time": NOW + 1})
        r.hset(K.part(1, 1, rank), "hb", NOW + 1)   # both parts run (their runners' heartbeat, on our clock)
    s.tick(NOW + 2)
    r.delete(K.node_lease("b"))                 # b's agent died (kill -9): its lease is gone
    s.tick(NOW + 3)                             # b is seen down ...
    assert job(r, 1).state == states.RUNNING
    s.tick(NOW + 10)                            # ... and after fence_margin its part is lost
    j = job(r, 1)
    assert r.lrange(K.node_control("a", 1), 0, -1) == ["stop:1"]      # a's part is killed at once
    assert r.get(K.control(1)) == "stop:1"
    # but a's part holds its GPUs until it has ended: before, the gang was requeued and placed again on
    # a in the same tick, beside its own part still being killed there
    assert j.state == states.RUNNING and j.current.attempt == 1 and j.current.end_time is None
    # a's part, killed, reports its end: the attempt ends node_failure, and the job is requeued once
    # and placed again on the two nodes that are up: attempt 2, which stop:1 does not name
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9, "end_time": NOW + 10,
                                       "usage": {"cpu_s": 9.0}})
    s.tick(NOW + 11)
    j = job(r, 1)
    assert j.restart_count == 1 and len(j.attempts) == 2 and j.state == states.RUNNING
    assert [n for n, _ in j.parts] == ["a", "c"] and j.current.attempt == 2
    assert j.attempts[0].usage["nodes"]["a"] == {"cpu_s": 9.0, "outcome": "cancelled", "exit_code": -9,
                                                 "end_time": NOW + 10, "message": ""}
    assert j.attempts[0].usage["nodes"]["b"]["outcome"] == "node_failure"
    assert j.attempts[0].outcome == "node_failure" and j.attempts[0].end_time == NOW + 10
    assert r.hlen(K.acct_rows) == 0, "requeued, not ended: no acct row"
    for n in ("a", "c"):                        # attempt 2 runs and completes on both: one acct row, 2 attempts
        agent.post("started", 1, 2, n, {"start_time": NOW + 12})
        agent.post("finished", 1, 2, n, {"outcome": "completed", "exit_code": 0, "end_time": NOW + 40})
    s.tick(NOW + 41)
    j = job(r, 1)
    assert j.state == states.COMPLETED and r.hget(K.acct_rows, "1") == acctrows.redis_row(j)
    assert json.loads(r.hget(K.acct_rows, "1"))[12] == 2



@pytest.mark.parametrize("beat", [True, False])
def test_a_part_silent_past_lease_and_margin_loses_the_gang_while_its_node_is_up(conns, beat):
    """The slow path behind the agent's (deadslot.py): a part whose runner went silent on a node that
    stays up is lost a lease and a margin after its last heartbeat, or, claimed and never beating
    (killed before `started`), after its claim; the gang is requeued once and its other part stopped.
    Claimed and never beating, it stayed R for good while rank 0 ran on."""
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    for rank, n in enumerate(("a", "b")):
        assert agent.claim(1, 1, n, 100 + rank, rank)[0]
        r.hset(K.part(1, 1, rank), "claimed_at", NOW + 1)      # on our clock
    agent.post("started", 1, 1, "a", {"start_time": NOW + 1})
    if beat:
        agent.post("started", 1, 1, "b", {"start_time": NOW + 1})
        r.hset(K.part(1, 1, 1), "hb", NOW + 1)
    silent = NOW + 1 + CFG.node_lease + CFG.fence_margin
    r.hset(K.part(1, 1, 0), "hb", silent)                         # rank 0 beats on
    s.tick(silent)
    assert job(r, 1).state == states.RUNNING and job(r, 1).current.attempt == 1
    r.hset(K.part(1, 1, 0), "hb", silent + 1)
    s.tick(silent + 1)
    assert job(r, 1).state == states.RUNNING and job(r, 1).current.end_time is None   # rank 0 still runs
    assert r.lrange(K.node_control("a", 1), 0, -1) == ["stop:1"]
    assert [r.hget(K.part(1, 1, rank), "control") for rank in (0, 1)] == ["stop:1", "stop:1"]
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9, "end_time": silent + 2})
    s.tick(silent + 3)
    j = job(r, 1)
    # requeued once, charged to the end of its last part (rank 0 held its GPUs till then)
    assert j.attempts[0].outcome == "node_failure" and j.attempts[0].end_time == silent + 2 and j.restart_count == 1

def test_a_part_no_runner_takes_is_withdrawn_after_start_timeout(conns):
    r, raw = conns
    s, agent, j = _running_gang(r, raw)
    agent.claim(1, 1, "a", 1)
    agent.post("started", 1, 1, "a", {"start_time": NOW + 1})   # rank 0 runs; b's part is never claimed
    r.hset(K.part(1, 1, 0), mapping={"claimed_at": NOW + 1, "hb": NOW + 2})     # (its clock: ours)
    s.tick(NOW + 2)
    assert job(r, 1).state == states.RUNNING
    r.hset(K.part(1, 1, 0), "hb", NOW + CFG.start_timeout + 5)                 # it beats on
    s.tick(NOW + CFG.start_timeout + 5)
    j = job(r, 1)
    assert r.hget(K.part(1, 1, 1), "claimed") == "withdrawn"              # a late runner on b will not run it
    # rank 0 is stopped and keeps its GPUs until it has ended (before: requeued and placed again beside it,
    # its run unbilled)
    assert r.get(K.control(1)) == "stop:1" and j.state == states.RUNNING and j.current.attempt == 1
    end = NOW + CFG.start_timeout + 6
    agent.post("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9, "end_time": end})
    s.tick(end + 1)
    j = job(r, 1)
    assert j.attempts[0].outcome == "node_failure" and j.restart_count == 1 and j.current.attempt == 2
    assert j.attempts[0].end_time == end and j.attempts[0].cost > 0       # what rank 0 ran, billed


def test_test_only_quotes_a_gang_on_all_its_nodes(conns):
    r, raw = conns
    s, _ = _setup(r, raw)
    submit(r, "alice", {**BODY, "test_only": True}, "t")
    s.tick(NOW, woke(r))
    got = reply(r, "t")
    assert got["starts_now"] and got["verdict"].startswith("would start now on a,b with GPU-a-0,GPU-a-1,GPU-b-0")
    assert got["cost_per_hour"] == 4.0          # 2 nodes x 2 GPUs at $1/GPU-hour
    assert r.get(K.job(1)) is None


def test_submit_refuses_a_gang_no_set_of_nodes_could_hold(conns):
    r, raw = conns
    s, _ = _setup(r, raw)
    submit(r, "alice", {**BODY, "nodes": 4}, "g4")
    s.tick(NOW, woke(r))
    got = reply(r, "g4")
    assert not got["ok"] and "no set of 4 nodes could ever hold" in got["error"]
    assert json.dumps(got)     # one line, no traceback


# A leader change between (or around) a gang's two `started` events (issue 35: in a 10-minute chaos soak,
# job 120's new leader acknowledged both parts' `started` and its record got the start only at the part's
# finish). Each way the two events can meet a change of leader: the record in Redis has the earliest
# part's start as soon as the new leader's round has read them, and nothing is left pending.
def _started(agent, n, at):
    agent.post("started", 1, 1, n, {"pid": 100, "start_time": at})


@pytest.mark.parametrize("way", ["between", "both_new", "deposed_read_both", "deposed_read_then_recovery"])
def test_the_new_leader_writes_the_gangs_start(conns, way):
    r, raw = conns
    s1, agent, j = _running_gang(r, raw)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    if way == "between":            # s1 wrote a's start; b's (earlier) comes under s2
        _started(agent, "a", NOW + 2)
        s1.tick(NOW + 2)
        assert job(r, 1).current.start_time == NOW + 2
        r.delete(K.leader)
        assert s2.tick(NOW + 3)
        _started(agent, "b", NOW + 1)
        s2.tick(NOW + 4)
    elif way == "both_new":         # both come while nobody leads: s2's first round reads them
        _started(agent, "a", NOW + 2)
        _started(agent, "b", NOW + 1)
        r.delete(K.leader)
        assert s2.tick(NOW + 4)
    else:
        # s1, frozen past its lease check, reads both into the group's pending entries and its
        # commit fails: s2 finds them left behind (already leading) or in its recovery (not yet)
        r.delete(K.leader)
        if way == "deposed_read_both":
            assert s2.tick(NOW + 3)
        _started(agent, "a", NOW + 2)
        _started(agent, "b", NOW + 1)
        r.set(K.leader, "s2")       # the lease is s2's (taken) or another's: s1's commit is refused
        with contextlib.suppress(StalePlanError):
            s1.inboxes.intake(NOW + 3, pending=False)
        assert [r.xpending(K.node_events(n), GROUP)["pending"] for n in ("a", "b")] == [1, 1]
        if way != "deposed_read_both":
            r.delete(K.leader)
        assert s2.tick(NOW + 4)
    got = job(r, 1)
    assert got.state == states.RUNNING and got.current.start_time == NOW + 1
    for n in ("a", "b"):            # both read and acknowledged, none left behind
        assert r.xpending(K.node_events(n), GROUP)["pending"] == 0
