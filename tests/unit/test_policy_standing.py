"""The running jobs' free capacity and quota usage kept by the daemon from pass to pass
(policy.Kept -> policy.Standing): counted from what changed, as the simulator does, equal to a count
over every node and running job (capacity.free_capacity, quota.Usage), and recounted whole only
when a node changed more than its lease or a lease ran out."""
from dataclasses import replace

from labq.scheduler.jobs import states
from labq.scheduler.policy import capacity
from labq.scheduler.policy.kept import Kept
from labq.scheduler.policy.quota import Usage
from tests.harness import ClusterBuilder, cfg

COUNTERS = ("jobs", "gpus", "cpus", "user_jobs", "user_gpus", "user_cpus", "tasks", "qos_gpus")


def _counted(kept, snap, c):
    """The Standing Kept gives for `snap`, checked against a whole count of its running jobs."""
    s = kept.inputs(snap, c)["standing"]
    running = [j for j in snap.jobs if j.state in states.ON_NODE]
    whole = capacity.free_capacity(snap.nodes, running, snap.now)
    assert {n: (f.node, f.cpus, f.mem, f.slots, f.gpus) for n, f in s.placer.free.items()} == \
           {n: (f.node, f.cpus, f.mem, f.slots, f.gpus) for n, f in whole.items()}
    assert {k: sorted(b) for k, b in s.placer.buckets.items() if b} == \
           {k: sorted(b) for k, b in capacity.Placer(whole).buckets.items() if b}
    usage = Usage(running, c, sum(len(f.gpus) for f in whole.values()))
    assert s.usage.free_gpus == usage.free_gpus
    for name in COUNTERS:
        assert +getattr(s.usage, name) == +getattr(usage, name), name    # `+`: zero counts dropped
    return s


def _scene():
    b = ClusterBuilder().node("n0", gpus=4, cpus=16).node("n1", gpus=4, cpus=16).node("n2", gpus=2, cpus=8)
    b.running("n0", gpus=2, cpus=2, account="a", user="alice")
    b.running("n0", gpus=1, cpus=1, account="b", user="bob")
    b.running("n1", gpus=4, cpus=4, account="a", user="carol")
    b.running_gang(["n1", "n2"], gpus=0, cpus=1, account="b", user="bob")
    b.job(gpus=1, cpus=1)
    return b.build(), cfg("[scheduler]\nbackfill_depth = 2\n")


def test_a_pass_whose_running_jobs_and_nodes_did_not_change_counts_nothing_again(monkeypatch):
    snap, c = _scene()
    kept = Kept()
    first = _counted(kept, snap, c)
    calls = []
    monkeypatch.setattr("labq.scheduler.policy.standing.free_capacity",
                        lambda *a: calls.append(a) or capacity.free_capacity(*a))
    # the clock moves, every node heartbeats (a new record, a later lease), a pending job is new
    later = replace(snap, now=snap.now + 5,
                    nodes=tuple(replace(n, lease_expiry=snap.now + 35, last_heartbeat=snap.now + 5) for n in snap.nodes),
                    jobs=(*snap.jobs, replace(snap.jobs[-1], id=99)))
    assert _counted(kept, later, c) is first and not calls


def test_starts_and_ends_are_counted_as_they_come():
    snap, c = _scene()
    kept = Kept()
    first = _counted(kept, snap, c)
    on = [j for j in snap.jobs if j.state in states.ON_NODE]
    ended, moved = on[0], on[2]
    waiting = [j for j in snap.jobs if j.state == states.PENDING][0]
    started = replace(waiting, state=states.RUNNING, node="n2", gpu_uuids=("GPU-n2-0",), start_time=snap.now)
    jobs = [j for j in snap.jobs if j is not ended and j is not waiting]
    jobs[jobs.index(moved)] = replace(moved, state=states.PREEMPTING)      # a new record, the same room
    later = replace(snap, now=snap.now + 1, jobs=(*jobs, started))
    assert _counted(kept, later, c) is first
    gone = replace(later, now=later.now + 1, jobs=tuple(j for j in later.jobs if j.state != states.PREEMPTING))
    assert _counted(kept, gone, c) is first


def test_a_node_that_changed_or_whose_lease_ran_out_is_counted_whole_again():
    snap, c = _scene()
    kept = Kept()
    first = _counted(kept, snap, c)
    nodes = list(snap.nodes)
    nodes[2] = replace(nodes[2], state="drain")
    drained = _counted(kept, replace(snap, nodes=tuple(nodes)), c)
    assert drained is not first and "n2" not in drained.placer.free
    nodes[2] = replace(nodes[2], state="up", lease_expiry=snap.now + 3)
    again = _counted(kept, replace(snap, nodes=tuple(nodes)), c)
    assert "n2" in again.placer.free
    beat = tuple(replace(n, lease_expiry=snap.now + 34) for n in nodes[:2]) + (nodes[2],)
    lapsed = _counted(kept, replace(snap, now=snap.now + 4, nodes=beat), c)   # n2's lease ran out, the rest beat
    assert lapsed is not again and "n2" not in lapsed.placer.free
    assert _counted(kept, snap, replace(c, backfill_depth=3)) is not lapsed            # another config
