"""A pass that settles early (policy/settle.py) and then finds its state changed after all is not
trusted: plan() logs it and returns the whole pass's plan instead of raising in the scheduler's tick."""
import logging

from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.policy import settle
from labq.scheduler.policy.queue import Queue
from tests.harness import ClusterBuilder, cfg, summarize


def _full_cluster_with_held_jobs_behind_a_blocked_one():
    """One full node; a job that waits for room (it takes the one reservation), then alike held jobs:
    the pass settles right after the reservation and finishes the held class with one verdict."""
    b = ClusterBuilder().node("n1", gpus=2).running("n1", gpus=2)
    b.job(gpus=1, submit_offset=-50)
    for _ in range(3):
        b.job(gpus=1, held=True)
    return b.build()


def test_a_settled_pass_whose_state_changes_is_logged_and_planned_again_whole(monkeypatch, caplog):
    judge = policy._Pass._verdict

    def verdict_that_moves_the_state(self, job):
        # A broken invariant: a held job's gate verdict changes the pass state.
        if job.held:
            self.free.changes += 1
        return judge(self, job)

    monkeypatch.setattr(policy._Pass, "_verdict", verdict_that_moves_the_state)
    monkeypatch.setattr(settle, "SETTLE_CHECK", 0)
    snap, c = _full_cluster_with_held_jobs_behind_a_blocked_one(), cfg()
    with caplog.at_level(logging.WARNING, logger=settle.__name__):
        got = policy.plan(snap, c, queue=Queue())     # the daemon's path: the class walk
    assert "a settled pass changed its state" in caplog.text and "planned again as a whole pass" in caplog.text
    assert summarize(got) == summarize(policy.plan_per_job(snap, c))
    assert summarize(got)["pending"] == {2: states.RESOURCES, 3: states.HELD, 4: states.HELD, 5: states.HELD}
    assert [s.job_id for s in got.starts] == [2]


def test_a_pass_that_settles_as_it_should_logs_nothing(monkeypatch, caplog):
    monkeypatch.setattr(settle, "SETTLE_CHECK", 0)
    snap, c = _full_cluster_with_held_jobs_behind_a_blocked_one(), cfg()
    with caplog.at_level(logging.WARNING, logger=settle.__name__):
        got = policy.plan(snap, c, queue=Queue())     # the daemon's path: the class walk
    assert caplog.text == ""
    assert summarize(got) == summarize(policy.plan_per_job(snap, c))


def _full_cluster_with_a_queue_behind_a_blocked_one():
    """One full node; a job that waits for room (it takes the one reservation), then jobs of several classes
    that no node has room for: the pass settles right after the reservation, and `finish` gives each class
    left its "no room" verdict."""
    b = ClusterBuilder().node("n1", gpus=2).running("n1", gpus=2)
    b.job(gpus=1, submit_offset=-50)
    for k in range(6):
        b.job(gpus=1 + k % 2, time_limit=600 + 60 * k, submit_offset=float(k))
    return b.build()


def test_a_settled_pass_for_a_caller_that_keeps_no_reasons_makes_no_runs_for_the_classes_it_finishes(monkeypatch):
    """plan(quiet=True) (the replay, sim/through.py): the classes a settled pass finishes take "no room",
    which names no earmark or budget and changes no record, so no run is made for them (made, they cost
    the depth of the queue every pass of a deep drain: ~10 % of the 20,000-job 64-GPU replay, each run a
    copy of its class's ids); with reasons kept they take the per-job pass's verdicts."""
    monkeypatch.setattr(settle, "SETTLE_CHECK", 0)
    snap, c = _full_cluster_with_a_queue_behind_a_blocked_one(), cfg()
    finished = []
    real = settle.finish

    def counted(w, version):
        finished.append(sum(1 for _ in w.reached.rest()))
        return real(w, version)
    monkeypatch.setattr(settle, "finish", counted)
    got = policy.plan(snap, c, queue=Queue())
    assert finished and finished[0] >= 5
    assert summarize(got) == summarize(policy.plan_per_job(snap, c))
    quiet = policy.plan(snap, c, queue=Queue(), quiet=True)
    assert [s.job_id for s in quiet.starts] == [s.job_id for s in got.starts] == [2]
    assert [ids for ids, _ in quiet.pending.runs()] == [(2,)]
