"""The seam for policies beyond a Config (scheduler/sim/policies.py `Hooks`): an expected runtime per
job stored as the record's `est`, and every end shown to the hooks on the virtual clock, never one
that has not happened yet."""
import pytest

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim import policies
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.trace import TraceJob

G = 1 << 30
NODES = (Node("n0", 16, 64 * G, 16, tuple(Gpu(f"GPU-{g}", g, "fake") for g in range(2))),)


class Recorder(policies.Hooks):
    """Estimates a job's run as the mean of the runs that ended before it entered the queue."""

    def __init__(self):
        self.ended: list[tuple[float, float]] = []     # (end instant, run)
        self.asked: list[tuple[int, float, int | None]] = []

    def estimate(self, job, trace_job, t):
        runs = [r for _, r in self.ended]
        est = round(sum(runs) / len(runs)) if runs else None
        self.asked.append((job.id, t, est))
        return est

    def on_end(self, job, trace_job, t):
        a = job.attempts[-1]
        assert a.end_time == t, "an end is shown at its own instant"
        self.ended.append((t, a.end_time - a.dispatch_time))
        return [i for i in range(1, 40)]                # ask again for every job still pending


def trace(n=30):
    return [TraceJob(name=str(i), submit=float(i * 5), duration=float(50 + 10 * (i % 4)), time_limit=200, gpus=1)
            for i in range(n)]


def test_hooks_see_only_past_ends_and_their_estimates_reach_the_records():
    hooks = Recorder()
    cfg = policies.policy_config(config_mod.Config(), "backfill")
    res = simulate(trace(), NODES, cfg, hooks=hooks)
    ends = [t for t, _ in hooks.ended]
    assert ends == sorted(ends) and len(ends) == 30
    for jid, t, est in hooks.asked:
        seen = [r for e, r in hooks.ended if e <= t]
        assert est == (round(sum(seen) / len(seen)) if seen else None)
    # the first job was estimated before anything ended; a later one with what had ended
    assert res.jobs[1].est is None
    assert any(j.est for j in res.jobs.values())


def test_registered_policies_resolve_by_name_and_unknown_ones_are_one_line():
    policies.register("test-recorder", Recorder)
    try:
        cfg, hooks = policies.resolve(config_mod.Config(), "test-recorder")
        assert isinstance(hooks, Recorder) and cfg.backfill_depth == 1
        assert "test-recorder" in policies.names()
        assert policies.resolve(config_mod.Config(), "fifo")[1] is None
    finally:
        policies._REGISTRY.pop("test-recorder")
    with pytest.raises(UsageError, match="expected one of fifo"):
        policies.resolve(config_mod.Config(), "test-recorder")
    with pytest.raises(ValueError):
        policies.register("fifo", Recorder)
