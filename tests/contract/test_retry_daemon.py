"""Retries, labq requeue and the crash guard through the daemon, on fakeredis and a real redis-server."""
import json
import time

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, FROZEN, SWEEP_TOML, K, finish, job, push, reply, setup, submit, woke


def ask(r, user, op, ids, rid):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps({"ids": ids})})
    r.lpush(K.wake, f"user:{user}")


def test_retry_on_exit_code_backs_off_then_runs_again(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "retries": 2, "retry_on": [3]}, "a")
    s.tick(now, woke(r))
    finish(r, 1, 1, "exit", 3, now + 60)
    s.tick(now + 61)
    j = job(r, 1)
    assert (j.state, j.reason, j.retries_used, j.restart_count) == ("PD", states.BEGIN_TIME, 1, 1)
    assert j.eligible_time == now + 90 and "retry backoff" in j.detail   # 30 s after the end
    s.tick(now + 91)
    j = job(r, 1)
    assert j.state == states.RUNNING and j.current.attempt == 2
    finish(r, 1, 2, "completed", 0, now + 100)
    s.tick(now + 101)
    j = job(r, 1)
    assert (j.state, j.retries_used, len(j.attempts)) == (states.COMPLETED, 1, 2)
    assert [c["key"] for _, c in r.xrange(K.ledger)] == ["1.1", "1.2"]   # each attempt charged once


def test_requeue_a_running_job_own_jobs_only(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", BODY, "a")
    submit(r, "alice", {**BODY, "gpus": 4}, "b")       # pends behind a
    s.tick(now, woke(r))
    ask(r, "bob", "requeue", ["1"], "q0")
    ask(r, "alice", "requeue", ["1", "2"], "q1")
    s.tick(now + 1, woke(r))
    assert reply(r, "q0")["ok"] is False and "belongs to alice" in reply(r, "q0")["error"]
    assert [x["state"] for x in reply(r, "q1")["results"]] == ["requeueing", "pending (nothing to requeue)"]
    assert r.get(K.control(1)) == "cancel" and job(r, 1).requeue_requested
    finish(r, 1, 1, "cancelled", -15, now + 2)
    s.tick(now + 3)
    j = job(r, 1)
    # Back in the queue with the same id and at once admitted again (it is the older job); the stop
    # control is gone, so the runner of attempt 2 is not stopped before it starts.
    assert (j.state, j.restart_count, j.requeue_requested) == (states.RUNNING, 1, False)
    assert [a.outcome for a in j.attempts] == ["cancelled", None] and "labq requeue" not in j.detail
    assert not r.exists(K.control(1))
    assert job(r, 2).state == states.PENDING
    finish(r, 1, 2, "completed", 0, now + 4)
    s.tick(now + 5)
    assert job(r, 1).state == states.COMPLETED and job(r, 2).state == states.RUNNING
    ask(r, "alice", "requeue", ["1"], "q2")
    s.tick(now + 6, woke(r))
    assert reply(r, "q2")["code"] == 2 and "already ended (CD)" in reply(r, "q2")["error"]


def test_crash_guard_holds_the_users_pending_jobs_and_alerts_once(conns):
    r, raw = conns
    cfg = config.loads(SWEEP_TOML + "\n[scheduler]\ncrash_guard_failures = 2\ncrash_guard_window = '10m'\n")
    now = time.time()
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)], "h", 1, 3600)
    s = Scheduler(r, cfg, me="s1", clock=FROZEN)
    s.tick(now)
    later = {**BODY, "begin": now + 3600}
    for rid, body in (("a", BODY), ("b", BODY), ("c", later), ("d", later)):
        submit(r, "alice", body, rid)
    submit(r, "bob", later, "e")
    s.tick(now, woke(r))
    assert [job(r, i).state for i in range(1, 6)] == ["R", "R", "PD", "PD", "PD"]
    finish(r, 1, 1, "exit", 1, now + 10)
    s.tick(now + 11)
    assert not job(r, 3).held and r.xlen(K.alerts) == 0
    finish(r, 2, 1, "oom", -9, now + 20)
    s.tick(now + 21)
    for i in (3, 4):
        j = job(r, i)
        assert j.held and j.reason == states.CRASH_GUARD and "2 failed attempts within 10m" in j.detail
    assert not job(r, 5).held                          # bob's jobs are not alice's crash
    [(_, alert)] = r.xrange(K.alerts)
    assert (alert["kind"], alert["scope"], alert["level"]) == ("crash_cascade", "user:alice", "warn")
    assert json.loads(alert["data"])["held"] == [3, 4] and float(alert["ts"]) >= now
    s.tick(now + 22)
    assert job(r, 3).reason == states.CRASH_GUARD      # the plan keeps the reason while held
    ask(r, "alice", "release", ["3"], "rel")
    s.tick(now + 23, woke(r))
    assert reply(r, "rel")["ok"] and not job(r, 3).held and job(r, 3).reason == states.BEGIN_TIME
    assert job(r, 4).reason == states.CRASH_GUARD
