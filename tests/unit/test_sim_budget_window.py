"""A budget no longer turns off the strict-order window (scheduler/sim/engine.py `_strict`): a budget
pends jobs that fit, never one that does not, so the first job that does not fit still ends the pass.
A deep queue under fifo with budgets that run out must replay exactly as with whole-queue passes."""
import os
import sys

import pytest

from labq.cli.whatif import parse_nodes
from labq.scheduler import config as config_mod, policy
from labq.scheduler.sim import load, policy_config, report, simulate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_trace  # noqa: E402

BUDGETS = ('[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = {limit}\nperiod = "{period}"\n'
           '[[budgets]]\nname = "rl"\naccount = "vc-rl"\nlimit = 40.0\nperiod = "none"\n')


@pytest.mark.parametrize("limit, period", [(150.0, "week"), (60.0, "none")])
def test_a_budgeted_strict_replay_equals_whole_passes(tmp_path, monkeypatch, limit, period):
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=3, days=2)
    cfg = policy_config(config_mod.loads(BUDGETS.format(limit=limit, period=period)), "fifo")
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    seen = []
    real = policy.plan
    monkeypatch.setattr(policy, "plan", lambda snap, c, *a, **kw: seen.append(len(snap.jobs)) or real(snap, c, *a, **kw))
    fast = simulate(jobs, nodes, cfg)
    given, seen[:] = sum(seen), []
    full = simulate(jobs, nodes, cfg, skip=False)
    sched = lambda r: {i: (j.state, [(a.node, a.gpus, a.dispatch_time, a.end_time) for a in j.attempts])  # noqa: E731
                       for i, j in r.jobs.items()}
    assert sched(fast) == sched(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert report(fast)["held_by_budget"]["jobs"] > 0          # the budgets did hold jobs
    assert given < sum(seen) / 2                               # plan() read far fewer jobs


@pytest.mark.parametrize("name", ["backfill", "priority", "fairshare"])
@pytest.mark.parametrize("limit, period", [(150.0, "week"), (60.0, "none")])
def test_a_budgeted_replay_parks_what_the_budget_holds_and_equals_whole_passes(tmp_path, name, limit, period):
    """Jobs a spent budget provably keeps waiting are parked out of plan()'s passes (sim/parked.py),
    and a backfill pass over a deep queue is windowed (sim/easy.py) with budgets too: the same
    schedule, spending and budget-held jobs as plan() over every pending job at every instant."""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=5, days=2)
    cfg = policy_config(config_mod.loads(BUDGETS.format(limit=limit, period=period)), name)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    fast, full = simulate(jobs, nodes, cfg), simulate(jobs, nodes, cfg, skip=False)
    sched = lambda r: {i: (j.state, j.reason, [(a.node, a.gpus, a.dispatch_time, a.end_time) for a in j.attempts])  # noqa: E731
                       for i, j in r.jobs.items()}
    assert sched(fast) == sched(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert report(fast)["held_by_budget"]["jobs"] > 0
