"""Run times learned from history (scheduler/jobs/estimate.py) and where they are used: backfill's expected
ends, the short-job priority term with its aging bound, the forecast budget mode, the config keys."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import multifactor, policy
from labq.scheduler.errors import ConfigError
from labq.scheduler.jobs import states
from labq.scheduler.jobs.estimate import Estimator, run_seconds
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.money import pricing
from labq.scheduler.policy import backfill
from labq.scheduler.settings import config as config_mod
from tests.harness import ClusterBuilder, cfg, summarize


def ended(seconds, user="alice", name="train", outcome="completed", end=1000.0, **kw) -> Job:
    a = Attempt(1, "n", (), start_time=end - seconds, end_time=end, outcome=outcome, dispatch_time=end - seconds - 5)
    return Job(id=1, user=user, account="a", name=name, attempts=(a,), state=states.COMPLETED, **kw)


def test_quantile_is_a_nearest_rank_of_the_runs_seen():
    e = Estimator(quantile=0.75, min_samples=3)
    for s in (40, 10, 30, 20):
        assert e.observe_ended(ended(s))
    got = e.estimate(Job(id=9, user="alice", account="a", name="train", time_limit=3600))
    assert (got.seconds, got.samples, got.basis) == (30, 4, "user alice, name train")    # ceil(0.75·4) = 3rd
    assert got.text() == "p75 of 4 runs of user alice, name train"


def test_the_most_specific_basis_with_enough_runs_decides():
    e = Estimator(min_samples=3)
    for s in (100, 200, 300):
        e.observe_ended(ended(s, name="prep"))
    e.observe_ended(ended(5000, name="train", tags=(("exp", "big"),)))
    train = Job(id=9, user="alice", account="a", name="train", tags=(("exp", "big"),), time_limit=9000)
    # One run of `train`, one of tag exp=big: too few; the user's four runs decide.
    got = e.estimate(train)
    assert got.basis == "user alice" and got.samples == 4 and got.seconds == 300
    for s in (6000, 7000):
        e.observe_ended(ended(s, name="other", tags=(("exp", "big"),)))
    assert e.estimate(train).basis == "user alice, tags exp=big" and e.estimate(train).seconds == 7000
    assert e.estimate(Job(id=10, user="bob", account="a", time_limit=60)) is None


def test_capped_by_the_time_limit_and_fewer_than_min_samples_give_none():
    e = Estimator(min_samples=2)
    e.observe_ended(ended(7200))
    assert e.estimate(Job(id=9, user="alice", account="a", name="train", time_limit=3600)) is None
    e.observe_ended(ended(7200))
    got = e.estimate(Job(id=9, user="alice", account="a", name="train", time_limit=3600))
    assert got.seconds == 3600 and got.capped and got.text().endswith("capped at the time limit")


@pytest.mark.parametrize("outcome,learned", [("completed", True), ("exit", True), ("timeout", True), ("oom", True),
                                             ("preempted", False), ("cancelled", False), ("node_failure", False),
                                             ("checkpoint_exit", False), ("error", False)])
def test_only_attempts_that_ended_on_their_own_terms_are_learned(outcome, learned):
    assert (run_seconds(ended(50, outcome=outcome)) is not None) is learned
    assert run_seconds(ended(50))[0] == 50       # from the process's start, not the admission


def test_memory_is_bounded_per_basis_and_in_bases():
    e = Estimator(min_samples=1, window=4, max_keys=3)
    for s in range(1, 11):
        e.observe_ended(ended(s, name=""))          # one basis: the user
    got = e.estimate(Job(id=9, user="alice", account="a", time_limit=99))
    assert got.samples == 4 and got.seconds == 9    # the last 4 runs (7..10), p75 → 9
    for u in ("u1", "u2", "u3"):
        e.observe_ended(ended(5, user=u, name=""))
    assert e.estimate(Job(id=9, user="alice", account="a", time_limit=99)) is None    # least recently used: gone
    assert e.estimate(Job(id=9, user="u3", account="a", time_limit=99)).seconds == 5


def test_stamp_writes_the_estimate_into_the_record():
    e = Estimator(min_samples=1)
    job = Job(id=9, user="alice", account="a", name="train", time_limit=3600)
    assert e.stamp(job) == job
    e.observe_ended(ended(42 * 60))
    got = e.stamp(job)
    assert got.learned_est == 2520 and got.learned_basis == "p75 of 1 runs of user alice, name train"


def test_jobs_stamped_alike_share_one_basis_text():
    """A deep queue (or a 200,000-job replay) keeps every stamped job: equal texts are one object."""
    e = Estimator(min_samples=1)
    e.observe_ended(ended(42 * 60))
    a, b = (e.stamp(Job(id=i, user="alice", account="a", name="train", time_limit=3600)) for i in (9, 10))
    assert a.learned_basis == b.learned_basis == "p75 of 1 runs of user alice, name train"
    assert a.learned_basis is b.learned_basis


def test_a_job_the_caller_owns_is_stamped_in_place_as_a_copy_would_be():
    """stamp(own=True), the submit handler's (jobspec.job_from_submit's job, which nothing else holds):
    the same object, every field as the copying stamp gives it; an estimate gone clears it alike."""
    from dataclasses import astuple
    e = Estimator(min_samples=1)
    e.observe_ended(ended(42 * 60))
    job = Job(id=9, user="alice", account="a", name="train", time_limit=3600)
    copied = e.stamp(job)
    assert job.learned_est is None, "the copying stamp leaves the job as it was"
    got = e.stamp(job, own=True)
    assert got is job and astuple(got) == astuple(copied)
    gone = Estimator(min_samples=1)
    assert gone.stamp(job, own=True) is job and job.learned_est is None and job.learned_basis == ""


def test_jobs_stamped_alike_are_stamped_from_what_is_learned_now():
    """stamp keeps what it wrote per (user, name, tags, time limit) until the next run is learned: a
    job capped by a shorter limit, or of other tags, is stamped on its own; a new run changes the next."""
    e = Estimator(min_samples=1)
    e.observe_ended(ended(42 * 60))
    job = lambda **kw: Job(id=9, user="alice", account="a", name="train", **{"time_limit": 3600, **kw})  # noqa: E731
    assert e.stamp(job()).learned_est == 2520
    assert e.stamp(job(time_limit=600)).learned_est == 600, "capped by its own limit"
    assert e.stamp(job(tags=(("k", "v"),))).learned_est == 2520
    e.observe_ended(ended(10 * 60))
    assert e.stamp(job()).learned_basis == "p75 of 2 runs of user alice, name train"

def test_a_basis_seen_once_holds_its_run_bare_and_estimates_alike():
    """Most names run once (a one-off; a replayed trace's job ids): no deque until a second run."""
    from collections import deque
    e = Estimator(min_samples=1, window=2)
    job = Job(id=9, user="alice", account="a", name="train", time_limit=3600)
    e.observe_ended(ended(42 * 60))
    assert not any(isinstance(r, deque) for r in e._runs.values())
    assert e.stamp(job).learned_basis == "p75 of 1 runs of user alice, name train"
    for minutes in (10, 20):
        e.observe_ended(ended(minutes * 60))
    assert all(isinstance(r, deque) and len(r) == 2 for r in e._runs.values())      # the window: the last two
    assert e.stamp(job).learned_est == 1200

def test_config_keys_and_their_checks():
    c = config_mod.Config()
    assert c.priority["short_job_weight"] == 0 and c.estimate["backfill"] is False and c.estimate["forecast"] is False
    got = config_mod.loads("[estimate]\nquantile = 0.5\nmin_samples = 5\nwindow = 10\nbackfill = true\n"
                           "[priority]\nshort_job_weight = 10\nshort_job_scale = \"30m\"\n")
    assert got.estimate["quantile"] == 0.5 and got.estimate["backfill"] is True
    assert got.priority["short_job_scale"] == 1800
    with pytest.raises(ConfigError, match="short_job_weight.*at most priority.age_weight"):
        config_mod.loads("[priority]\nshort_job_weight = 11\n")
    with pytest.raises(ConfigError, match="estimate.window"):
        config_mod.loads("[estimate]\nmin_samples = 5\nwindow = 4\n")
    with pytest.raises(ConfigError, match="estimate"):
        config_mod.loads("[estimate]\nquantil = 0.5\n")


# -- backfill ---------------------------------------------------------------------------------------
LEARNED = cfg("[estimate]\nbackfill = true\n")


def _backfill_case(est_small=20 * 60):
    """A 4-GPU node, 2 GPUs held by a job with a 2 h limit expected to take 1 h; a 4-GPU job blocked
    (reserved); a 2-GPU job with a 4 h limit expected to take `est_small`."""
    return (ClusterBuilder().node("n", gpus=4)
            .running("n", gpus=2, time_limit=7200, learned_est=3600, submit_offset=-10)
            .job(gpus=4, time_limit=3600, submit_offset=-5)
            .job(gpus=2, time_limit=4 * 3600, learned_est=est_small).build())


def test_backfill_over_learned_run_times_starts_what_fits_before_the_reservation():
    snap = _backfill_case()
    # Over time limits the 4 h job would end after the big job's reserved start (R's limit): it waits.
    assert summarize(policy.plan(snap, cfg()))["pending"] == {2: states.RESOURCES, 3: states.RESERVATION}
    # Over the estimates the reservation is at R's expected end (~1 h); 20 min fit before it.
    got = policy.plan(snap, LEARNED)
    assert [p.job_id for p in got.places] == [3]
    assert got.starts[0].job_id == 2 and got.starts[0].at == snap.now - 60 + 3600
    # An estimate that does not fit before the reservation keeps the job waiting.
    assert summarize(policy.plan(_backfill_case(est_small=2 * 3600), LEARNED))["pending"][3] == states.RESERVATION


def test_a_running_job_past_its_estimate_is_expected_at_its_limit_again():
    b = ClusterBuilder().node("n", gpus=1).running("n", gpus=1, time_limit=3 * 3600, learned_est=3600,
                                                       started_ago=2 * 3600)
    run = b.build().jobs[0]
    assert backfill._expected_end(run, b.now, LEARNED) == b.now - 2 * 3600 + 3 * 3600 + LEARNED.kill_wait
    fresh = replace(run, attempts=(replace(run.attempts[0], start_time=b.now - 60),))
    assert backfill._expected_end(fresh, b.now, LEARNED) == b.now - 60 + 3600
    assert backfill._expected_end(fresh, b.now, cfg()) == b.now - 60 + 3 * 3600 + 30   # off: the limit


# -- short jobs first, with aging --------------------------------------------------------------------
SHORT = cfg("[priority]\nshort_job_weight = 10\nqos_weight = 0\nfairshare_weight = 0\nburst_penalty = 0\n")


def test_short_jobs_first_when_the_weight_is_on():
    b = (ClusterBuilder().node("n", gpus=1).job(gpus=1, time_limit=36000, learned_est=30000)
         .job(gpus=1, time_limit=36000, learned_est=60).job(gpus=1, time_limit=600))
    snap = b.build()
    assert [j.id for j in multifactor.ordered(list(snap.jobs), snap.now, {}, cfg())] == [1, 2, 3]
    assert [j.id for j in multifactor.ordered(list(snap.jobs), snap.now, {}, SHORT)] == [2, 3, 1]
    assert [p.job_id for p in policy.plan(snap, SHORT).places] == [2]
    f = multifactor.factors(list(snap.jobs), snap.now, {}, SHORT)
    assert f[2].short > f[3].short > f[1].short > 0
    assert f[2].as_json(SHORT.priority)["weighted"]["short"] == round(10 * f[2].short, 4)


@settings(max_examples=200, deadline=None)
@given(long_run=st.integers(3600, 30 * 86400), short_run=st.integers(1, 3600), later=st.floats(1, 30 * 86400),
       waited=st.floats(0, 60 * 86400), weight=st.floats(0.1, 10))
def test_aging_bound_a_job_that_waited_age_max_ranks_above_every_later_job(long_run, short_run, later, waited,
                                                                             weight):
    c = replace(SHORT, priority={**SHORT.priority, "short_job_weight": weight})
    age_max = c.priority["age_max"]
    now = 1e9
    long_job = Job(id=1, user="a", account="a", time_limit=long_run, learned_est=long_run,
                   submit_time=now - age_max - waited)
    short = Job(id=2, user="a", account="a", time_limit=short_run, learned_est=short_run,
                submit_time=long_job.submit_time + later)
    if short.submit_time > now:
        short = replace(short, submit_time=now)
    assert [j.id for j in multifactor.ordered([short, long_job], now, {}, c)] == [1, 2]
    f = multifactor.factors([short, long_job], now, {}, c)
    assert f[1].priority >= f[2].priority


# -- the forecast budget mode ------------------------------------------------------------------------
def test_forecast_mode_uses_the_learned_run_time_when_est_is_absent():
    job = Job(id=1, user="a", account="a", time_limit=36000, learned_est=1000)
    on = cfg('[scheduler]\nbudget_mode = "forecast"\n[estimate]\nforecast = true\n')
    off = cfg('[scheduler]\nbudget_mode = "forecast"\n')
    assert pricing.planned_seconds(job, on) == pytest.approx(1000 * 1.2)
    assert pricing.planned_seconds(replace(job, est=2000), on) == pytest.approx(2000 * 1.2)   # --est first
    assert pricing.planned_seconds(job, off) == 36000 + off.kill_wait
    assert pricing.planned_seconds(job, cfg()) == 36000 + 30                                 # safe mode: the limit
