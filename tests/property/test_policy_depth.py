"""The deeper passes of plan(): multifactor priority, quotas with guarantee and borrow, protected
capacity, backfill reservations and preemption. Pure: cluster builder in, Plan out."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler import multifactor, policy
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.policy.refusal import refusal
from labq.scheduler.units import fmt_at
from tests.harness import ClusterBuilder, G, cfg, forward_until_started, summarize

HOUR = 3600


def _plan(b, text=""):
    return policy.plan(b.build() if isinstance(b, ClusterBuilder) else b, cfg(text))


# -- multifactor priority --------------------------------------------------------------------------

def test_age_breaks_qos_ties_and_old_jobs_win():
    b = ClusterBuilder().node("n", gpus=1)
    b.job(gpus=1, submit_offset=0).job(gpus=1, submit_offset=-5000)
    s = summarize(_plan(b))
    assert list(s["places"]) == [2] and s["pending"] == {1: states.PRIORITY}


def test_fair_share_puts_the_account_that_used_less_first():
    b = ClusterBuilder().node("n", gpus=1)
    b.job(gpus=1, account="heavy", submit_offset=-10).job(gpus=1, account="light")
    snap = replace(b.build(), usage=(("heavy", 50_000.0), ("light", 10.0)))
    text = "[accounts.heavy]\n[accounts.light]\n"
    assert list(summarize(_plan(snap, text))["places"]) == [2]
    # Without the fair-share weight, age (the older job 1) decides.
    assert list(summarize(_plan(snap, text + "[priority]\nfairshare_weight = 0\n"))["places"]) == [1]


def test_burst_penalty_ranks_a_users_flood_below_another_users_job():
    b = ClusterBuilder().node("n", gpus=1)
    for i in range(5):
        b.job(gpus=1, user="flood", submit_offset=-30 + i)
    b.job(gpus=1, user="calm", submit_offset=0)
    snap = b.build()
    text = "[priority]\nburst_jobs = 3\nburst_window = \"10m\"\n"
    f = multifactor.factors([j for j in snap.jobs], snap.now, {}, cfg(text))
    assert [f[i].burst for i in range(1, 6)] == [0, 0, 0, 1, 1] and f[6].burst == 0
    order = multifactor.ordered(list(snap.jobs), snap.now, {}, cfg(text))
    assert [j.id for j in order].index(6) < [j.id for j in order].index(4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["normal", "low"]), st.integers(-10 ** 6, 100), st.sampled_from("abc"),
                          st.sampled_from("xy")), max_size=30))
def test_the_fast_order_is_the_order_of_the_factors(rows):
    b = ClusterBuilder()
    for q, off, acct, user in rows:
        b.job(qos=q, submit_offset=off, account=acct, user=user)
    snap = b.build()
    c = cfg("[priority]\nburst_jobs = 2\n[accounts.a]\nshare = 2.0\n")
    usage = {"a": 100.0, "b": 5000.0}
    f = multifactor.factors(list(snap.jobs), snap.now, usage, c)
    slow = sorted(snap.jobs, key=lambda j: (-f[j.id].priority, j.submit_time, j.id))
    assert [j.id for j in multifactor.ordered(list(snap.jobs), snap.now, usage, c)] == [j.id for j in slow]


def test_priority_factors_are_deterministic_and_total():
    b = ClusterBuilder().node("n", gpus=1)
    for _ in range(4):
        b.job(gpus=1)        # identical priorities and submit times: the id decides
    order = multifactor.ordered(list(reversed(b.build().jobs)), b.now, {}, cfg())
    assert [j.id for j in order] == [1, 2, 3, 4]


# -- quotas ------------------------------------------------------------------------------------

def test_user_caps_pend_with_their_reasons():
    b = ClusterBuilder().node("n", gpus=8, cpus=64)
    b.running("n", gpus=2, user="bob", cpus=4)
    b.job(gpus=2, user="bob").job(gpus=0, cpus=40, user="carol").job(gpus=1, user="dave")
    text = """
[users.bob]
max_gpus = 3
[users.default]
max_cpus = 32
"""
    s = summarize(_plan(b, text))
    assert s["pending"] == {2: states.USER_GPU_LIMIT, 3: states.USER_CPU_LIMIT} and list(s["places"]) == [4]


def test_account_cpu_cap_and_borrow_limit():
    b = ClusterBuilder().node("n", gpus=8, cpus=64)
    b.running("n", gpus=3, account="eta").job(gpus=2, account="eta").job(cpus=20, account="eta", gpus=0)
    text = "[accounts.eta]\nguarantee = 2\nborrow_limit = 2\nmax_cpus = 16\n"
    s = summarize(_plan(b, text))
    assert s["pending"] == {2: states.ACCOUNT_GPU_LIMIT, 3: states.ACCOUNT_CPU_LIMIT}


def test_refuse_at_submit_where_configured():
    b = ClusterBuilder().node("n", gpus=8)
    b.running("n", gpus=2, account="eta")
    snap = b.build()
    from labq.scheduler.jobs.model import Job
    job = Job(id=9, user="alice", account="eta", argv=("x",), gpus=4)
    # Alone over max_gpus it could never run: refused whatever on_limit says (pending would be for ever).
    for extra in ("", 'on_limit = "refuse"\n'):
        msg = refusal(job, snap.nodes, cfg("[accounts.eta]\nmax_gpus = 2\n" + extra), running=snap.jobs)
        assert msg == "account eta: the job asks for 4 GPUS, max_gpus=2: it could never run"
    small = replace(job, gpus=2)
    # Over the cap only because of what runs now: pends by default, refused with on_limit = "refuse".
    assert refusal(small, snap.nodes, cfg("[accounts.eta]\nmax_gpus = 3\n"), running=snap.jobs) is None
    msg = refusal(small, snap.nodes, cfg('[accounts.eta]\nmax_gpus = 3\non_limit = "refuse"\n'),
                         running=snap.jobs)
    assert msg == 'account eta holds 2 GPUs, needs 2 more, max_gpus=3 (on_limit = "refuse")'


def test_protected_capacity_is_never_given_to_a_lower_class():
    b = ClusterBuilder().node("n", gpus=4)
    b.job(gpus=2, qos="low").job(gpus=1, qos="low")
    text = """
[qos.normal]
priority = 100
reserved = 2
[qos.low]
priority = 0
preemptible = true
"""
    s = summarize(_plan(b, text))
    # 4 free, 2 protected for normal: the first low job may take 2, the second none.
    assert list(s["places"]) == [1] and s["pending"] == {2: states.RESERVED_CAPACITY}
    # A normal job gets the protected GPUs.
    b.job(gpus=2, qos="normal", submit_offset=10)
    assert list(summarize(_plan(b, text))["places"]) == [3, 1]


def test_borrowed_work_is_marked_and_reclaimed_for_the_lenders_guarantee():
    text = """
[accounts.a]
guarantee = 2
[accounts.b]
guarantee = 2
"""
    b = ClusterBuilder().node("n", gpus=4)
    b.job(gpus=4, account="b")
    p = _plan(b, text)
    assert p.places[0].borrowed      # 2 of its own + 2 lent by a
    snap = b.build()
    job = tr.admit(snap.jobs[0], p.places[0], b.now - 3 * HOUR)
    b2 = ClusterBuilder().node("n", gpus=4)
    b2.jobs = [job]
    b2.job(gpus=2, account="a", jid=2)
    p2 = _plan(b2, text)
    assert [(x.job_id, x.for_job) for x in p2.preempts] == [(1, 2)]
    assert summarize(p2)["pending"] == {2: states.PREEMPTING_FOR}


# -- backfill ----------------------------------------------------------------------------------

def _blocked_top():
    """4 GPUs; a running 2-GPU job ends in 1h; the top job needs all 4; smaller ones follow."""
    b = ClusterBuilder().node("n", gpus=4)
    b.running("n", gpus=2, time_limit=2 * HOUR, started_ago=HOUR)
    b.job(gpus=4, submit_offset=-50)                 # 2: the top blocked job
    b.job(gpus=1, time_limit=HOUR // 2)              # 3: ends before the reservation: backfills
    b.job(gpus=1, time_limit=3 * HOUR)               # 4: would delay the top job
    return b


def test_backfill_reserves_the_top_job_and_starts_only_what_does_not_delay_it():
    p = _plan(_blocked_top(), "[scheduler]\nkill_wait = 0\n")
    s = summarize(p)
    assert list(s["places"]) == [3]
    assert s["pending"] == {2: states.RESOURCES, 4: states.RESERVATION}
    [start] = p.starts
    assert (start.job_id, start.node) == (2, "n") and start.at == _blocked_top().now + HOUR
    # an instant, not "in 3600s": the text stays the same from pass to pass (issue 13)
    assert f"expected to start at {fmt_at(start.at)} on n" in next(x.detail for x in p.pending if x.job_id == 2)


def test_backfill_off_is_strict_priority_order():
    s = summarize(_plan(_blocked_top(), "[scheduler]\nbackfill_depth = 0\n"))
    assert s["places"] == {} and s["pending"] == {2: states.RESOURCES, 3: states.PRIORITY, 4: states.PRIORITY}


def test_greedy_without_a_reservation_depth_limit_would_start_the_long_job():
    # depth 1 reserves only the top job: a second blocked job gets none, and lower work still may not
    # delay the first reservation.
    b = _blocked_top()
    b.job(gpus=4, submit_offset=-40)       # 5: second big job, higher than 3 and 4 by age
    s = summarize(_plan(b, "[scheduler]\nkill_wait = 0\n"))
    assert 4 not in s["places"] and s["pending"][5] in (states.RESOURCES, states.PRIORITY)


# -- preemption ---------------------------------------------------------------------------------

def _low_running(b, node, gpus, ago, **kw):
    return b.running(node, gpus=gpus, qos="low", started_ago=ago, **kw)


def test_preempts_the_lower_qos_job_with_least_lost_work():
    b = ClusterBuilder().node("n", gpus=2)
    _low_running(b, "n", 1, ago=2 * HOUR)
    _low_running(b, "n", 1, ago=HOUR)
    b.job(gpus=1, qos="normal")
    p = _plan(b)
    assert [x.job_id for x in p.preempts] == [2]          # less work since its start (no checkpoints)
    assert p.preempts[0].grace == 120 and summarize(p)["pending"] == {3: states.PREEMPTING_FOR}


def test_checkpoint_recency_decides_the_victim():
    b = ClusterBuilder().node("n", gpus=2)
    _low_running(b, "n", 1, ago=2 * HOUR)
    _low_running(b, "n", 1, ago=HOUR)
    old = b.jobs[0]
    b.jobs[0] = replace(old, attempts=(replace(old.current, last_checkpoint=b.now - 60),))
    b.job(gpus=1)
    assert [x.job_id for x in _plan(b).preempts] == [1]


def test_smallest_victim_set_and_no_needless_victims():
    b = ClusterBuilder().node("n", gpus=4)
    _low_running(b, "n", 1, ago=HOUR)         # 1: least lost work, but one GPU is not enough
    _low_running(b, "n", 3, ago=2 * HOUR)     # 2: frees 3 GPUs alone
    b.job(gpus=3)
    assert [x.job_id for x in _plan(b).preempts] == [2]


def test_never_preempts_equal_or_higher_qos_nor_non_preemptible_nor_young_jobs():
    b = ClusterBuilder().node("n", gpus=3)
    b.running("n", gpus=1, qos="normal", started_ago=HOUR)
    _low_running(b, "n", 1, ago=HOUR, preemptible=False)
    _low_running(b, "n", 1, ago=60)           # under min_runtime (10m)
    b.job(gpus=1)
    p = _plan(b)
    assert p.preempts == () and summarize(p)["pending"] == {4: states.PREEMPTION_DEFERRED}


def test_max_preemptions_makes_a_job_non_preemptible():
    b = ClusterBuilder().node("n", gpus=1)
    _low_running(b, "n", 1, ago=HOUR, preempt_count=3)
    b.job(gpus=1)
    assert _plan(b).preempts == ()


def test_no_second_preemption_while_victims_drain_and_the_room_is_held():
    b = ClusterBuilder().node("n", gpus=2)
    _low_running(b, "n", 1, ago=HOUR)
    b.job(gpus=2)
    p = _plan(b)
    assert [x.job_id for x in p.preempts] == [1]
    # Next tick: the victim drains (PR); the preemptor waits, nothing else is preempted, and the one
    # free GPU is held for it — a lower job asking for it does not get it.
    snap = b.build()
    victim = tr.preempting(snap.jobs[0], 2, "x", b.now)
    b2 = ClusterBuilder().node("n", gpus=2)
    b2.jobs = [victim, snap.jobs[1]]
    b2.job(gpus=1, qos="low", jid=3)
    p2 = _plan(b2)
    assert p2.preempts == () and summarize(p2)["pending"] == {2: states.PREEMPTING_FOR, 3: states.PRIORITY}


def test_a_preemptor_its_budget_would_refuse_preempts_nobody():
    b = ClusterBuilder().node("n", gpus=1)
    _low_running(b, "n", 1, ago=HOUR)
    b.job(gpus=1, account="eta", time_limit=100 * HOUR)
    p = _plan(b, "[[budgets]]\nname = \"e\"\naccount = \"eta\"\nlimit = 10.0\n")
    assert p.preempts == () and summarize(p)["pending"][2] == states.BUDGET_EXHAUSTED


# -- properties -----------------------------------------------------------------------------------

@st.composite
def busy_clusters(draw):
    b = ClusterBuilder()
    for i in range(draw(st.integers(1, 3))):
        b.node(f"n{i}", gpus=draw(st.integers(0, 6)), cpus=draw(st.integers(4, 32)), mem=64 * G,
               slots=draw(st.integers(2, 8)))
    for _ in range(draw(st.integers(0, 8))):
        n = draw(st.sampled_from(b.nodes))
        used = [j for j in b.jobs if j.node == n.name]
        gfree = len(n.gpus) - sum(j.gpus for j in used)
        cfree = n.cpus - sum(j.cpus for j in used)
        if len(used) >= n.slots or cfree < 1:
            continue
        b.running(n.name, gpus=draw(st.integers(0, max(gfree, 0))), cpus=draw(st.integers(1, cfree)),
                  qos=draw(st.sampled_from(["normal", "low"])), started_ago=draw(st.integers(0, 3 * HOUR)),
                  time_limit=draw(st.integers(HOUR, 4 * HOUR)), account=draw(st.sampled_from(["a", "b"])))
    for _ in range(draw(st.integers(0, 12))):
        b.job(gpus=draw(st.integers(0, 4)), cpus=draw(st.integers(1, 8)), qos=draw(st.sampled_from(["normal", "low"])),
              time_limit=draw(st.integers(600, 4 * HOUR)), submit_offset=draw(st.integers(-50, 50)),
              account=draw(st.sampled_from(["a", "b"])))
    return b.build()


DEEP = cfg("""
[scheduler]
backfill_depth = 3
kill_wait = 0
[accounts.a]
guarantee = 2
[accounts.b]
guarantee = 1
""")


@settings(max_examples=150, deadline=None)
@given(busy_clusters())
def test_preemption_only_hits_strictly_lower_qos_or_borrowed_work_and_never_a_job_twice(snap):
    p = policy.plan(snap, DEEP)
    jobs = {j.id: j for j in snap.jobs}
    victims = [x.job_id for x in p.preempts]
    assert len(victims) == len(set(victims))
    placed = {x.job_id for x in p.places}
    for x in p.preempts:
        v, by = jobs[x.job_id], jobs[x.for_job]
        assert v.state == states.RUNNING and by.state == states.PENDING and by.id not in placed
        lower = DEEP.qos_named(v.qos).priority < DEEP.qos_named(by.qos).priority
        assert (lower and policy.preempt.preemptible(v, DEEP)) or (v.borrowed and v.account != by.account)
    assert all(x.reason in states.REASONS for x in p.pending)


@settings(max_examples=60, deadline=None)
@given(busy_clusters())
def test_backfill_never_delays_a_reserved_job(snap):
    c = replace(DEEP, preemption=False)
    nodes = tuple(replace(n, lease_expiry=float("inf")) for n in snap.nodes)
    snap = replace(snap, nodes=nodes)
    p = policy.plan(snap, c)
    for start in p.starts[:1]:
        began = forward_until_started(snap, c, start.job_id, start.at + 1)
        assert began is not None and began <= start.at + 1e-6, (start, began)


CAPPED = cfg("""
[scheduler]
backfill_depth = 2
[qos.normal]
priority = 100
reserved = 1
[qos.low]
priority = 0
preemptible = true
[accounts.a]
guarantee = 2
borrow_limit = 1
max_cpus = 20
[accounts.b]
max_running = 3
[users.default]
max_gpus = 5
""")


@settings(max_examples=150, deadline=None)
@given(busy_clusters())
def test_running_plus_admitted_never_exceed_a_node_a_cap_or_a_borrow_limit(snap):
    p = policy.plan(snap, CAPPED)
    jobs = {j.id: j for j in snap.jobs}
    on = [j for j in snap.jobs if j.state in states.ON_NODE]
    admitted = [jobs[x.job_id] for x in p.places]
    for n in snap.nodes:
        here = [(j, j.gpu_uuids) for j in on if j.node == n.name]
        here += [(jobs[x.job_id], x.gpus) for x in p.places if x.node == n.name]
        assert len(here) <= n.slots and sum(j.cpus for j, _ in here) <= n.cpus
        uuids = [u for _, gs in here for u in gs]
        assert len(uuids) == len(set(uuids)) <= len(n.gpus)

    def total(acct, field, pool):
        return sum(getattr(j, field) for j in pool if j.account == acct)
    # Caps bind what is admitted on top of what runs (what already ran over a cap is not undone).
    for acct, cap in (("a", 20),):
        if total(acct, "cpus", on) <= cap:
            assert total(acct, "cpus", on + admitted) <= cap
    if sum(1 for j in on if j.account == "b") <= 3:
        assert sum(1 for j in on + admitted if j.account == "b") <= 3
    if total("a", "gpus", on) <= 3:
        assert total("a", "gpus", on + admitted) <= 3       # guarantee 2 + borrow_limit 1
    for user in {j.user for j in admitted}:
        if sum(j.gpus for j in on if j.user == user) <= 5:
            assert sum(j.gpus for j in on + admitted if j.user == user) <= 5


def test_max_wait_of_a_requeued_job_counts_from_its_last_attempt():
    from labq.scheduler.jobs.model import Attempt
    b = ClusterBuilder().node("n", gpus=1)
    b.running("n", gpus=1)
    ran = Attempt(1, "n", ("GPU-n-0",), start_time=b.now - 5000, end_time=b.now - 30, outcome="preempted")
    b.job(gpus=1, max_wait=60, attempts=(ran,), restart_count=1)     # submitted long ago, requeued 30s ago
    b.job(gpus=1, max_wait=60)                                      # never ran: waited 100s
    s = summarize(_plan(b))
    assert s["expires"] == [3] and 2 in s["pending"]


def test_a_node_with_a_whole_instance_price_is_split_by_dominant_share():
    b = ClusterBuilder().node("rented", gpus=4, cpus=32, mem=256 * G).node("owned", gpus=4, cpus=32, mem=256 * G)
    b.job(gpus=1, cpus=16, mem=32 * G)              # dominant share: CPUs, 16/32
    text = '[rates]\ngpu_hour = 2.0\nnode_hour = { "rented" = 10.0 }\n'
    from labq.scheduler.money import pricing
    job, rented = b.build().jobs[0], b.nodes[0]
    assert pricing.rate(job, "usd", "fake", cfg(text), rented) == 5_000_000      # $10/h × 1/2
    assert pricing.rate(job, "usd", "fake", cfg(text), b.nodes[1]) == 2_000_000  # per-resource: 1 GPU × $2
    assert pricing.rate(job, "gpu_hours", "fake", cfg(text), rented) == 1_000_000
    # The plan charges the node it places on: with only the rented node up, the job pays its share.
    b.nodes = b.nodes[:1]
    assert _plan(b, text).places[0].cost_rate == 5_000_000
