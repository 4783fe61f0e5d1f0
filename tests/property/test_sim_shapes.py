"""The replay's index of pending request shapes (scheduler/sim/room.py `Shapes`): after every submit
and start of a random history of heterogeneous requests (fractional CPUs, memory per job, typed and
untyped GPUs), `within` gives exactly the shapes that fit a room and `fit_some` says whether any fits
some node (plan()'s own fit rule, capacity.Free.fits, over a job of every shape: room.fits_somewhere);
and backfill replays of such requests equal to replays of whole passes."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.policy.capacity import Free, shape
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.room import Shapes, fits_somewhere
from labq.scheduler.sim.trace import TraceJob

G = 1 << 30
req = st.tuples(st.sampled_from([0, 1, 2, 4]), st.sampled_from(["", "A", "B"]), st.sampled_from([0.5, 1, 3.25, 8, 16]),
                st.sampled_from([1, 16, 64]))
rooms = st.lists(st.tuples(st.integers(0, 16), st.integers(0, 80), st.integers(0, 2), st.integers(0, 4),
                           st.integers(0, 4)), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), req), min_size=1, max_size=40), rooms)
def test_the_shape_index_finds_what_a_look_at_every_shape_finds(history, free):
    shapes, pending = Shapes(), {}
    room = {}
    for i, (c, m, slots, a, b) in enumerate(free):
        node = Node(f"n{i}", 16, 80 * G, 2, tuple(Gpu(f"G{i}{k}", k, "A" if k < 4 else "B") for k in range(8)))
        room[node.name] = Free(node, c, m * G, slots, [g for g in node.gpus if g.index < a or 4 <= g.index < 4 + b])
    for n, (add, (gpus, kind, cpus, mem)) in enumerate(history, start=1):
        if add or not pending:
            j = Job(argv=("x",), workdir="/", user="u", account="a", id=n, gpus=gpus, gpu_type=kind, cpus=cpus, mem=mem * G)
            pending[n] = j
            shapes.add(j)
        else:
            shapes.remove(pending.pop(sorted(pending)[n % len(pending)]))
        every = {shape(j) for j in pending.values()}
        assert shapes.fit_some(room) == fits_somewhere(room, list(pending.values()))
        for c, m, slots, a, b in free:
            def free_gpus(g, model, a=a, b=b):
                return (a if model == "A" else b if model == "B" else a + b) >= g
            got = set(shapes.within(c, m * G, free_gpus))
            assert got == {s for s in every if s[2] <= c and s[3] <= m * G and (not s[0] or free_gpus(s[0], s[1]))}


def _schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@pytest.mark.parametrize("seed", range(10))
def test_a_backfill_replay_of_heterogeneous_requests_equals_one_of_whole_passes(seed):
    """About a shape per job (a public trace's fractional CPUs and memory): the head windows
    (sim/easy.py, its candidates drawn from the shape index) schedule as whole passes do."""
    rng = random.Random(seed)
    trace, t = [], 0.0
    while len(trace) < 120:
        t += rng.expovariate(1 / 60)
        gpus = rng.choice([1, 1, 1, 2, 4])
        run = rng.randint(60, 7200)
        trace.append(TraceJob(name=f"j{len(trace)}", submit=t, duration=float(run), time_limit=int(run * rng.uniform(1, 4)),
                              gpus=gpus, cpus=round(gpus * rng.uniform(0.5, 8), 3), mem=int(gpus * rng.uniform(2, 60) * G),
                              user="u"))
    nodes = tuple(Node(f"n{i}", 32, 256 * G, 16, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(4)))
                  for i in range(2))
    c = policy_config(config_mod.Config(), "backfill")
    assert _schedule(simulate(trace, nodes, c)) == _schedule(simulate(trace, nodes, c, skip=False))
