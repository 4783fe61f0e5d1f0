"""A backfill replay that gives plan() only the head of a deep queue (scheduler/sim/easy.py) must
schedule exactly as one that gives plan() the whole queue at every instant (skip=False), whatever
the mix of requests, run times, time limits, depth and cluster."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import config as config_mod
from labq.scheduler.model import Gpu, Node
from labq.scheduler.sim import TraceJob, easy, policy_config, simulate
from labq.scheduler.sim.engine import EPOCH

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


def schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(job, min_size=5, max_size=70), st.integers(1, 3), st.sampled_from([(1, 8), (2, 4), (3, 8)]),
       st.booleans(), st.sampled_from([0, 30]))
def test_a_windowed_backfill_pass_equals_the_whole_one(rows, depth, shape, typed, kill_wait):
    nodes = cluster(*shape)
    if typed:        # a second model on the last node: a request for it has one place to go
        nodes = nodes[:-1] + (cluster(1, shape[1], "B")[0].__class__(
            "nb", 32, 256 * G, 32, tuple(Gpu(f"G-b-{g}", g, "B") for g in range(shape[1]))),)
    cfg = replace(policy_config(config_mod.Config(), "backfill", depth), kill_wait=kill_wait)
    jobs = [j for j in trace(rows, typed) if not j.gpu_type or any(g.model == j.gpu_type for n in nodes for g in n.gpus)]
    easy.MIN_QUEUE, was = 0, easy.MIN_QUEUE         # the windowed pass at every depth, not only deep queues
    try:
        fast = simulate(jobs, nodes, cfg)
    finally:
        easy.MIN_QUEUE = was
    assert schedule(fast) == schedule(simulate(jobs, nodes, cfg, skip=False))


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


@settings(max_examples=60, deadline=None)
@given(st.lists(job, min_size=5, max_size=40), st.integers(1, 3), st.sampled_from([(1, 8), (2, 4), (3, 8)]),
       st.sampled_from([0, 30]))
def test_each_windowed_pass_plans_as_the_whole_queue(rows, depth, shape, kill_wait):
    cfg = replace(policy_config(config_mod.Config(), "backfill", depth), kill_wait=kill_wait)
    with pytest.MonkeyPatch.context() as mp:
        checked(mp)
        simulate(trace(rows, False), cluster(*shape), cfg)


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
