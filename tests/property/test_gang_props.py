"""Gang placement properties on random clusters with multi-node jobs, running and pending:
all or nothing (a gang is placed on exactly its node count, its shape on each, never over a node);
backfill never delays a gang's reservation; preemption frees a whole gang's room or nothing."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.daemon import applier, transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Snapshot
from labq.scheduler.policy import capacity
from tests.harness import ClusterBuilder, G, cfg, forward_until_started

HOUR = 3600

CONFIG = cfg("""
[scheduler]
backfill_depth = 3
kill_wait = 0
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
min_runtime = "0s"
[qos.high]
priority = 200
""")


@st.composite
def gang_clusters(draw):
    b = ClusterBuilder()
    for i in range(draw(st.integers(2, 4))):
        b.node(f"n{i}", gpus=draw(st.sampled_from([2, 4, 8])), cpus=draw(st.sampled_from([8, 16])), mem=64 * G,
               slots=draw(st.integers(2, 4)))
    for _ in range(draw(st.integers(0, 6))):
        free = capacity.free_capacity(b.nodes, b.jobs, b.now)
        k = draw(st.integers(1, 2))
        shape = dict(gpus=draw(st.integers(0, 4)), cpus=draw(st.integers(1, 4)))
        room = [f.node.name for f in free.values()
                if len(f.gpus) >= shape["gpus"] and f.cpus >= shape["cpus"] and f.slots >= 1]
        if len(room) < k:
            continue
        kw = dict(qos=draw(st.sampled_from(["normal", "low", "low"])), started_ago=draw(st.integers(0, 3 * HOUR)),
                  time_limit=draw(st.integers(HOUR, 4 * HOUR)), **shape)
        if k == 1:
            b.running(draw(st.sampled_from(room)), **kw)
        else:
            b.running_gang(sorted(draw(st.permutations(room)))[:k], **kw)
    for _ in range(draw(st.integers(1, 10))):
        b.job(gpus=draw(st.integers(0, 4)), cpus=draw(st.integers(1, 8)), nodes=draw(st.sampled_from([1, 1, 2, 3])),
              qos=draw(st.sampled_from(["normal", "low", "high"])), time_limit=draw(st.integers(600, 4 * HOUR)),
              submit_offset=draw(st.integers(-50, 50)))
    nodes = tuple(replace(n, lease_expiry=float("inf")) for n in b.nodes)
    return replace(b.build(), nodes=nodes)


def _after(snap: Snapshot, plan, gone=()) -> dict:
    """Free capacity once the plan's admissions run and the jobs `gone` have stopped."""
    jobs = {j.id: j for j in snap.jobs if j.id not in gone}
    for pl in plan.places:
        jobs[pl.job_id] = tr.admit(jobs[pl.job_id], pl, snap.now)
    return capacity.free_capacity(snap.nodes, list(jobs.values()), snap.now)


@settings(max_examples=200, deadline=None)
@given(gang_clusters())
def test_a_gang_is_placed_whole_or_not_at_all_and_no_node_is_overcommitted(snap):
    p = policy.plan(snap, CONFIG)
    jobs = {j.id: j for j in snap.jobs}
    models = {g.uuid: n.name for n in snap.nodes for g in n.gpus}
    for pl in p.places:
        j = jobs[pl.job_id]
        parts = pl.parts or ((pl.node, pl.gpus),)
        assert len(parts) == j.nodes and len({n for n, _ in parts}) == j.nodes
        for node, gpus in parts:
            assert len(gpus) == j.gpus and all(models[u] == node for u in gpus)
        assert pl.node == parts[0][0] and list(pl.gpus) == [u for _, g in parts for u in g]
    for f in _after(snap, p).values():
        assert f.slots >= 0 and f.cpus >= 0 and f.mem >= 0
    # the applier, which trusts nothing the planner said, takes every gang whole
    by_id = {j.id: j for j in snap.jobs}
    assert applier.apply_plan(p, by_id, by_id, snap.nodes, snap.now).rejected == ()
    held = [u for pl in p.places for u in pl.gpus] + [u for j in snap.jobs if j.state in states.ON_NODE
                                                      for u in j.gpu_uuids]
    assert len(held) == len(set(held))


@settings(max_examples=80, deadline=None)
@given(gang_clusters())
def test_backfill_never_delays_a_gangs_reservation(snap):
    c = replace(CONFIG, preemption=False)
    p = policy.plan(snap, c)
    jobs = {j.id: j for j in snap.jobs}
    for start in p.starts[:1]:
        if jobs[start.job_id].nodes < 2:
            continue
        assert len(start.node.split(",")) == jobs[start.job_id].nodes
        began = forward_until_started(snap, c, start.job_id, start.at + 1)
        assert began is not None and began <= start.at + 1e-6, (start, began)


@settings(max_examples=200, deadline=None)
@given(gang_clusters())
def test_preemption_frees_a_whole_gangs_room_or_nothing(snap):
    p = policy.plan(snap, CONFIG)
    jobs = {j.id: j for j in snap.jobs}
    pend = {x.job_id: x for x in p.pending}
    victims = {x.job_id for x in p.preempts}
    free = _after(snap, p, gone=victims)
    for jid in {x.for_job for x in p.preempts}:
        j = jobs[jid]
        x = pend[jid]
        assert x.reason == states.PREEMPTING_FOR
        nodes = x.earmark.split(",")
        assert len(nodes) == j.nodes == len(set(nodes))
        # once its victims have stopped, every node of the earmark holds the gang's shape and a slot
        assert all(free[n].fits(j) for n in nodes), (nodes, p)
    for x in p.pending:     # no half-earmark: a gang waiting for room keeps all its nodes or none
        if x.earmark:
            assert len(x.earmark.split(",")) == jobs[x.job_id].nodes
