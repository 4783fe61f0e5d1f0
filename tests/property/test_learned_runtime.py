"""The simulator's learned run times never read the future: each job's estimate (stamped when it is
submitted) equals the estimate of a fresh estimator fed only the attempts that had ended by that
instant, and rests on none that ended later. Also the learned and sjf-oracle policies end to end."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.estimate import LEARNED_OUTCOMES, Estimator
from labq.scheduler.jobs.model import Job, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import simulate

# min_samples 1 so that most jobs get an estimate; a window larger than any trace so that the
from labq.scheduler.sim.metrics import report

# min_samples 1 so that most jobs get an estimate; a window larger than any trace so that the
from labq.scheduler.sim.policies import describe, resolve

# min_samples 1 so that most jobs get an estimate; a window larger than any trace so that the
from labq.scheduler.sim.result import EPOCH

# min_samples 1 so that most jobs get an estimate; a window larger than any trace so that the
from labq.scheduler.sim.trace import TraceJob

# min_samples 1 so that most jobs get an estimate; a window larger than any trace so that the
# quantile depends on the set of runs seen, not on the order of ends at one instant.
CFG = config_mod.loads("[estimate]\nmin_samples = 1\nwindow = 1000\n")
MACHINE = (Node("n0", 8, 1 << 40, 8),)

trace_jobs = st.lists(st.tuples(st.floats(0, 5000), st.integers(1, 3000), st.integers(1, 4000), st.integers(1, 8),
                                st.sampled_from(["u1", "u2", "u3"]), st.sampled_from(["", "train", "eval"])),
                      min_size=1, max_size=40)


def _trace(rows):
    rows = sorted(rows, key=lambda r: r[0])
    return [TraceJob(name or f"j{i}", submit, duration, limit, cpus=cpus, user=user)
            for i, (submit, duration, limit, cpus, user, name) in enumerate(rows)]


def _runs(res):
    """(end time, job, seconds) of every attempt the replay ended on the job's own terms."""
    out = []
    for j in res.jobs.values():
        for a in j.attempts:
            if a.outcome in LEARNED_OUTCOMES and a.end_time:
                out.append((a.end_time, j, a.end_time - (a.start_time or a.dispatch_time)))
    return out


@settings(max_examples=60, deadline=None)
@given(rows=trace_jobs, policy=st.sampled_from(["learned", "backfill"]))
def test_an_estimate_rests_only_on_jobs_that_ended_before_it_was_made(rows, policy):
    base = CFG
    if policy == "backfill":      # backfill over learned run times without the short-job order
        base = config_mod.loads("[estimate]\nmin_samples = 1\nwindow = 1000\nbackfill = true\n")
    cfg, hooks = resolve(base, policy)
    assert hooks is not None      # a built-in policy whose config reads estimates learns them too
    res = simulate(_trace(rows), MACHINE, cfg, hooks=hooks)
    runs = _runs(res)
    for job in res.jobs.values():
        fresh = Estimator.from_config(cfg)
        for end, other, seconds in runs:
            if end <= job.submit_time:
                fresh.observe(other, seconds, end)
        want = fresh.estimate(job)
        assert (job.learned_est, job.learned_basis) == ((want.seconds, want.text()) if want else (None, ""))
        if want is not None:
            assert want.newest <= job.submit_time


def test_learned_and_the_oracle_beat_limits_when_limits_are_loose():
    """Jobs that ask for 10× what they use: planning with learned run times backfills more and short jobs
    first cuts the mean wait; the oracle does too. (It is a reference, not a strict lower bound: greedy
    shortest-first is no optimum, and on this trace learned estimates do a little better.)"""
    trace, t = [], 0.0
    for i in range(120):
        dur = 60 if i % 3 else 1800
        trace.append(TraceJob(f"j{i}", t, dur, dur * 10, cpus=4 if i % 4 else 8, user=f"u{i % 3}"))
        t += 40
    waits = {}
    for name in ("fifo", "backfill", "learned", "sjf-oracle"):
        cfg, hooks = resolve(config_mod.Config(), name)
        res = simulate(trace, MACHINE, cfg, hooks=hooks)
        waits[name] = report(res)["wait_s"]["mean"]
    assert waits["learned"] < waits["backfill"] <= waits["fifo"]
    assert waits["sjf-oracle"] < waits["backfill"]
    cfg, hooks = resolve(config_mod.Config(), "sjf-oracle")
    assert "an oracle bound, not a policy" in hooks.label
    assert "short jobs 10" in describe(cfg) and "over expected run times" in describe(cfg)
    assert resolve(config_mod.Config(), "backfill")[1] is None      # nothing reads estimates: none learned


def test_the_oracle_stamps_true_run_times_capped_by_the_limit():
    trace = [TraceJob("a", 0, 100, 50, cpus=8), TraceJob("b", 1, 30, 60, cpus=8)]
    cfg, hooks = resolve(config_mod.Config(), "sjf-oracle")
    res = simulate(trace, MACHINE, cfg, hooks=hooks)
    assert [j.learned_est for j in res.jobs.values()] == [50, 30]
    assert res.jobs[2].attempts[0].dispatch_time == EPOCH + 50      # after a's timeout
    assert isinstance(res.jobs[1], Job)
