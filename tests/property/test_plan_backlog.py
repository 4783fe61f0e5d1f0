"""The pending queue kept in order job by job (policy/backlog.py) and the backfill-off pass over it
(policy/strict.py `run_kept`): the Backlog's burst tails and groups against a whole pass's after every
submit and start of a random history, and 30 random replays (sim/kept.py: each pass over the kept
queue, instants where the first job fits nowhere skipped) against replays of whole passes over every
pending job.
test_plan_strict.py checks plan() over a Backlog against the per-job pass on random snapshots."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.multifactor import burst_tail
from labq.scheduler.policy.backlog import Backlog, gated
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import Simulator, simulate
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.trace import TraceJob
from tests.harness import G

ops = st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 40), st.sampled_from(["a", "b"])),
               min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 4), st.sampled_from([0, 1, 5, 30]))
def test_the_backlog_keeps_the_burst_tails_and_groups_of_the_whole_queue(history, allowance, window):
    b = Backlog((allowance, window))
    pending: dict[int, Job] = {}
    for n, (submit, user, t, qos) in enumerate(history, start=1):
        if submit or not pending:
            job = Job(argv=("x",), workdir="/", account="a", id=n, user=f"u{user}", submit_time=float(t), qos=qos,
                      held=n % 7 == 0)
            pending[n] = job
            b.add(job)
        else:
            gone = pending.pop(sorted(pending)[t % len(pending)])
            assert b.remove(gone.id) is gone
        tails = burst_tail(list(pending.values()), allowance, window)
        assert b.bursting == tails
        filed = []
        for key, g in b.groups.items():
            assert g.jobs == sorted(g.jobs, key=lambda j: (j.submit_time, j.id)) and g.ids == [j.id for j in g.jobs]
            assert all((j.qos, j.account, j.id in tails, gated(j)) == key for j in g.jobs)
            filed += g.ids
        assert sorted(filed) == sorted(pending) and len(b) == len(pending)


def _trace(rng: random.Random) -> list[TraceJob]:
    """A deep queue of one or a few users' sweeps (burst tails), two QoS levels, a few gangs, more work
    than fits."""
    out, t = [], 0.0
    users = rng.choice([["u0"], ["u0", "u1", "u2"]])
    while len(out) < 70:
        t += rng.expovariate(1 / 100)
        user, gpus = rng.choice(users), rng.choice([1, 1, 2, 4, 1, 1, 2, 4, 8])     # 8: a gang of two nodes
        for _ in range(rng.choice([1, 1, 3, 8])):
            run = rng.randint(60, 7200)
            out.append(TraceJob(name=f"j{len(out)}", submit=t, duration=float(run), time_limit=run * 2, gpus=gpus,
                                user=user, account=rng.choice(["", "eta"]), qos=rng.choice(["normal", "normal", "low"])))
    return out


def _schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@pytest.mark.parametrize("seed", range(30))
def test_a_replay_over_the_kept_queue_equals_one_of_whole_passes(seed):
    rng = random.Random(seed)
    trace = _trace(rng)
    nodes = tuple(Node(f"n{i}", 16, 64 * G, 16, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(4)))
                  for i in range(2))
    base = config_mod.loads(f'[priority]\nburst_jobs = {rng.choice([2, 3, 5])}\nburst_window = "10m"\n'
                            '[qos.normal]\npriority = 10\n[qos.low]\npriority = 0\npreemptible = true\n'
                            '[accounts.eta]\nusers = ["u0", "u1"]\nshare = 2\n')
    c = policy_config(base, rng.choice(["fifo", "priority", "fairshare"]))
    assert Simulator(trace, nodes, c).queue.backlog is not None
    fast, full = simulate(trace, nodes, c), simulate(trace, nodes, c, skip=False)
    assert _schedule(fast) == _schedule(full)
    assert fast.plan_calls < full.plan_calls and fast.plan_skipped
