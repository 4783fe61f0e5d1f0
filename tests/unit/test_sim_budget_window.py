"""Budgeted replays: backfill off, the walk of the kept queue (sim/kept.py; a budget that has no room for
a group's next jobs by their floors pends them unquoted, policy/budget.py Floors); backfill on, easy.py's
windows less a spent budget's idle jobs (sim/idle.py). A deep queue with budgets that run out must
replay exactly as with whole-queue passes, budget-held jobs included."""
import os
import sys

import pytest

from labq.cli.whatif import parse_nodes
from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.policy.strict import UNQUOTED
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.metrics import report
from labq.scheduler.sim.policies import policy_config, resolve
from labq.scheduler.sim.result import BUDGET_REASONS
from labq.scheduler.sim.trace import load

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_trace  # noqa: E402

FEW = '[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = {limit}\nperiod = "{period}"\n'
BUDGETS = FEW + '[[budgets]]\nname = "rl"\naccount = "vc-rl"\nlimit = 40.0\nperiod = "none"\n'


def count_budget_verdicts(monkeypatch) -> list:
    """The ids plan() quotes and pends for a budget, call after call, until `monkeypatch.undo()` (not
    those a budget's floors price out unquoted: policy/strict.py UNQUOTED)."""
    verdicts: list = []
    real = policy.plan

    def counted(snap, c, *a, **kw):
        p = real(snap, c, *a, **kw)
        verdicts.extend(pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS and pd.detail != UNQUOTED)
        return p
    monkeypatch.setattr(policy, "plan", counted)
    return verdicts


def schedule(r) -> dict:
    """Every job's state, reason and attempts: what skipping must not change."""
    return {i: (j.state, j.reason, [(a.node, a.gpus, a.dispatch_time, a.end_time) for a in j.attempts])
            for i, j in r.jobs.items()}


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
    """Jobs a spent budget provably keeps waiting are left out of plan()'s passes (sim/idle.py),
    and a backfill pass over a deep queue is windowed (sim/easy.py) with budgets too: the same
    schedule, spending and budget-held jobs as plan() over every pending job at every instant."""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=5, days=2)
    cfg = policy_config(config_mod.loads(BUDGETS.format(limit=limit, period=period)), name)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    fast, full = simulate(jobs, nodes, cfg), simulate(jobs, nodes, cfg, skip=False)
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert report(fast)["held_by_budget"]["jobs"] > 0


@pytest.mark.parametrize("limit, period", [(300.0, "week"), (120.0, "none")])
def test_fair_share_windows_leave_out_the_jobs_their_first_admissions_price_out(tmp_path, monkeypatch, limit, period):
    """Under fair share the strict windows are drawn per account. The jobs a window's first n
    admissions (in plan()'s order) leave no budget room for are pended for it in every wider window,
    so they are left out of it and not judged again: plan() gives few budget verdicts beyond the
    jobs held, and the replay equals whole passes (budget-held jobs counted up to the blocker in
    plan()'s order, not submit order)."""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 600, seed=1, days=2)
    cfg = policy_config(config_mod.loads(FEW.format(limit=limit, period=period)), "fairshare")
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    verdicts = count_budget_verdicts(monkeypatch)
    fast = simulate(jobs, nodes, cfg)
    monkeypatch.undo()
    full = simulate(jobs, nodes, cfg, skip=False)
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert len(fast.budget_held) > 50
    assert len(verdicts) < 2 * len(fast.budget_held)     # (about 3.5x before they were left out)


def test_a_fair_share_window_is_drawn_again_from_the_heads_left_after_the_jobs_left_out():
    """Twenty one-job accounts and a budgeted one whose first three jobs fit its budget only on the
    cheap node, which a filler takes: the first window pends them for the budget. The next window
    must be drawn from each account's first job but those: the budgeted account's is now its last,
    3-GPU job. Drawn from the old heads it would hold that job in place of a sixteenth account,
    which it blocks, and start one job fewer at once than whole passes do."""
    from labq.scheduler.jobs.model import Gpu, Node
    from labq.scheduler.sim.result import EPOCH
    from labq.scheduler.sim.trace import TraceJob
    gib = 1 << 30
    nodes = tuple(Node(f"n{i}", 64, 512 * gib, 64, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(8)))
                  for i in range(3))
    trace = [TraceJob("filler", 0.0, 7200.0, 7200, gpus=8, user="fil", account="fill")]
    trace += [TraceJob(f"v{k}", 0.0, 3600.0, 3600, gpus=1, user="vic", account="vision") for k in range(3)]
    trace += [TraceJob(f"a{k}", 0.0, 600.0 + 60 * k, 3600, gpus=1, user=f"u{k}", account=f"acc{k:02d}")
              for k in range(20)]
    trace += [TraceJob("v3", 0.0, 60.0, 60, gpus=3, user="vic", account="vision")]
    cfg = policy_config(config_mod.loads(
        '[rates]\nnode_hour = { "n0" = 8.0, "n1" = 80.0, "n2" = 80.0 }\n'
        '[[budgets]]\nname = "vision"\naccount = "vision"\nlimit = 5.0\nperiod = "none"\n'), "fairshare")
    fast, full = simulate(trace, nodes, cfg), simulate(trace, nodes, cfg, skip=False)
    sched = lambda r: {j.name: [(a.node, a.dispatch_time - EPOCH) for a in j.attempts] for j in r.jobs.values()}  # noqa: E731
    assert sched(fast) == sched(full)
    at_once = sorted(name for name, a in sched(full).items() if a and a[0][1] == 0)
    assert at_once == sorted(["filler", *(f"a{k}" for k in range(16))])     # the filler on n0, sixteen on n1, n2
    assert fast.budget_held == full.budget_held == {2, 3, 4}


def test_a_backfill_pass_counts_held_the_jobs_its_first_admissions_price_out_before_any_walk_is_skipped():
    """Under backfill a budgeted job's admission prices out 70 more of its account's one-GPU jobs; a
    big job reserves the other node. The whole pass quotes each of the 70 at its turn (each has a
    node with room) and pends it for the budget, so all are counted held, although the first ends
    30 s later and gives back room for the rest, which start without a budget verdict again. The
    windowed pass must walk them (easy.candidates) unless each was counted held already: skipping
    every job its admissions price out would leave 66 of them uncounted."""
    from labq.scheduler.jobs.model import Gpu, Node
    from labq.scheduler.sim.trace import TraceJob
    gib = 1 << 30
    nodes = tuple(Node(f"n{i}", 64, 512 * gib, 64, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(8)))
                  for i in range(2))
    trace = [TraceJob("x", 0.0, 7200.0, 7200, gpus=4, user="x", account="other"),
             TraceJob("y", 0.0, 7200.0, 7200, gpus=4, user="y", account="other"),
             TraceJob("a", 0.0, 30.0, 3570, gpus=1, user="vic", account="vision"),    # $2.00 committed
             TraceJob("b", 0.0, 600.0, 7200, gpus=8, user="b", account="other")]      # reserves n0
    trace += [TraceJob(f"v{k}", 0.0, 30.0, 30, gpus=1, user="vic", account="vision") for k in range(70)]
    cfg = policy_config(config_mod.loads(
        '[[budgets]]\nname = "vision"\naccount = "vision"\nlimit = 2.02\nperiod = "none"\n'), "backfill")
    fast, full = simulate(trace, nodes, cfg), simulate(trace, nodes, cfg, skip=False)
    assert schedule(fast) == schedule(full)
    assert full.budget_held == set(range(5, 75))           # every v, once, at the first pass
    assert fast.budget_held == full.budget_held and fast.spent == full.spent


ROOMY = ('[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = 90000.0\nperiod = "week"\n'
         '[[budgets]]\nname = "rl"\naccount = "vc-rl"\nlimit = 90000.0\nperiod = "none"\n')


@pytest.mark.parametrize("name", ["fifo", "backfill", "fairshare"])
def test_budgets_that_never_bind_add_no_pass(tmp_path, name):
    """An instant where no pending request fits is no pass when every budgeted job's budget provably
    admits it (idle.py `admits_all`: no budget reason to record): budgets with room to spare decide
    exactly as many passes as no budgets, and the same as plan() over every pending job."""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=5, days=2)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    bare = simulate(jobs, nodes, policy_config(config_mod.Config(), name))
    cfg = policy_config(config_mod.loads(ROOMY), name)
    fast, full = simulate(jobs, nodes, cfg), simulate(jobs, nodes, cfg, skip=False)
    assert schedule(fast) == schedule(full) == schedule(bare)
    assert fast.spent == full.spent and fast.spent and not fast.budget_held
    assert fast.instants - fast.plan_skipped == bare.instants - bare.plan_skipped


@pytest.mark.parametrize("name", ["backfill"])
def test_budgets_that_never_bind_add_no_plan_call(tmp_path, monkeypatch, name):
    """A window of one job is for a head whose budget may price out the rest: a head its budget
    provably admits takes the windows of a replay without budgets (easy.py), so budgets with room
    to spare cost no extra plan() call over a deep queue. (Backfill off, both walk the kept queue,
    kept.py, one pass an instant: test_budgets_that_never_bind_add_no_pass counts those.)"""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=5, days=2)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    calls = []
    real = policy.plan
    monkeypatch.setattr(policy, "plan", lambda snap, c, *a, **kw: calls.append(1) or real(snap, c, *a, **kw))
    bare = simulate(jobs, nodes, policy_config(config_mod.Config(), name))
    without, calls[:] = len(calls), []
    fast = simulate(jobs, nodes, policy_config(config_mod.loads(ROOMY), name))
    assert schedule(fast) == schedule(bare) and fast.spent
    assert len(calls) == without


def test_a_budget_charged_only_by_gangs_is_replayed():
    """A budget none of whose jobs can be parked (here: every one a gang over two nodes) is never
    read by a pass start's update; its running jobs' holdings must still come and go (a KeyError
    at the first end before)."""
    from labq.scheduler.sim.trace import TraceJob
    trace = [TraceJob(f"g{k}", 100.0 * k, 600.0, 3600, gpus=16, user="g", account="big") for k in range(3)]
    cfg = policy_config(config_mod.loads('[[budgets]]\nname = "big"\naccount = "big"\nlimit = 1000.0\n'
                                         'period = "week"\n'), "fifo")
    nodes = parse_nodes("2x8:64:512G")
    fast, full = simulate(trace, nodes, cfg), simulate(trace, nodes, cfg, skip=False)
    assert schedule(fast) == schedule(full)
    assert {j.state for j in fast.jobs.values()} == {states.COMPLETED} and fast.spent == full.spent and fast.spent


@pytest.mark.parametrize("name", ["backfill", "learned"])
def test_a_backfill_window_leaves_out_the_jobs_earlier_admissions_price_out(tmp_path, monkeypatch, name):
    """A backfill pass over a deep queue is widened by the jobs that could start (easy.py). One whose
    budget the admissions before it (in plan()'s order) leave without room is pended for it at its
    turn and does nothing else: it is no longer taken into the next, wider call only to be quoted and
    refused again (15,134 budget verdicts for backfill, 13,608 for learned here before). The replay
    still equals whole passes."""
    path = gpu_trace.write(str(tmp_path / "t.csv"), 3000, seed=1, days=4)
    text = '[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = 300.0\nperiod = "week"\n'
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    verdicts = count_budget_verdicts(monkeypatch)
    cfg, hooks = resolve(config_mod.loads(text), name)
    fast = simulate(jobs, nodes, cfg, hooks=hooks)
    monkeypatch.undo()
    assert len(verdicts) < 9000 and len(fast.budget_held) > 900
    cfg, hooks = resolve(config_mod.loads(text), name)
    full = simulate(jobs, nodes, cfg, hooks=hooks, skip=False)
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent


def test_a_queue_limited_budgeted_backfill_replay_equals_whole_passes(tmp_path):
    """A replay that enforces max_pending_per_user while a spent budget keeps jobs idle (sim/idle.py:
    left out of the backfill passes, still queued and counted by the bounds; sim/submit.py read the
    parked ones apart before) refuses the same submits as with whole passes, and some."""
    text = ('[scheduler]\nmax_pending_per_user = 10\n'
            '[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = 20.0\nperiod = "none"\n')
    cfg = policy_config(config_mod.loads(text), "backfill")
    path = gpu_trace.write(str(tmp_path / "t.csv"), 800, seed=5, days=2)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    fast = simulate(jobs, nodes, cfg, queue_limits=True)
    full = simulate(jobs, nodes, cfg, skip=False, queue_limits=True)
    assert schedule(fast) == schedule(full)
    assert [(r.trace.name, r.kind) for r in fast.refused] == [(r.trace.name, r.kind) for r in full.refused]
    assert any(r.kind == "queue" for r in fast.refused)
    assert fast.budget_held == full.budget_held and fast.budget_held
