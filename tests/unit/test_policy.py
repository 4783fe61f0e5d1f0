"""plan() as a pure function: capacity, caps, budget gate, expiry, order, reasons. No Redis."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job, Snapshot
from labq.scheduler.policy.refusal import refusal
from tests.harness import SWEEP_TOML, ClusterBuilder, G, cfg, summarize

SWEEP = cfg(SWEEP_TOML)


def test_sweep_admits_one_wave_of_four_and_says_why_the_rest_wait():
    b = ClusterBuilder().node("n1", gpus=4, cpus=16, mem=64 * G)
    for _ in range(12):
        b.job(gpus=1, cpus=4, mem=12 * G, time_limit=7200, account="eta")
    s = summarize(policy.plan(b.build(), SWEEP))
    assert sorted(s["places"]) == [1, 2, 3, 4]
    assert sorted(g for _, gs in s["places"].values() for g in gs) == [f"GPU-n1-{i}" for i in range(4)]
    # The first pass took the free room: the others wait on Priority, not on a budget.
    assert set(s["pending"].values()) == {states.PRIORITY}
    p = policy.plan(b.build(), SWEEP).places[0]
    # 1 GPU × (2 h + kill_wait 30 s) × $2, in micro-dollars: safe mode commits all that can be billed
    assert p.commit == (("eta-sweep", 4_016_666),)
    assert p.cost_rate == 2_000_000


def test_resources_reason_when_the_cluster_was_full_before_the_pass():
    b = ClusterBuilder().node("n1", gpus=2).running("n1", gpus=2).job(gpus=1)
    assert summarize(policy.plan(b.build(), cfg()))["pending"] == {2: states.RESOURCES}


def test_best_fit_prefers_the_tightest_node_and_keeps_big_holes():
    b = ClusterBuilder().node("big", gpus=8).node("small", gpus=2).running("small", gpus=1).job(gpus=1)
    assert summarize(policy.plan(b.build(), cfg()))["places"][2][0] == "small"


def test_gpu_model_is_matched():
    b = (ClusterBuilder().node("a", gpus=4, model="A100").node("h", gpus=4, model="H100")
         .job(gpus=2, gpu_type="H100"))
    node, gpus = summarize(policy.plan(b.build(), cfg()))["places"][1]
    assert node == "h" and gpus == ("GPU-h-0", "GPU-h-1")


@pytest.mark.parametrize("state,lease", [("drain", 30.0), ("up", 0.0), ("down", 30.0)])
def test_nodes_not_up_take_nothing(state, lease):
    b = ClusterBuilder().node("n1", gpus=4, state=state, lease=lease).job(gpus=1)
    assert summarize(policy.plan(b.build(), cfg()))["pending"] == {1: states.NODE_DOWN}


def test_cpu_memory_and_slots_are_each_binding():
    c = cfg()
    assert summarize(policy.plan(ClusterBuilder().node("n", cpus=4).job(cpus=3).job(cpus=2).build(), c))[
        "pending"] == {2: states.PRIORITY}
    assert summarize(policy.plan(ClusterBuilder().node("n", mem=10 * G).job(mem=6 * G).job(mem=6 * G).build(), c))[
        "pending"] == {2: states.PRIORITY}
    assert summarize(policy.plan(ClusterBuilder().node("n", slots=1).job().job().build(), c))[
        "pending"] == {2: states.PRIORITY}


def test_account_caps():
    c = cfg("[accounts.eta]\nusers=['alice']\nmax_running = 2\nmax_gpus = 3\n")
    b = ClusterBuilder().node("n", gpus=8)
    b.job(gpus=1, account="eta").job(gpus=1, account="eta").job(gpus=1, account="eta")
    assert summarize(policy.plan(b.build(), c))["pending"] == {3: states.ACCOUNT_JOB_LIMIT}
    b = ClusterBuilder().node("n", gpus=8).job(gpus=2, account="eta").job(gpus=2, account="eta")
    assert summarize(policy.plan(b.build(), c))["pending"] == {2: states.ACCOUNT_GPU_LIMIT}


def test_budget_reserved_while_commitments_hold_then_admitted_when_they_settle():
    # Limit $10, no reserve. A running job committed $8 of it; a $4 job must wait: BudgetReserved.
    c = cfg("[[budgets]]\nname='b'\naccount='eta'\nlimit=10.0\n[accounts.eta]\nusers=['alice']\n")
    b = (ClusterBuilder().node("n", gpus=4)
         .running("n", gpus=1, account="eta", started_ago=0, commit=[("b", 8_000_000)], rates=[("b", 2_000_000)])
         .job(gpus=1, time_limit=7200, account="eta"))
    plan = policy.plan(b.build(), c)
    assert summarize(plan)["pending"] == {2: states.BUDGET_RESERVED}
    assert "available $2.00" in plan.pending[0].detail
    # The first job ended and was charged $1: now $9 is free and the $4 job starts.
    b2 = ClusterBuilder().node("n", gpus=4).job(gpus=1, time_limit=7200, account="eta", jid=2).spend("b", 1_000_000)
    assert 2 in summarize(policy.plan(b2.build(), c))["places"]


def test_budget_exhausted_when_spending_alone_leaves_no_room():
    c = cfg("[[budgets]]\nname='b'\naccount='eta'\nlimit=10.0\n[accounts.eta]\nusers=['alice']\n")
    b = ClusterBuilder().node("n", gpus=4).job(gpus=1, time_limit=7200, account="eta").spend("b", 7_000_000)
    assert summarize(policy.plan(b.build(), c))["pending"] == {1: states.BUDGET_EXHAUSTED}


def test_with_backfill_off_a_job_its_budget_keeps_waiting_does_not_hold_the_queue():
    """Backfill off: the first job blocked on room holds every job behind it. A job its budget
    would not admit is not blocked on room but on its budget (it could not start with the room
    free either): the job behind it that fits starts. Before, the budget-broke job held the queue
    whenever it did not also fit, and let it run whenever it did."""
    c = cfg("[[budgets]]\nname='b'\naccount='eta'\nlimit=10.0\n[accounts.eta]\nusers=['alice']\n"
            "[scheduler]\nbackfill_depth = 0\n")
    b = (ClusterBuilder().node("n", gpus=4).running("n", gpus=3, account="other")
         .job(gpus=2, time_limit=7200, account="eta", submit_offset=0).job(gpus=1, account="other", submit_offset=1)
         .spend("b", 9_000_000))
    assert summarize(policy.plan(b.build(), c)) == summarize(policy.plan_per_job(b.build(), c))
    got = summarize(policy.plan(b.build(), c))
    assert got["pending"] == {2: states.BUDGET_EXHAUSTED} and 3 in got["places"]


def test_gpu_hours_budget():
    c = cfg("[[budgets]]\nname='gh'\naccount='eta'\nunit='gpu_hours'\nlimit=5\n[accounts.eta]\nusers=['alice']\n")
    b = ClusterBuilder().node("n", gpus=8).job(gpus=2, time_limit=7200, account="eta").job(
        gpus=1, time_limit=7200, account="eta")
    plan = policy.plan(b.build(), c)
    assert plan.places[0].commit == (("gh", 4_016_666),)   # 2 GPUs × (2 h + kill_wait 30 s)
    assert summarize(plan)["pending"] == {2: states.BUDGET_RESERVED}


def test_accrued_cost_of_running_jobs_still_counts_against_the_budget():
    # A job committed $8 and has run 3 of its 4 hours ($6 accrued, $2 outstanding): $8 is still held.
    c = cfg("[[budgets]]\nname='b'\naccount='eta'\nlimit=10.0\n[accounts.eta]\nusers=['alice']\n")
    b = (ClusterBuilder().node("n", gpus=4)
         .running("n", gpus=1, account="eta", started_ago=3 * 3600, commit=[("b", 8_000_000)], rates=[("b", 2_000_000)])
         .job(gpus=1, time_limit=3600 * 2, account="eta"))
    assert summarize(policy.plan(b.build(), c))["pending"] == {2: states.BUDGET_RESERVED}


def test_max_wait_expires_and_is_not_placed():
    b = ClusterBuilder().node("n", gpus=1).running("n", gpus=1).job(gpus=1, max_wait=50).job(gpus=1, max_wait=500)
    s = summarize(policy.plan(b.build(), cfg()))
    assert s["expires"] == [2] and s["pending"] == {3: states.RESOURCES}


def test_qos_then_age_then_id_order():
    c = cfg()
    b = ClusterBuilder().node("n", slots=1)
    b.job(qos="low", submit_offset=-50).job(submit_offset=10).job(submit_offset=0).job(submit_offset=0)
    # normal beats low; among normal the older (offset 0) wins, and between equal ages the lower id.
    assert list(summarize(policy.plan(b.build(), c))["places"]) == [3]


def test_refusal_at_submit_names_the_numbers():
    b = ClusterBuilder().node("n1", gpus=4, cpus=16, mem=64 * G).build()
    big = Job(id=1, user="alice", account="eta", argv=("x",), gpus=5)
    assert "largest node n1 has 4 GPUs" in refusal(big, b.nodes, SWEEP)
    costly = Job(id=1, user="alice", account="eta", argv=("x",), gpus=4, time_limit=20 * 3600)
    msg = refusal(costly, b.nodes, SWEEP)
    assert "$160.07" in msg and "$120.00" in msg and "$108.00" in msg
    assert refusal(Job(id=1, user="a", account="eta", argv=("x",), gpus=1, time_limit=3600), b.nodes, SWEEP) is None


# -- properties ---------------------------------------------------------------------------------

@st.composite
def clusters(draw):
    b = ClusterBuilder()
    for i in range(draw(st.integers(1, 4))):
        b.node(f"n{i}", gpus=draw(st.integers(0, 8)), cpus=draw(st.integers(1, 32)),
               mem=draw(st.integers(1, 128)) * G, slots=draw(st.integers(1, 8)),
               model=draw(st.sampled_from(["A100", "H100"])))
    for _ in range(draw(st.integers(0, 25))):
        b.job(gpus=draw(st.integers(0, 4)), cpus=draw(st.integers(1, 16)), mem=draw(st.integers(0, 64)) * G,
              qos=draw(st.sampled_from(["normal", "low"])), submit_offset=draw(st.integers(-50, 50)),
              account=draw(st.sampled_from(["eta", "default"])), time_limit=draw(st.integers(60, 20000)),
              max_wait=draw(st.one_of(st.none(), st.integers(0, 200))),
              gpu_type=draw(st.sampled_from(["", "", "A100", "H100"])))
    return b.build()


PROP_CFG = cfg("""
[accounts.eta]
users = ["alice"]
max_running = 5
max_gpus = 6
[[budgets]]
name = "b"
account = "eta"
limit = 40.0
reserve = 0.1
""")


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_never_over_allocates_and_every_pending_job_has_one_reason(snap: Snapshot):
    plan = policy.plan(snap, PROP_CFG)
    jobs = {j.id: j for j in snap.jobs}
    for n in snap.nodes:
        placed = [p for p in plan.places if p.node == n.name]
        assert len(placed) <= n.slots
        assert sum(jobs[p.job_id].cpus for p in placed) <= n.cpus
        assert sum(jobs[p.job_id].mem for p in placed) <= n.mem
        uuids = [u for p in placed for u in p.gpus]
        assert len(uuids) == len(set(uuids)) and set(uuids) <= {g.uuid for g in n.gpus}
        models = {g.uuid: g.model for g in n.gpus}
        for p in placed:
            j = jobs[p.job_id]
            assert len(p.gpus) == j.gpus and all(not j.gpu_type or models[u] == j.gpu_type for u in p.gpus)
    ids = [p.job_id for p in plan.places] + [e.job_id for e in plan.expires] + [p.job_id for p in plan.pending]
    assert sorted(ids) == sorted(j.id for j in snap.jobs if j.state == states.PENDING)
    assert all(p.reason in states.REASONS for p in plan.pending)
    eta = [p for p in plan.places if jobs[p.job_id].account == "eta"]
    assert len(eta) <= 5 and sum(jobs[p.job_id].gpus for p in eta) <= 6
    assert sum(dict(p.commit).get("b", 0) for p in plan.places) <= 36_000_000


@settings(max_examples=60, deadline=None)
@given(clusters(), st.randoms())
def test_plan_is_pure_and_independent_of_input_order(snap: Snapshot, rnd: random.Random):
    a = policy.plan(snap, PROP_CFG)
    jobs, nodes = list(snap.jobs), list(snap.nodes)
    rnd.shuffle(jobs)
    rnd.shuffle(nodes)
    b = policy.plan(Snapshot(snap.now, tuple(nodes), tuple(jobs), snap.spent), PROP_CFG)
    assert a == b == policy.plan(snap, PROP_CFG)


def test_array_throttle_caps_running_tasks():
    from dataclasses import replace
    b = ClusterBuilder().node("n", gpus=8)
    b.running("n", gpus=1)
    for _ in range(5):
        b.job(gpus=1)
    snap = b.build()
    jobs = [replace(j, array_id=1, array_index=i + 1, array_throttle=2) for i, j in enumerate(snap.jobs)]
    s = summarize(policy.plan(replace(snap, jobs=tuple(jobs)), cfg()))
    # Task 1 already runs; one more may start; the rest wait on the throttle, not on resources.
    assert list(s["places"]) == [2] and set(s["pending"].values()) == {states.ARRAY_TASK_LIMIT}


def test_held_and_begin_time_pend_with_their_reasons():
    b = ClusterBuilder().node("n", gpus=4).job(gpus=1, held=True).job(gpus=1, begin=ClusterBuilder().now + 60)
    b.job(gpus=1, begin=ClusterBuilder().now - 1)
    s = summarize(policy.plan(b.build(), cfg()))
    assert s["pending"] == {1: states.HELD, 2: states.BEGIN_TIME} and list(s["places"]) == [3]


def test_a_begin_time_or_backoff_wait_says_the_same_from_pass_to_pass():
    """A job waiting for --begin or for its retry backoff keeps one detail while it waits: the instant,
    not "3393s from now". Relative text changed at every pass, and each change rewrote the job's record:
    100,000 singles submitted with --begin now+1hour were all rewritten on every pass, and the
    scheduler took them in at ~60/s (bench/memory_bench.py's singles, 2026-12-06)."""
    from dataclasses import replace

    from labq.scheduler.units import fmt_at
    t0 = ClusterBuilder().now
    b = ClusterBuilder().node("n", gpus=4).job(gpus=1, begin=t0 + 3600).job(gpus=1)
    snap = b.build()
    snap = replace(snap, jobs=tuple(replace(j, eligible_time=t0 + 90) if j.id == 2 else j for j in snap.jobs))
    first, later = (policy.plan(replace(snap, now=t), cfg()) for t in (t0, t0 + 7))
    assert summarize(first)["pending"] == {1: states.BEGIN_TIME, 2: states.BEGIN_TIME}
    assert [(p.job_id, p.detail) for p in first.pending] == [(p.job_id, p.detail) for p in later.pending]
    assert fmt_at(t0 + 3600) in first.pending[0].detail and fmt_at(t0 + 90) in first.pending[1].detail
