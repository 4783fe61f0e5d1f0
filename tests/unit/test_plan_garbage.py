"""A pass leaves no reference cycle behind: its state (the walk, its Reach, Timelines, Placer,
Snapshot: ~150 objects) is freed by refcounting as plan() returns. The walk's counting wrappers of
the pass's methods held the pass and were held by it, so every pass went to the cyclic garbage
collector: a fifth of a deep replay's CPU (SIM_BENCH_THROUGH=1 bench/sim_bench.py on 50,000 jobs),
and its garbage kept until then."""
import gc

from labq.scheduler import policy
from labq.scheduler.policy.queue import Queue
from tests.harness import ClusterBuilder, cfg


def _queue_behind_a_full_node():
    b = ClusterBuilder().node("n1", gpus=2).node("n2", gpus=2).running("n1", gpus=2)
    for i in range(6):
        b.job(gpus=1 + i % 2, submit_offset=-50 + i)
    return b.build()


def test_a_pass_leaves_no_cycles_to_the_garbage_collector():
    snap, c = _queue_behind_a_full_node(), cfg()
    c_backfill = cfg("[scheduler]\nbackfill_depth = 2\n")
    queue = Queue()
    plans = [policy.plan(snap, c), policy.plan(snap, c_backfill), policy.plan(snap, c_backfill, queue=queue)]
    assert all(p.places for p in plans)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for c_ in (c, c_backfill):
            policy.plan(snap, c_)                          # a fresh pass: the class walk or job by job
        policy.plan(snap, c_backfill, queue=queue)         # the daemon's: a kept Queue
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
