"""A replay whose passes go through plan() with the daemon's kept state (sim/through.py: the request-class
Queue, the backfill Tracks, a Seen of what changed, the replay's Standing) schedules, spends and counts
budget-held jobs exactly as a replay of whole passes (skip=False): backfill at any depth, short jobs
first over learned or true run times, fair share and QoS levels, budgets, preemption, gangs, GPU
models; and none of its passes is easy.py's or a whole pass of the replay's own."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim import easy, through
from labq.scheduler.sim.engine import Simulator, simulate
from labq.scheduler.sim.policies import resolve
from labq.scheduler.sim.trace import TraceJob

G = 1 << 30
ACCOUNTS = ("vision", "rl", "other")
POLICIES = ("backfill", "learned", "sjf-oracle", "fairshare-backfill", "budgets", "preempt")


def cluster(count, gpus, typed):
    nodes = [Node(f"n{i}", 32, 256 * G, 32, tuple(Gpu(f"G-{i}-{g}", g, "A") for g in range(gpus))) for i in range(count)]
    if typed:        # a second model on one more node
        nodes.append(Node("nb", 32, 256 * G, 32, tuple(Gpu(f"G-b-{g}", g, "B") for g in range(gpus))))
    return tuple(nodes)


job = st.tuples(st.integers(0, 400), st.integers(1, 3000), st.sampled_from([1, 1, 1, 2, 4, 8, 16]),
                st.floats(1.0, 4.0), st.sampled_from(ACCOUNTS), st.integers(0, 3), st.sampled_from(["", "", "A", "B"]),
                st.sampled_from(["", "", "low"]))

QOS = ('[qos.normal]\npriority = 100\n'
       '[qos.low]\npriority = 0\npreemptible = true\nmin_runtime = "60s"\ngrace = "30s"\n')
BUDGETS = ('[rates]\ngpu_hour_by_model = { "A" = 1.5, "B" = 3.0 }\n'
           '[[budgets]]\nname = "vision"\naccount = "vision"\nlimit = 3.0\nperiod = "week"\n'
           '[[budgets]]\nname = "rl"\naccount = "rl"\nlimit = 1.0\nperiod = "none"\n')


def trace(rows, nodes):
    models = {g.model for n in nodes for g in n.gpus}
    most = max(len(n.gpus) for n in nodes) * len(nodes)
    out = []
    for i, (submit, run, gpus, over, account, user, gtype, qos) in enumerate(sorted(rows)):
        if gtype and gtype not in models or gpus > most:
            continue
        out.append(TraceJob(name=str(i), submit=float(submit), duration=float(run),
                            time_limit=max(1, int(run * over)) if i % 6 else max(1, run // 2),    # some time out
                            gpus=gpus, cpus=2, user=f"{account}{user}", account=account, gpu_type=gtype,
                            qos=qos or "normal"))
    return out


def replay(policy, depth):
    """(Config, a function giving fresh hooks: Learned keeps state)."""
    text = QOS + (BUDGETS if policy == "budgets" else "")
    base = config_mod.loads(text)
    name = {"fairshare-backfill": "fairshare", "budgets": "backfill", "preempt": "config"}.get(policy, policy)
    cfg, _ = resolve(base, name, depth)
    if policy == "fairshare-backfill":
        cfg = replace(cfg, backfill_depth=depth)
    if policy == "preempt":
        cfg = replace(cfg, backfill_depth=depth, preemption=True)
    return cfg, (lambda: resolve(base, name, depth)[1])


def schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


def only_through(monkeypatch):
    """Fail any pass that is not through.py's (easy.py's head, the replay's whole pass); the times of
    those that are."""
    def no(*a, **k):
        raise AssertionError("a pass that is not through plan() with the kept state")
    monkeypatch.setattr(easy, "plan", no)
    monkeypatch.setattr(Simulator, "_queued", no)
    calls = []
    planned = through.Through.plan

    def counted(self, sim, t):
        calls.append(t)
        return planned(self, sim, t)
    monkeypatch.setattr(through.Through, "plan", counted)
    return calls


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=30, deadline=None)
@given(rows=st.lists(job, min_size=5, max_size=80), depth=st.integers(1, 3),
       shape=st.sampled_from([(1, 8), (2, 4), (3, 8)]), typed=st.booleans())
def test_a_replay_through_the_kept_state_equals_whole_passes(policy, rows, depth, shape, typed):
    nodes = cluster(*shape, typed)
    jobs = trace(rows, nodes)
    cfg, hooks = replay(policy, depth)
    with pytest.MonkeyPatch.context() as mp:
        calls = only_through(mp)
        fast = simulate(jobs, nodes, cfg, hooks=hooks(), through=True)
    full = simulate(jobs, nodes, cfg, skip=False, hooks=hooks())
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent and fast.refused == full.refused
    assert len(calls) == fast.plan_calls


def test_the_seen_finds_a_pass_s_changes_not_the_whole_queue(monkeypatch):
    """200 one-GPU jobs on 8 GPUs: the queue is deep for most of the replay, and after the first pass
    each pass's Seen files what changed (seen.py `_aligned`), never a reading of the whole snapshot."""
    from labq.scheduler.policy import seen
    calls, wholes = only_through(monkeypatch), []
    whole = seen.Seen._whole

    def counted(self, jobs):
        wholes.append(len(jobs))
        return whole(self, jobs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(seen.Seen, "_whole", counted)
        rows = [TraceJob(name=f"j{i}", submit=float(i), duration=float(60 + (i * 37) % 900),
                         time_limit=60 + (i * 37) % 900 + 100, gpus=1, user=f"u{i % 3}") for i in range(200)]
        cfg, hooks = replay("learned", 1)
        res = simulate(rows, cluster(1, 8, False), cfg, hooks=hooks(), through=True)
    assert len(calls) > 100 and wholes == []
    assert schedule(res) == schedule(simulate(rows, cluster(1, 8, False), cfg, skip=False, hooks=hooks()))


def test_runs_that_change_no_record_are_not_applied(monkeypatch):
    """The replay keeps no reasons: where no queued job has an earmark, the runs of jobs pended without
    one are not handed to the applier (which would read each of their jobs: the depth of the queue,
    every pass); the budget-held jobs are counted all the same (tests above)."""
    from labq.scheduler.sim import engine
    given = []
    real = engine.apply_plan

    def counted(p, *a, **k):
        given.append(sum(len(ids) for ids, _ in p.pending.runs()))
        return real(p, *a, **k)
    monkeypatch.setattr(engine, "apply_plan", counted)
    rows = [TraceJob(name=f"j{i}", submit=float(i), duration=float(600 + (i * 37) % 900),
                     time_limit=2000, gpus=1 + i % 2, user=f"u{i % 3}") for i in range(300)]
    cfg, hooks = replay("backfill", 1)
    simulate(rows, cluster(1, 8, False), cfg, hooks=hooks(), through=True)
    assert len(given) > 100 and sum(given) < 10 * len(given), (sum(given), len(given))


def bench_trace(tmp_path, n, seed):
    """bench/gpu_trace.py's seeded trace of `n` jobs at offered load 9 on 64 GPUs."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import gpu_trace

    from labq.scheduler.sim.trace import load
    return load(gpu_trace.write(str(tmp_path / "t.csv"), n, seed, gpu_trace.days_for_load(n, seed, 9.0, 64)))


@pytest.mark.parametrize("n,seed,policy", [(300, 1, "backfill"), (600, 2, "backfill"), (400, 3, "learned")])
def test_a_deep_replay_of_the_bench_trace_through_the_kept_state_equals_whole_passes(tmp_path, n, seed, policy):
    """bench/gpu_trace.py's trace at offered load ~36 on 16 GPUs: a queue deep for most of the replay,
    whose settled passes take blocks of passed classes with Reservation shapes whose shortest class has
    started since (blocks.py `_passes`: its span a lower bound); the random traces above seldom reach them
    (taking that bound for passed whatever it is leaves them green, and fails this)."""
    from labq.cli.whatif import parse_nodes
    nodes, jobs = parse_nodes("2x8:64:512G"), bench_trace(tmp_path, n, seed)
    cfg, hooks = resolve(config_mod.Config(), policy)
    fast = simulate(jobs, nodes, cfg, hooks=hooks, through=True)
    full = simulate(jobs, nodes, cfg, skip=False, hooks=resolve(config_mod.Config(), policy)[1])
    assert schedule(fast) == schedule(full)


@pytest.mark.parametrize("n,policy", [(3000, "backfill"), (3000, "learned"), (2000, "sjf-oracle")])
def test_thousands_of_jobs_deep_through_the_kept_state_schedule_as_the_replay_s_own_passes(tmp_path, n, policy):
    """The bench trace's first thousands of jobs on 64 GPUs (bench/run.py's replay rows at a tenth of their
    length): a queue of hundreds to thousands for days, whose passes cut blocks of hundreds of classes
    where a shape that took Reservation has a later class with room (blocks.first_unknown). Whole passes
    cost too much there; the replay's own path (easy.py, order.py, held to whole passes by their tests)
    is the reference. Taking every later class of a Reservation shape as passed (first_unknown without
    its bound check) leaves the small replays above green and fails this."""
    from labq.cli.whatif import parse_nodes
    nodes, jobs = parse_nodes("8x8:64:512G"), bench_trace(tmp_path, n, 1)
    cfg, hooks = resolve(config_mod.Config(), policy)
    fast = simulate(jobs, nodes, cfg, hooks=hooks, through=True)
    own = simulate(jobs, nodes, cfg, hooks=resolve(config_mod.Config(), policy)[1])
    assert schedule(fast) == schedule(own)
