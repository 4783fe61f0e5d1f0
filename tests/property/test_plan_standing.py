"""plan() given a kept Standing (the free capacity and quota usage of the running jobs, told each
start and end: policy/standing.py) decides as the plan() that counts the running jobs itself, on the
random snapshots of test_plan_classes (drained nodes, gangs, caps, guarantees, protected QoS
capacity, budgets); and the pass leaves the Standing as it found it."""
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler import policy, states
from tests.property.test_plan_classes import same, scenes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.randoms(use_true_random=False))
def test_a_pass_from_a_kept_standing_decides_as_one_that_counts_the_running_jobs(scene, rnd):
    snap, c = scene
    running = [j for j in snap.jobs if j.state in states.ON_NODE]
    standing = policy.Standing(snap.nodes, c, snap.now)
    order = rnd.sample(running, len(running))
    for j in order:
        standing.start(j)
    for j in order[:len(order) // 2]:       # ended and started again: an end gives back what its start took
        standing.end(j)
        standing.start(j)
    whole = policy.plan(snap, c)
    same(policy.plan(snap, c, standing=standing), whole)
    same(policy.plan(snap, c, standing=standing), whole)    # the first pass changed nothing in it


def test_a_standing_told_of_fewer_jobs_gives_another_plan():
    """The check above can fail: a Standing that missed a running job's start lets the pass place a
    job on that job's GPUs."""
    from tests.harness import ClusterBuilder, cfg
    b = ClusterBuilder().node("n", gpus=2).running("n", gpus=2).job(gpus=1)
    snap, c = b.build(), cfg()
    standing = policy.Standing(snap.nodes, c, snap.now)
    assert not policy.plan(snap, c).places
    assert policy.plan(snap, c, standing=standing).places
