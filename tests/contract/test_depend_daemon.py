"""Dependencies through the daemon, on fakeredis and a real redis-server: ids checked at submit,
ended targets read from Redis into Snapshot.ended, afterok chains, never-satisfiable and --kill."""
import json
import time

from labq.scheduler.jobs import states
from tests.harness import BODY, K, finish, job, one_admitted, push, reply, setup, submit, woke


def test_afterok_chain_afternotok_and_kill_on_invalid_dep(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", BODY, "a")                                           # 1
    submit(r, "alice", {**BODY, "dependency": "afterok:1"}, "b")            # 2
    submit(r, "alice", {**BODY, "dependency": "afterok:2"}, "c")            # 3
    submit(r, "alice", {**BODY, "dependency": "afternotok:1"}, "d")         # 4
    submit(r, "alice", {**BODY, "dependency": "afterok:2", "kill_on_invalid_dep": True}, "e")   # 5
    submit(r, "alice", {**BODY, "dependency": "afterok:1:99"}, "bad")
    s.tick(now, woke(r))
    assert reply(r, "bad")["code"] == 2 and "no such job 99" in reply(r, "bad")["error"]
    assert [job(r, i).state for i in range(1, 6)] == ["R", "PD", "PD", "PD", "PD"]
    assert {job(r, i).reason for i in range(2, 6)} == {states.DEPENDENCY}
    s.tick(now + 1)   # the first pass saw job 1 pending; the next sees it running
    assert "afterok:1 (R)" in job(r, 2).detail

    finish(r, 1, 1, "completed", 0, now + 10)
    s.tick(now + 11)
    assert job(r, 1).state == states.COMPLETED and job(r, 2).state == states.RUNNING
    d = job(r, 4)
    assert d.reason == states.DEPENDENCY_NEVER and "afternotok:1 (CD)" in d.detail
    assert s.snapshot(now + 11).ended == ((1, states.COMPLETED),)
    assert job(r, 3).reason == states.DEPENDENCY

    finish(r, 2, 1, "exit", 1, now + 20)
    s.tick(now + 21)
    assert job(r, 2).state == states.FAILED
    assert job(r, 3).reason == states.DEPENDENCY_NEVER
    e = job(r, 5)
    assert e.state == states.CANCELLED and e.attempts == () and "--kill-on-invalid-dep" in e.detail
    assert r.zscore(K.history, "5") is not None
    # The cache keeps only what pending jobs still depend on.
    assert dict(s.ended) == {1: states.COMPLETED, 2: states.FAILED}


def test_array_targets_mean_every_task_or_one(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "array": [1, 3, 1]}, "arr")                 # 1_[1-3] = ids 1..3
    s.tick(now, woke(r))
    submit(r, "alice", {**BODY, "dependency": "afterok:1"}, "all")          # 4
    submit(r, "alice", {**BODY, "dependency": "afterany:1_2"}, "one")       # 5
    submit(r, "alice", {**BODY, "dependency": "afterok:1_9"}, "nope")
    s.tick(now + 1, woke(r))
    assert job(r, 4).deps == (("afterok", (1, 2, 3)),)
    assert job(r, 5).deps == (("afterany", (2,)),)
    assert reply(r, "nope")["code"] == 2 and "1_9" in reply(r, "nope")["error"]
    for jid in (1, 2):
        finish(r, jid, 1, "completed", 0, now + 5)
    s.tick(now + 6)
    assert job(r, 5).state == states.RUNNING and job(r, 4).reason == states.DEPENDENCY
    finish(r, 3, 1, "completed", 0, now + 7)
    s.tick(now + 8)
    assert job(r, 4).state == states.RUNNING


def test_the_ended_cache_is_rebuilt_by_a_new_leader(conns):
    from labq.scheduler.daemon.loop import Scheduler
    from tests.harness import CFG, FROZEN
    r, raw = conns
    now = time.time()
    s1 = setup(r, raw, now)
    submit(r, "alice", {**BODY, "gpus": 4}, "a")
    submit(r, "alice", {**BODY, "dependency": "afternotok:1"}, "b")
    s1.tick(now, woke(r))
    finish(r, 1, 1, "exit", 2, now + 5)
    s1.tick(now + 6)
    assert job(r, 2).state == states.RUNNING
    # A fresh leader with an empty cache judges a new dependent from Redis alone.
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    push(r, "alice", {"rid": "c", "op": "submit", "body": json.dumps({**BODY, "dependency": "afterok:1"})})
    s2.tick(now + 10, ["user:alice"])
    assert job(r, 3).reason == states.DEPENDENCY_NEVER and "afterok:1 (F)" in job(r, 3).detail


def test_test_only_judges_dependencies_on_ended_jobs(conns):
    r, s, now = one_admitted(conns)
    finish(r, 1, 1, "completed", 0, now + 5)
    s.tick(now + 6)
    submit(r, "alice", {**BODY, "dependency": "afterok:1", "test_only": True}, "t1")
    submit(r, "alice", {**BODY, "dependency": "afternotok:1", "test_only": True}, "t2")
    s.tick(now + 7, woke(r))
    assert reply(r, "t1")["starts_now"] is True
    assert reply(r, "t2")["reason"] == states.DEPENDENCY_NEVER
    assert r.zcard(K.active) == 0
