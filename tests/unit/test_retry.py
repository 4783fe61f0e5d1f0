"""Retries by outcome, backoff, requeue requests and the crash guard: pure rules, no Redis."""
from dataclasses import replace

import pytest

from labq.scheduler import policy
from labq.scheduler.daemon import crashguard, transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.jobs.plan import Place
from tests.harness import ClusterBuilder, cfg, summarize

CFG = cfg("[scheduler]\nretry_backoff = '30s'\nretry_backoff_max = '2m'\n")
END = 5000.0


def running(**kw) -> Job:
    job = Job(id=7, user="alice", account="default", argv=("true",), time_limit=3600, **kw)
    j = tr.admit(job, Place(7, "n", ("GPU-0",), (), (), 0), 1000.0)
    return tr.started(j, 1, {"start_time": 1001.0})


def finish(job, outcome, exit_code=None, checkpoint=None):
    body = {"outcome": outcome, "exit_code": exit_code, "end_time": END}
    if checkpoint is not None:
        body["last_checkpoint"] = checkpoint
    return tr.finished(job, job.current.attempt, body, END + 1, CFG)[0]


# (job fields, outcome, exit code, checkpoint) -> (state, retries_used, backoff seconds or None)
@pytest.mark.parametrize("kw,outcome,code,ckpt,want", [
    ({}, "completed", 0, None, (states.COMPLETED, 0, None)),
    ({}, "exit", 3, None, (states.FAILED, 0, None)),                                  # no --retries
    ({"retries": 2, "retry_on": (3,)}, "exit", 3, None, (states.PENDING, 1, 30)),
    ({"retries": 2, "retry_on": (3,), "retries_used": 1}, "exit", 3, None, (states.PENDING, 2, 60)),
    ({"retries": 2, "retry_on": (3,), "retries_used": 2}, "exit", 3, None, (states.FAILED, 2, None)),
    ({"retries": 2, "retry_on": (3,)}, "exit", 4, None, (states.FAILED, 0, None)),    # not a listed code
    ({"retries": 9, "retry_on": (3,), "retries_used": 5}, "exit", 3, None, (states.PENDING, 6, 120)),  # capped
    ({"retries": 2, "retry_on": (137,)}, "oom", 137, None, (states.OOM, 0, None)),    # OOM never retried
    ({"retries": 2}, "timeout", -15, None, (states.TIMEOUT, 0, None)),
    ({"requeue_on_timeout": True}, "timeout", -15, None, (states.TIMEOUT, 0, None)),  # no checkpoint
    ({"requeue_on_timeout": True}, "timeout", -15, 900.0, (states.TIMEOUT, 0, None)),  # one from before it
    ({"requeue_on_timeout": True}, "timeout", -15, 4000.0, (states.PENDING, 0, None)),
    ({}, "node_failure", None, None, (states.PENDING, 0, None)),                      # SLURM's default requeue
    ({"requeue": False}, "node_failure", None, None, (states.NODE_FAIL, 0, None)),
    ({"requeue": False, "retries": 3}, "node_failure", None, None, (states.NODE_FAIL, 0, None)),
    ({"retries": 1}, "node_failure", None, None, (states.PENDING, 1, 30)),
    ({"retries": 1, "retries_used": 1}, "node_failure", None, None, (states.NODE_FAIL, 1, None)),
    ({"checkpoint_exit_code": 85, "retries": 1}, "checkpoint_exit", 85, None, (states.PENDING, 0, None)),
    ({"retries": 1}, "preempted", -15, None, (states.PENDING, 0, None)),
    ({"retries": 2, "retry_on": (1,)}, "error", None, None, (states.FAILED, 0, None)),
])
def test_what_an_attempt_end_makes_of_the_job(kw, outcome, code, ckpt, want):
    new = finish(running(**kw), outcome, code, ckpt)
    state, used, backoff = want
    assert (new.state, new.retries_used) == (state, used), new.detail
    if backoff is None:
        assert new.eligible_time is None
    else:
        assert new.eligible_time == END + backoff and "backoff" in new.detail
    requeued = state == states.PENDING
    assert new.restart_count == int(requeued) and (new.end_time is None) == requeued
    assert new.commit == () and new.node == ("" if requeued else "n")


def test_exhausted_retries_say_so():
    new = finish(running(retries=1, retry_on=(3,), retries_used=1), "exit", 3)
    assert new.state == states.FAILED and "retries exhausted (1/1)" in new.detail


def test_retry_delay_doubles_up_to_the_cap():
    assert [tr.retry_delay(n, CFG) for n in range(5)] == [30, 60, 120, 120, 120]
    assert tr.retry_delay(10_000, cfg()) == 3600


def test_a_retried_attempt_is_charged_and_the_next_gets_a_new_number():
    c = cfg("[rates]\ngpu_hour = 2.0\n[[budgets]]\nname = 'b'\nlimit = 100.0\n")
    job = Job(id=7, user="alice", account="default", argv=("true",), time_limit=3600, budget="b", retries=1,
              retry_on=(3,))
    j = tr.admit(job, Place(7, "n", ("GPU-0",), (("b", 2_000_000),), (("b", 2_000_000),), 2_000_000), 1000.0)
    new, charges = tr.finished(j, 1, {"outcome": "exit", "exit_code": 3, "start_time": 1000.0, "end_time": 2800.0},
                               3000.0, c)
    assert new.state == states.PENDING and [ch.key for ch in charges] == ["7.1"] and charges[0].amount == 1_000_000
    assert tr.admit(new, Place(7, "n", ("GPU-0",), (), (), 0), 4000.0).current.attempt == 2


def test_node_failure_via_lost_lease_follows_the_same_rules():
    lost = tr.node_failed(running(requeue=False), 1500.0, 2000.0, CFG)[0]
    assert lost.state == states.NODE_FAIL and "--no-requeue" in lost.detail
    assert tr.node_failed(running(), 1500.0, 2000.0, CFG)[0].state == states.PENDING


def test_requeue_request_sends_the_job_back_and_a_cancel_still_wins():
    j = replace(running(), requeue_requested=True)
    back = finish(j, "cancelled", -15)
    assert (back.state, back.restart_count, back.requeue_requested, back.retries_used) == (states.PENDING, 1, False, 0)
    assert "labq requeue" in back.detail and back.preempt_count == 0
    assert finish(replace(j, cancel_requested=True), "cancelled", -15).state == states.CANCELLED
    # The job ended by itself before the stop reached it: what it did stands.
    assert finish(j, "completed", 0).state == states.COMPLETED


def test_policy_pends_a_backing_off_job_with_BeginTime_then_starts_it():
    b = ClusterBuilder().node("n", gpus=2, lease=3600)
    b.job(gpus=1, eligible_time=b.now + 45, retries=2, retries_used=1, restart_count=1)
    p = policy.plan(b.build(), cfg())
    assert summarize(p)["pending"] == {1: states.BEGIN_TIME} and "retry backoff" in p.pending[0].detail
    later = replace(b.build(), now=b.now + 45)
    assert list(summarize(policy.plan(later, cfg()))["places"]) == [1]


# -- the crash guard ---------------------------------------------------------------------------------
def test_guard_trips_at_n_failures_within_the_window_then_starts_over():
    g = crashguard.CrashGuard(3, 600)
    seen = [g.record("alice", "exit", t) for t in (0, 100, 200, 300, 900, 1000, 1100)]
    # 300 and 900 are 600 s apart: 300 has left the window when 900 comes.
    assert seen == [0, 0, 3, 0, 0, 0, 3]


@pytest.mark.parametrize("outcome,counts", [("exit", True), ("oom", True), ("error", True), ("timeout", False),
                                            ("cancelled", False), ("node_failure", False), ("preempted", False),
                                            ("completed", False), ("checkpoint_exit", False)])
def test_only_the_jobs_own_failures_count(outcome, counts):
    g = crashguard.CrashGuard(1, 600)
    assert bool(g.record("alice", outcome, 10.0)) is counts


def test_guard_is_per_user_and_off_at_zero():
    g = crashguard.CrashGuard(2, 600)
    assert [g.record(u, "exit", t) for u, t in (("alice", 1), ("bob", 2), ("alice", 3))] == [0, 0, 2]
    assert not crashguard.CrashGuard(0, 600).record("alice", "exit", 1)
    assert not crashguard.CrashGuard.from_config(cfg("[scheduler]\ncrash_guard_window = 0\n")).on
    assert crashguard.CrashGuard.from_config(cfg()).failures == 5


def test_rebuild_counts_failed_attempts_of_the_last_window():
    def job(jid, user, *ends):
        return Job(id=jid, user=user, account="a", attempts=tuple(
            Attempt(i + 1, "n", (), end_time=t, outcome=o) for i, (t, o) in enumerate(ends)))
    g = crashguard.CrashGuard(3, 600)
    g.rebuild([job(1, "alice", (100.0, "exit"), (500.0, "exit")), job(2, "alice", (700.0, "timeout")),
               job(3, "alice", (800.0, "oom")), job(4, "bob", (900.0, "exit"))], now=1000.0)
    # 100 is outside the window; 500 and 800 are in: one more failure trips it.
    assert g.record("bob", "exit", 1001.0) == 0 and g.record("alice", "exit", 1001.0) == 3


def test_hold_and_alert():
    b = ClusterBuilder().node("n", gpus=1).running("n", gpus=1).job().job(user="bob").job(held=True)
    held = crashguard.hold(b.build().jobs, "alice", "why")
    assert [(j.id, j.held, j.reason) for j in held] == [(2, True, states.CRASH_GUARD), (4, True, states.CRASH_GUARD)]
    a = crashguard.alert("alice", 5, 600, [4, 2], 123.0)
    assert (a["kind"], a["scope"], a["level"], a["ts"]) == ("crash_cascade", "user:alice", "warn", 123.0)
    assert "5 failed attempts within 10m" in a["message"] and '"held":[2,4]' in a["data"]
    # The policy keeps the reason and its detail while the job is held.
    snap = replace(b.build(), jobs=tuple(held))
    p = policy.plan(snap, cfg())
    assert summarize(p)["pending"] == {2: states.CRASH_GUARD, 4: states.CRASH_GUARD}
