"""Random budgeted backfill replays, windowed at every depth (easy.py) with a spent budget's jobs left
out as idle by their floors (sim/idle.py), schedule, spend and count budget-held jobs exactly as
replays of whole passes (skip=False): budgets with and without periods, one or two, tight or loose,
accounts that share them or not, GPU models priced apart, some jobs timing out."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim import easy
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.trace import TraceJob

G = 1 << 30
NODES = (Node("a", 32, 256 * G, 32, tuple(Gpu(f"A-{g}", g, "A100") for g in range(4))),
         Node("h", 32, 256 * G, 32, tuple(Gpu(f"H-{g}", g, "H100") for g in range(8))))
ACCOUNTS = ("vision", "rl", "other")

job = st.tuples(st.integers(0, 3000), st.integers(30, 4000), st.sampled_from([1, 1, 1, 2, 4, 8]),
                st.floats(1.0, 3.0), st.sampled_from(ACCOUNTS), st.integers(0, 3))


def trace(rows) -> list[TraceJob]:
    return [TraceJob(name=str(i), submit=float(submit), duration=float(run),
                     time_limit=max(1, int(run * over)) if i % 5 else max(1, run // 2),     # some time out
                     gpus=gpus, cpus=2, user=f"{account}{user}", account=account)
            for i, (submit, run, gpus, over, account, user) in enumerate(sorted(rows))]


def config(vision: float, period: str, rl: float | None, depth: int):
    text = ('[rates]\ngpu_hour_by_model = { "A100" = 1.5, "H100" = 3.0 }\n'
            f'[[budgets]]\nname = "vision"\naccount = "vision"\nlimit = {vision}\nperiod = "{period}"\n')
    if rl is not None:
        text += f'[[budgets]]\nname = "rl"\naccount = "rl"\nlimit = {rl}\nperiod = "none"\n'
    return policy_config(config_mod.loads(text), "backfill", depth)


def schedule(res) -> dict:
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(job, min_size=20, max_size=90), vision=st.sampled_from([2.0, 5.0, 20.0, 200.0]),
       period=st.sampled_from(["none", "week", "month"]), rl=st.sampled_from([None, 1.0, 8.0]),
       depth=st.sampled_from([1, 1, 2]))
def test_a_budgeted_backfill_replay_equals_whole_passes(rows, vision, period, rl, depth):
    jobs, cfg = trace(rows), config(vision, period, rl, depth)
    was, easy.MIN_QUEUE = easy.MIN_QUEUE, 0          # windowed at every depth
    try:
        fast = simulate(jobs, NODES, cfg)
    finally:
        easy.MIN_QUEUE = was
    full = simulate(jobs, NODES, cfg, skip=False)
    assert schedule(fast) == schedule(full)
    assert fast.budget_held == full.budget_held and fast.spent == full.spent
    assert fast.refused == full.refused
