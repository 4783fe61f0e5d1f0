"""A backfill replay that gives plan() only the head of a deep queue (scheduler/sim/easy.py) must
schedule exactly as one that gives plan() the whole queue at every instant (skip=False), whatever
the mix of requests, run times, time limits, depth and cluster; and so under `learned` and
`sjf-oracle` (short jobs first, backfill over expected run times: the head drawn in plan()'s order
by order.py, the runs counted as backfill counts them)."""
import os
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from labq.cli.whatif import parse_nodes
from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim import easy
from labq.scheduler.sim.engine import EPOCH, simulate
from labq.scheduler.sim.metrics import report
from labq.scheduler.sim.policies import policy_config, resolve
from labq.scheduler.sim.trace import TraceJob, load
from tests.harness import DATA

G = 1 << 30


def cluster(count, gpus, model="A"):
    return tuple(Node(f"n{i}", 32, 256 * G, 32, tuple(Gpu(f"G-{i}-{g}", g, model) for g in range(gpus)))
                 for i in range(count))


job = st.tuples(st.integers(0, 400), st.integers(1, 900), st.sampled_from([1, 1, 1, 2, 4, 8]),
                st.floats(1.0, 4.0), st.sampled_from([1, 2, 4]), st.sampled_from(["", "A", "B"]))


def trace(rows, typed):
    out = []
    for i, (submit, run, gpus, over, cpus, gtype) in enumerate(sorted(rows)):
        out.append(TraceJob(name=str(i), submit=float(submit), duration=float(run),
                            time_limit=max(1, int(run * over)) if i % 7 else max(1, run // 2),   # some time out
                            gpus=gpus, cpus=cpus, user=f"u{i % 3}", gpu_type=gtype if typed else ""))
    return out


# backfill-learned: backfill in submit order over learned run times (bench/learned_bench.py's row).
POLICIES = ("backfill", "learned", "sjf-oracle", "backfill-learned")


def replay(policy, depth, kill_wait, aging):
    """(Config, a fresh hooks object per call: Learned keeps state) of `policy`; `aging`: a short
    age_max and short_job_scale, so that waiting can overtake a shorter run within a trace's span."""
    base = config_mod.Config()
    if aging:
        base = replace(base, priority=base.priority.with_(age_max=600.0, short_job_scale=120.0))
    if policy == "backfill-learned":
        base = policy_config(base, "backfill", depth)
        base, policy = replace(base, estimate=base.estimate.with_(backfill=True)), "config"
    cfg, _ = resolve(base, policy, depth)
    return replace(cfg, kill_wait=kill_wait), (lambda: resolve(base, policy, depth)[1])


def schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40, deadline=None)
@given(st.lists(job, min_size=5, max_size=70), st.integers(1, 3), st.sampled_from([(1, 8), (2, 4), (3, 8)]),
       st.booleans(), st.sampled_from([0, 30]), st.booleans())
def test_a_windowed_backfill_pass_equals_the_whole_one(policy, rows, depth, shape, typed, kill_wait, aging):
    nodes = cluster(*shape)
    if typed:        # a second model on the last node: a request for it has one place to go
        nodes = nodes[:-1] + (cluster(1, shape[1], "B")[0].__class__(
            "nb", 32, 256 * G, 32, tuple(Gpu(f"G-b-{g}", g, "B") for g in range(shape[1]))),)
    cfg, hooks = replay(policy, depth, kill_wait, aging)
    jobs = [j for j in trace(rows, typed) if not j.gpu_type or any(g.model == j.gpu_type for n in nodes for g in n.gpus)]
    easy.MIN_QUEUE, was = 0, easy.MIN_QUEUE         # the windowed pass at every depth, not only deep queues
    try:
        fast = simulate(jobs, nodes, cfg, hooks=hooks())
    finally:
        easy.MIN_QUEUE = was
    assert schedule(fast) == schedule(simulate(jobs, nodes, cfg, skip=False, hooks=hooks()))


def checked(monkeypatch):
    """easy.plan, checked at every pass against plan() over the whole queue: the same admissions and
    the same reservations (which decide later passes only through what they let start)."""
    windowed = easy.plan
    seen = []

    def both(sim, t):
        p = windowed(sim, t)
        whole = sim._call(t, tuple(sim.queue.jobs.values()))
        assert (p.places, p.starts, p.expires, p.preempts) == (whole.places, whole.starts, whole.expires, whole.preempts)
        seen.append(t)
        return p
    monkeypatch.setattr(easy, "plan", both)
    monkeypatch.setattr(easy, "MIN_QUEUE", 0)
    return seen


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None)
@given(st.lists(job, min_size=5, max_size=40), st.integers(1, 3), st.sampled_from([(1, 8), (2, 4), (3, 8)]),
       st.sampled_from([0, 30]), st.booleans())
def test_each_windowed_pass_plans_as_the_whole_queue(policy, rows, depth, shape, kill_wait, aging):
    cfg, hooks = replay(policy, depth, kill_wait, aging)
    with pytest.MonkeyPatch.context() as mp:
        checked(mp)
        simulate(trace(rows, False), cluster(*shape), cfg, hooks=hooks())


def test_a_pass_whose_head_all_starts_reserves_for_the_first_job_that_does_not_fit(monkeypatch):
    """8 GPUs, 2 of them held until t=990. At t=10: four 1-GPU jobs (they start), an 8-GPU job
    (fits nowhere now: the reservation is its), a 3-GPU one (fits the room before the four start,
    not after: it must not take the reservation) and a 2-GPU one that would cross it."""
    seen = checked(monkeypatch)
    rows = [TraceJob(name="r", submit=0.0, duration=990.0, time_limit=990, gpus=2, user="u")]
    rows += [TraceJob(name=f"h{i}", submit=10.0, duration=100.0, time_limit=100, gpus=1, user="u") for i in range(4)]
    rows += [TraceJob(name="big", submit=10.0, duration=100.0, time_limit=100, gpus=8, user="u"),
             TraceJob(name="mid", submit=10.0, duration=50.0, time_limit=50, gpus=3, user="u"),
             TraceJob(name="long", submit=10.0, duration=5000.0, time_limit=5000, gpus=2, user="u")]
    cfg = policy_config(config_mod.Config(), "backfill", 1)
    res = simulate(rows, cluster(1, 8), cfg)
    start = {j.name: j.attempts[0].dispatch_time - EPOCH for j in res.jobs.values()}
    assert EPOCH + 10 in seen and start["big"] == 990 and start["long"] >= 990 + 100


def test_many_jobs_that_could_backfill_are_found_in_queue_order(monkeypatch):
    """16 GPUs, 8 held until t=1000; at t=10 a 16-GPU job (its reservation at 1000) and 30 1-GPU jobs
    that end before it: 8 start, found by the queue-order scan (more than 16 could)."""
    seen = checked(monkeypatch)
    rows = [TraceJob(name="r", submit=0.0, duration=990.0, time_limit=990, gpus=8, user="u"),
            TraceJob(name="big", submit=10.0, duration=100.0, time_limit=100, gpus=16, user="u")]
    rows += [TraceJob(name=f"a{i}", submit=10.0, duration=600.0, time_limit=600, gpus=1, user="u") for i in range(30)]
    res = simulate(rows, cluster(1, 16), policy_config(config_mod.Config(), "backfill", 1))
    start = {j.name: j.attempts[0].dispatch_time - EPOCH for j in res.jobs.values()}
    assert EPOCH + 10 in seen and sorted(start[f"a{i}"] for i in range(8)) == [10] * 8 and start["big"] == 990


@pytest.mark.parametrize("policy", ["learned", "sjf-oracle"])
def test_short_jobs_first_passes_over_a_deep_queue_are_windowed(policy, monkeypatch):
    """400 one-GPU jobs of mixed runs on 8 GPUs: the queue is deep for most of the replay, and the
    passes over it give plan() a few jobs, not the queue (before order.py they gave it all)."""
    from labq.scheduler.sim.engine import Simulator
    sizes = []
    whole = Simulator._call

    def call(self, t, pending, usage=None):
        sizes.append((len(pending), len(self.queue)))
        return whole(self, t, pending, usage)
    monkeypatch.setattr(Simulator, "_call", call)
    rows = [TraceJob(name=f"j{i}", submit=float(i), duration=float(60 + (i * 37) % 900),
                     time_limit=60 + (i * 37) % 900 + 100, gpus=1, user=f"u{i % 3}") for i in range(400)]
    cfg, hooks = replay(policy, 1, 0, False)
    fast = simulate(rows, cluster(1, 8), cfg, hooks=hooks())
    deep = [(n, q) for n, q in sizes if q > 2 * easy.MIN_QUEUE]
    assert deep and sum(n for n, _ in deep) < sum(q for _, q in deep) / 10
    assert schedule(fast) == schedule(simulate(rows, cluster(1, 8), cfg, skip=False, hooks=hooks()))


def test_a_job_backfills_on_its_expected_run_not_its_limit(monkeypatch):
    """sjf-oracle, 8 GPUs, aging within 600 s. At t=700 one of two running 4-GPU jobs ends; the other
    is expected to end at 2000. Pending, in plan()'s order: an 8-GPU job (reserved at 2000), nine
    1-GPU jobs that would run past it (more than the first call's extras take), then a 2-GPU job of
    500 s under a 5000-s limit: it ends before the reservation as backfill counts it (its expected
    run), so it starts at 700, windowed or not."""
    seen = checked(monkeypatch)
    rows = [TraceJob(name="r1", submit=0.0, duration=700.0, time_limit=800, gpus=4, user="u"),
            TraceJob(name="r2", submit=0.0, duration=2000.0, time_limit=2100, gpus=4, user="u"),
            TraceJob(name="big", submit=1.0, duration=50.0, time_limit=50, gpus=8, user="u")]
    rows += [TraceJob(name=f"x{i}", submit=2.0 + i, duration=3000.0, time_limit=3000, gpus=1, user="u")
             for i in range(9)]
    rows += [TraceJob(name="short", submit=690.0, duration=500.0, time_limit=5000, gpus=2, user="u")]
    cfg, hooks = replay("sjf-oracle", 1, 0, True)
    res = simulate(rows, cluster(1, 8), cfg, hooks=hooks())
    start = {j.name: j.attempts[0].dispatch_time - EPOCH for j in res.jobs.values()}
    assert EPOCH + 700 in seen and start["short"] == 700 and start["big"] == 2000


@pytest.mark.parametrize("policy", ["backfill-learned", "learned"])
def test_a_budgeted_replay_over_learned_runs_equals_whole_passes(tmp_path, monkeypatch, policy):
    """Budgets that run out (sim/idle.py, easy.py's budget paths) with backfill over learned run
    times: windowed in submit order (backfill-learned), whole passes under short jobs first (order.py
    is not used with budgets); either way the schedule, spending and budget-held jobs of whole passes."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import gpu_trace
    text = ('[[budgets]]\nname = "vision"\naccount = "vc-vision"\nlimit = 150.0\nperiod = "week"\n'
            '[[budgets]]\nname = "rl"\naccount = "vc-rl"\nlimit = 40.0\nperiod = "none"\n')
    base = config_mod.loads(text)
    if policy == "backfill-learned":
        base = policy_config(base, "backfill")
        base, policy = replace(base, estimate=base.estimate.with_(backfill=True)), "config"
    path = gpu_trace.write(str(tmp_path / "t.csv"), 500, seed=5, days=2)
    nodes, jobs = parse_nodes("2x8:64:512G"), load(path)
    cfg, hooks = resolve(base, policy)
    monkeypatch.setattr(easy, "MIN_QUEUE", 0)          # windowed at every depth
    fast = simulate(jobs, nodes, cfg, hooks=hooks)
    full = simulate(jobs, nodes, cfg, skip=False, hooks=resolve(base, policy)[1])
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert report(fast)["held_by_budget"]["jobs"] > 0


@pytest.mark.parametrize("policy", ["learned", "sjf-oracle"])
@pytest.mark.parametrize("cpus", [16, 40, 100])
def test_the_kth_excerpt_windowed_equals_whole_passes(monkeypatch, policy, cpus):
    """300 jobs of the KTH SP2 log (each job's requested time its limit) on one machine, windowed at
    every depth: the schedule of whole passes."""
    jobs = load(os.path.join(DATA, "kth_sp2_excerpt.csv"), extra=os.path.join(DATA, "kth_sp2_excerpt_extra.csv"),
                time_column="req_time_s")
    machine = (Node("n0", cpus, 64 << 30, cpus),)
    cfg, hooks = replay(policy, None, 30, False)
    monkeypatch.setattr(easy, "MIN_QUEUE", 0)
    fast = simulate(jobs, machine, cfg, hooks=hooks())
    assert schedule(fast) == schedule(simulate(jobs, machine, cfg, skip=False, hooks=hooks()))
