"""plan() by request class makes the decisions of the per-job pass (policy.plan_per_job): on random
snapshots, the same admissions (node, GPUs, commitments), expiries, preemptions, reservations, and
for every pending job the same reason and detail.

Jobs are drawn from a few templates, so classes repeat (arrays, sweeps) and the cache is exercised;
the snapshots mix holds, --begin, dependencies (singletons too), array throttles, account and user
caps, guarantees and borrowing, budgets, protected QoS capacity, preemption and backfill depths,
and multi-node jobs (gangs), pending and running. A pass that starts from a kept Standing of the
running jobs (policy/standing.py) decides the same too, and so do passes over a kept Queue with short
jobs first (its families split by run time, merged under bounds: policy/fronts.py) as the clock moves.
"""
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler import multifactor, policy
from labq.scheduler.daemon.applier import apply_plan
from labq.scheduler.jobs import states
from labq.scheduler.policy import classes, kinds, queue, settle, strict
from labq.scheduler.policy.backlog import gated
from labq.scheduler.policy.kept import Kept
from tests.harness import ClusterBuilder, G, cfg

CONFIG = """
[scheduler]
backfill_depth = {depth}
preemption = {preempt}
[qos.normal]
priority = 100
reserved = {reserved}
[qos.low]
priority = 0
preemptible = true
min_runtime = "{min_runtime}"
[qos.high]
priority = 200
[accounts.eta]
users = ["alice", "bob"]
guarantee = {guarantee}
borrow_limit = 4
[accounts.phi]
users = ["carol"]
max_running = {max_running}
max_gpus = 6
[users.bob]
max_gpus = 3
[[budgets]]
name = "eta-b"
account = "eta"
limit = {limit}
"""

TEMPLATES = st.fixed_dictionaries({
    "gpus": st.sampled_from([0, 1, 2, 4]),
    "cpus": st.sampled_from([1, 4, 8]),
    "mem": st.sampled_from([0, 8 * G, 32 * G]),
    "time_limit": st.sampled_from([600, 3600, 7200, 86400]),
    "qos": st.sampled_from(["normal", "low", "high"]),
    "who": st.sampled_from([("eta", "alice"), ("eta", "bob"), ("phi", "carol"), ("default", "dave")]),
    "extra": st.sampled_from(["", "", "", "held", "begin", "dep", "singleton", "throttle", "crash", "earmark"]),
    "nodes": st.sampled_from([1, 1, 1, 2, 3]),
})

# Templates alike in what a "no room" verdict reads (shape, time limit, QoS) and different in the
# rest (account, user, gates): classes that share classes._Walk.rooms entries.
NARROW = st.fixed_dictionaries({
    "gpus": st.sampled_from([1, 2]),
    "cpus": st.just(1),
    "mem": st.just(0),
    "time_limit": st.sampled_from([600, 86400]),
    "qos": st.sampled_from(["normal", "low", "high"]),
    "who": st.sampled_from([("eta", "alice"), ("eta", "bob"), ("phi", "carol"), ("default", "dave")]),
    "extra": st.sampled_from(["", "", "held", "begin", "dep", "throttle", "crash"]),
    "nodes": st.just(1),
})


@st.composite
def scenes(draw, narrow=False):
    text = CONFIG.format(depth=draw(st.sampled_from([0, 1, 3])), preempt=draw(st.sampled_from(["true", "false"])),
                         reserved=draw(st.sampled_from([0, 2])), min_runtime=draw(st.sampled_from(["0s", "1h"])),
                         guarantee=draw(st.sampled_from([0, 2])), max_running=draw(st.sampled_from([1, 3, 100])),
                         limit=draw(st.sampled_from([2, 5, 50, 100000])))
    b = ClusterBuilder()
    for n in range(draw(st.integers(1, 4))):
        b.node(f"n{n}", gpus=draw(st.sampled_from([0, 2, 4, 8])), cpus=draw(st.sampled_from([8, 16, 32])),
               mem=64 * G, slots=draw(st.sampled_from([2, 4, 8])),
               state=draw(st.sampled_from(["up", "up", "up", "drain"])))
    for n in list(b.nodes):
        left, cpus = len(n.gpus), n.cpus
        for _ in range(draw(st.integers(0, 4))):      # running work, most of it on GPUs
            g, c = draw(st.sampled_from([1, 2, 0])), draw(st.sampled_from([1, 4]))
            if g > left or c > cpus:
                break
            acct, user = draw(st.sampled_from([("eta", "alice"), ("eta", "bob"), ("phi", "carol"), ("default", "dave")]))
            b.running(n.name, gpus=g, cpus=c, qos=draw(st.sampled_from(["low", "low", "normal"])), account=acct,
                      user=user, started_ago=draw(st.sampled_from([30.0, 7200.0])), time_limit=draw(
                          st.sampled_from([600, 3600, 86400])),
                      commit=(("eta-b", draw(st.sampled_from([0, 10**6, 4 * 10**6]))),) if acct == "eta" else ())
            left, cpus = left - g, cpus - c
    two = b.nodes[:2]
    if len(two) == 2 and all(b.free_gpus(n, 1) for n in two) and draw(st.booleans()):   # a running gang
        b.running_gang([n.name for n in two], gpus=1, cpus=1, qos="low", started_ago=7200.0, time_limit=86400)
    ended = b._next
    b._next += 1
    templates = draw(st.lists(NARROW, min_size=2, max_size=8) if narrow else st.lists(TEMPLATES, min_size=1, max_size=4))
    for k in range(draw(st.integers(1, 40))):
        t = templates[draw(st.integers(0, len(templates) - 1))]
        kw = {}
        if t["extra"] == "held":
            kw["held"] = True
        elif t["extra"] == "crash":
            kw.update(held=True, reason=states.CRASH_GUARD, detail="failed 3 times")
        elif t["extra"] == "begin":
            kw["begin"] = b.now + 600
        elif t["extra"] == "dep":
            kw["deps"] = (("afterok", (ended,)),)
        elif t["extra"] == "singleton":
            kw["deps"] = (("singleton", ()),)
        elif t["extra"] == "earmark":
            kw["earmark"] = draw(st.sampled_from([n.name for n in b.nodes]))
        elif t["extra"] == "throttle":
            kw.update(array_id=1000, array_index=k, array_throttle=2)
        b.job(gpus=t["gpus"], cpus=t["cpus"], mem=t["mem"], time_limit=t["time_limit"], qos=t["qos"], nodes=t["nodes"],
              account=t["who"][0], user=t["who"][1], name="s" if t["extra"] == "singleton" else "",
              submit_offset=draw(st.sampled_from([0.0, 0.0, -50.0, -5000.0])), **kw)
    snap = b.build()
    done = draw(st.sampled_from([states.COMPLETED, states.FAILED]))
    return replace(snap, ended=((ended, done),), spent=(("eta-b", draw(st.sampled_from([0, 10**6, 10**8]))),)), \
        cfg(text)


def same(a, b) -> None:
    assert sorted(a.places, key=lambda p: p.job_id) == sorted(b.places, key=lambda p: p.job_id)
    assert a.expires == b.expires
    assert {p.job_id: (p.reason, p.detail) for p in a.pending} == {p.job_id: (p.reason, p.detail) for p in b.pending}
    assert len(a.pending) == len(b.pending)
    assert a.preempts == b.preempts
    assert a.starts == b.starts


@pytest.fixture
def always_grouped(monkeypatch):
    monkeypatch.setattr(classes, "MIN_JOBS_PER_CLASS", 0)   # small queues too take the class walk


@pytest.fixture
def settling(monkeypatch):
    """The walk asks whether the pass has settled (policy/settle.py) before every turn: small queues too."""
    monkeypatch.setattr(settle, "SETTLE_CHECK", 0)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenes())
def test_the_class_walk_decides_as_the_per_job_pass(always_grouped, settling, scene):
    snap, c = scene
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))
    # expected_starts' pass: --begin jobs reserved from their begin, a reservation for each blocked job
    deep = replace(c, backfill_depth=50, preemption=False)
    same(policy.plan(snap, deep, _begins=True), policy.plan_per_job(snap, deep, _begins=True))


@pytest.fixture
def one_by_one_cached(monkeypatch):
    monkeypatch.setattr(classes, "MIN_JOBS_TO_CACHE", 0)    # per-job order, verdicts cached by class


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenes())
def test_the_cached_per_job_walk_decides_as_the_per_job_pass(one_by_one_cached, scene):
    snap, c = scene
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))
    deep = replace(c, backfill_depth=50, preemption=False)
    same(policy.plan(snap, deep, _begins=True), policy.plan_per_job(snap, deep, _begins=True))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenes(narrow=True))
def test_classes_alike_in_what_no_room_reads_share_it_only_where_it_holds(always_grouped, scene):
    """Classes of one shape, time limit and QoS, of other accounts, users and gates: a "no room"
    verdict shared between them (classes._Walk.rooms) must be the one each would get."""
    snap, c = scene
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))
    deep = replace(c, backfill_depth=50, preemption=False)
    same(policy.plan(snap, deep, _begins=True), policy.plan_per_job(snap, deep, _begins=True))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_plan_with_its_own_choice_of_walk_decides_the_same(scene):
    snap, c = scene
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))


def test_an_array_is_judged_a_few_times_not_once_per_task(monkeypatch):
    b = ClusterBuilder().node("n0", gpus=2, cpus=8)
    for k in range(2000):
        b.job(gpus=1, cpus=1, array_id=1, array_index=k)
    snap = b.build()
    judged = []
    real = policy._Pass._verdict

    def count(self, job):
        judged.append(job.id)
        return real(self, job)

    monkeypatch.setattr(policy._Pass, "_verdict", count)
    got = policy.plan(snap, cfg())
    assert len(got.places) == 2 and len(got.pending) == 1998
    assert len(judged) < 10
    judged.clear()
    same(got, policy.plan_per_job(snap, cfg()))
    assert len(judged) == 2000


def test_a_reservation_verdict_is_judged_again_after_another_account_takes_the_room(always_grouped):
    """X1 may not start (it would delay the big job's reservation) while the room is there; after B
    (another account) takes part of it, X2 of the same class has no room at all: another reason."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-30)
    b.job(gpus=2, cpus=2, time_limit=7200, account="eta", user="alice", submit_offset=-20)   # X1
    b.job(gpus=1, cpus=1, time_limit=600, account="phi", user="carol", submit_offset=-10)    # B
    b.job(gpus=2, cpus=2, time_limit=7200, account="eta", user="alice", submit_offset=0)     # X2
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0, max_running=100,
                          limit=100000))
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [4]
    assert reasons[3] == states.RESERVATION and reasons[5] != states.RESERVATION
    same(got, policy.plan_per_job(b.build(), c))


@pytest.mark.parametrize("walk", ["MIN_JOBS_PER_CLASS", "MIN_JOBS_TO_CACHE"])
def test_a_no_room_verdict_is_judged_again_once_an_admission_reaches_a_cap(monkeypatch, walk):
    """X1 finds no room; B (same account) is admitted and takes phi to max_running; X2 (X1's class)
    is now stopped by the cap, which comes before capacity: a cached "no room" must not cover it."""
    monkeypatch.setattr(classes, walk, 0)
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-40)   # takes the one reservation
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=-30)               # X1
    b.job(gpus=1, cpus=1, time_limit=600, account="phi", user="carol", submit_offset=-20)  # B
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=0)                 # X2
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0, max_running=2,
                          limit=100000))
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [4]
    assert reasons[3] == states.RESOURCES and reasons[5] == states.ACCOUNT_JOB_LIMIT
    same(got, policy.plan_per_job(b.build(), c))


def test_a_no_room_verdict_taken_by_an_alike_class_after_an_admission_that_moved_no_room(always_grouped,
                                                                                         monkeypatch):
    """H takes the one reservation; A (eta) finds no room; B's admission changes the pass state but
    not the room (no preemption, reservation, blocker or room given back): C (phi, another class of
    A's shape and QoS) takes A's "no room" unjudged (classes._Walk.rooms, by room stamp)."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-40)   # H
    b.job(gpus=4, cpus=2, account="eta", user="alice", submit_offset=-30)               # A
    b.job(gpus=1, cpus=1, time_limit=600, account="eta", user="bob", submit_offset=-20)  # B
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=-10)               # C
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0, max_running=100,
                          limit=100000))
    judged = []
    real = policy._Pass.judge
    monkeypatch.setattr(policy._Pass, "judge", lambda p, j: judged.append(j.id) or real(p, j))
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [4]
    assert reasons[3] == reasons[5] == states.RESOURCES
    assert judged == [2, 3, 4], judged
    same(got, policy.plan_per_job(b.build(), c))


def _changed(snap, data):
    """The next pass's snapshot: some pending jobs gone (admitted, cancelled), some replaced (a new
    reason, a new shape or submit time, one that expires now), some new (alike or not), and maybe a
    preemptor's victims draining: what a kept Queue must follow."""
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    others = [j for j in snap.jobs if j.state != states.PENDING]
    nxt = max((j.id for j in snap.jobs), default=0) + 1000
    out = []
    for j in pending:
        what = data.draw(st.sampled_from(["keep"] * 12 + ["drop", "reason", "shape", "time", "twin", "expire"]))
        if what == "drop":
            continue
        if what == "reason":
            j = replace(j, reason=states.PRIORITY, detail=f"seen at {nxt}")
        elif what == "shape":
            j = replace(j, gpus=data.draw(st.sampled_from([0, 1, 2])), cpus=data.draw(st.sampled_from([1, 4])))
        elif what == "time":
            j = replace(j, submit_time=j.submit_time + data.draw(st.sampled_from([-700.0, -1.0, 1.0, 300.0])))
        elif what == "expire":      # past its --deadline or its --max-wait: plan() ends it
            j = replace(j, deadline=snap.now + 1) if data.draw(st.booleans()) else \
                replace(j, max_wait=1, submit_time=snap.now - 10)
        elif what == "twin":
            out.append(replace(j, id=nxt, submit_time=j.submit_time + data.draw(st.sampled_from([0.0, 5.0]))))
            nxt += 1
        out.append(j)
    if out and data.draw(st.booleans()):
        ran = [k for k, j in enumerate(others) if j.state == states.RUNNING]
        if ran:
            k = data.draw(st.sampled_from(ran))
            others[k] = replace(others[k], state=states.PREEMPTING, preempted_for=data.draw(st.sampled_from(out)).id)
    return replace(snap, jobs=tuple(others + out))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(scenes(), st.data())
def test_a_kept_queue_decides_as_the_per_job_pass_as_the_queue_changes(monkeypatch, scene, data):
    """The daemon's Queue (queue.py), kept from pass to pass, over a few passes with jobs gone,
    changed and new between them; burst tails on (small burst_jobs) so they are kept too."""
    snap, c = scene
    if data.draw(st.booleans()):
        monkeypatch.setattr(queue, "REBUILD_SHARE", 2.0)    # every change filed one by one
    burst = data.draw(st.sampled_from([(0, 600.0), (1, 600.0), (2, 60.0), (3, 6000.0), (100, 600.0)]))
    c = replace(c, priority=replace(c.priority, burst_jobs=burst[0], burst_window=burst[1]))
    # a QoS or fair-share weight of 0: families of any QoS (account) merged (fronts.apart)
    zero = data.draw(st.sampled_from([(), ("qos_weight",), ("fairshare_weight",), ("qos_weight", "fairshare_weight")]))
    c = replace(c, priority=replace(c.priority, **dict.fromkeys(zero, 0.0)))
    q = classes.Queue()
    for _ in range(4):
        same(policy.plan(snap, c, queue=q), policy.plan_per_job(snap, c))
        _families_as_whole(q)
        snap = _changed(snap, data)
        if data.draw(st.integers(0, 9)) == 0:     # the burst settings changed (a reload)
            c = replace(c, priority=replace(c.priority, burst_jobs=c.priority.burst_jobs + 1))


def _cap_scene(alike_first: bool):
    """phi (max_running 2) runs one job; a high-QoS job takes the one reservation; X1 and X1b (phi)
    find no room, B (phi) is admitted and takes phi to its cap, X2 (phi) comes last. `alike_first`:
    A (eta, X1's shape and QoS) comes before X1 and finds no room first."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-40)   # takes the one reservation
    if alike_first:
        b.job(gpus=4, cpus=2, account="eta", user="alice", submit_offset=-35)           # A
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=-30)               # X1
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=-25)               # X1b
    b.job(gpus=1, cpus=1, time_limit=600, account="phi", user="carol", submit_offset=-20)  # B
    b.job(gpus=4, cpus=2, account="phi", user="carol", submit_offset=0)                 # X2
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0, max_running=2,
                          limit=100000))
    return b, c


def test_a_parked_no_room_verdict_is_judged_again_once_an_admission_reaches_a_cap(always_grouped):
    """As above, with X1's class parked (a second job of it, X1b, took the verdict before B's
    admission): the admission must send it back, so that X2 meets the cap."""
    b, c = _cap_scene(alike_first=False)
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [5]
    assert reasons[3] == reasons[4] == states.RESOURCES and reasons[6] == states.ACCOUNT_JOB_LIMIT
    same(got, policy.plan_per_job(b.build(), c))


def test_a_shared_no_room_verdict_does_not_cover_a_class_that_may_preempt(always_grouped):
    """A (low QoS) finds no room and may not preempt; B, younger (QoS does not weigh here) and of
    another account, has A's shape but a QoS that may preempt the running low job: B preempts, it
    must not take A's "no room" from classes._Walk.rooms."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=4, cpus=2, qos="low", time_limit=3600, started_ago=7200.0, account="default", user="dave")
    b.job(gpus=4, cpus=1, qos="low", account="eta", user="alice", submit_offset=-300)   # H: the one reservation
    b.job(gpus=2, cpus=1, qos="low", account="eta", user="alice", submit_offset=-200)   # A
    b.job(gpus=2, cpus=1, qos="normal", account="phi", user="carol", submit_offset=-100)  # B
    c = cfg(CONFIG.format(depth=1, preempt="true", reserved=0, min_runtime="0s", guarantee=0, max_running=100,
                          limit=100000) + "[priority]\nqos_weight = 0\nfairshare_weight = 0\n")
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert reasons[3] in (states.RESOURCES, states.PRIORITY) and reasons[4] == states.PREEMPTING_FOR
    same(got, policy.plan_per_job(b.build(), c))


def test_a_no_room_verdict_taken_from_an_alike_class_is_judged_again_once_an_admission_reaches_a_cap(always_grouped):
    """A (eta) finds no room; X1 (phi, A's shape and QoS) takes A's verdict unjudged
    (classes._Walk.rooms), X1b with it; B's admission takes phi to max_running: X2 meets the cap."""
    b, c = _cap_scene(alike_first=True)
    got = policy.plan(b.build(), c)
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [6]
    assert reasons[3] == reasons[4] == reasons[5] == states.RESOURCES and reasons[7] == states.ACCOUNT_JOB_LIMIT
    same(got, policy.plan_per_job(b.build(), c))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.randoms(use_true_random=False))
def test_a_pass_from_a_kept_standing_decides_as_one_that_counts_the_running_jobs(scene, rnd):
    """plan() given a kept Standing (the running jobs' free capacity and quota usage, told each
    start and end: policy/standing.py) decides as the plan() that counts the running jobs itself,
    and the pass leaves the Standing as it found it."""
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


def test_a_standing_counts_free_only_the_gpus_of_up_nodes():
    """A job still running on a drained node holds none of the free GPUs the pass counts (protected
    QoS capacity reads them): found by the property above on one seed in eight."""
    b = ClusterBuilder().node("a", gpus=4, state="drain").running("a", gpus=2).node("b", gpus=4).job(gpus=1)
    snap, c = b.build(), cfg("[qos.normal]\npriority = 100\n[qos.high]\npriority = 200\nreserved = 4\n")
    standing = policy.Standing(snap.nodes, c, snap.now)
    for j in snap.jobs:
        if j.state in states.ON_NODE:
            standing.start(j)
    whole = policy.plan(snap, c)
    assert not whole.places and "4 of the 4 free GPUs" in whole.pending[0].detail
    same(policy.plan(snap, c, standing=standing), whole)


def test_a_standing_told_of_fewer_jobs_gives_another_plan():
    """The check above can fail: a Standing that missed a running job's start lets the pass place a
    job on that job's GPUs."""
    snap, c = ClusterBuilder().node("n", gpus=2).running("n", gpus=2).job(gpus=1).build(), cfg()
    assert not policy.plan(snap, c).places
    assert policy.plan(snap, c, standing=policy.Standing(snap.nodes, c, snap.now)).places


# -- what the daemon keeps (policy/kept.py) ------------------------------------------------------------
# Its Queue, and for a backfill-off pass its Backlog, filed from each pass's snapshot by what changed:
# over changing snapshots plan() decides as the per-job pass, for backfill on and off, and the kept
# groups and burst tails stay those of the whole queue. And the two costs a changing queue used to
# pay: a record that changed only its reason is not filed again; the jobs behind a backfill-off
# blocker in an account that no job could take to a cap take the blocker's verdict unjudged.
def _reasons(snap, data):
    """Many pending records replaced by one that says something else (the applier's new reason)."""
    jobs = tuple(replace(j, reason=states.PRIORITY, detail=f"seen {j.id}")
                 if j.state == states.PENDING and data.draw(st.booleans()) else j for j in snap.jobs)
    return replace(snap, jobs=jobs)


def _filed_as_whole(kept: Kept, snap, c) -> None:
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    w = c.priority
    burst = (w.burst_jobs, w.burst_window) if w.burst_penalty else None
    whole = multifactor.burst_tail(pending, *burst) if burst else set()
    if kept.backlog is not None:
        b = kept.backlog
        assert b.jobs == {j.id: j for j in pending}
        assert b.bursting == whole
        for key, g in b.groups.items():
            assert g.ids == [j.id for j in sorted((b.jobs[i] for i in g.ids), key=lambda j: (j.submit_time, j.id))]
            assert all((j.qos, j.account, j.id in whole, gated(j)) == key for j in (b.jobs[i] for i in g.ids))
    q = kept.queue     # it holds the jobs the pass walked: those expiring in it were left out
    if q.jobs and burst == q.burst:
        assert q.bursting == (multifactor.burst_tail(list(q.jobs.values()), *burst) if burst else set())
    _families_as_whole(q)


def _families_as_whole(q) -> None:
    """The Queue's families (fronts.py reads them) are its groups, each at its first job's place: by QoS,
    account and burst flag, the QoS (account) only where its weight is not 0 (queue.family)."""
    fams = {}
    for k, g in q.groups.items():
        head = g.jobs[0]
        fam = (head.qos if q.apart[0] else "", head.account if q.apart[1] else "", k[1])
        fams.setdefault(fam, []).append((head.submit_time, head.id, k, g))     # the class's own Group beside its key
    assert q.families == {f: sorted(fr) for f, fr in fams.items()}
    for user, mine in q.users.items():      # the times and ids _retail compares, place by place
        assert q.times[user] == [j.submit_time for j in mine] and q.uids[user] == [j.id for j in mine]
    needs, shapes = {}, {}
    for k, g in q.groups.items():
        need = (g.jobs[0].total_gpus, g.jobs[0].cpus * g.jobs[0].nodes)
        needs[need] = needs.get(need, 0) + 1
        head = g.jobs[0]
        own = k[0][0] == "own"
        shapes.setdefault(kinds.OWN if own else (head.gpus, head.gpu_type, head.cpus, head.mem), set()).add(id(g))
    assert q.kinds.needs == needs
    # each request shape's classes, those judged on their own apart (settle.settled asks a class of each)
    assert {s: set(map(id, gs)) for s, gs in q.kinds.shapes.items()} == shapes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.data())
def test_the_daemons_kept_queue_and_backlog_decide_as_the_per_job_pass_as_the_queue_changes(scene, data):
    snap, c = scene
    settle_check(data)
    burst = data.draw(st.sampled_from([(1, 600.0), (2, 60.0), (3, 6000.0), (100, 600.0)]))
    c = replace(c, priority=replace(c.priority, burst_jobs=burst[0], burst_window=burst[1]))
    kept = Kept()
    for _ in range(5):
        got = policy.plan(snap, c, **kept.inputs(snap, c))
        same(got, policy.plan_per_job(snap, c))
        _filed_as_whole(kept, snap, c)
        snap = _changed(snap, data) if data.draw(st.booleans()) else _reasons(snap, data)
        if data.draw(st.integers(0, 5)) == 0:      # a reload turns backfill on or off
            c = replace(c, backfill_depth=data.draw(st.sampled_from([0, 1])))


def settle_check(data) -> None:
    """The walk asks whether the pass has settled (policy/settle.py) from its first turn, or later."""
    settle.SETTLE_CHECK = data.draw(st.sampled_from([0, 1, 64]))


@pytest.fixture(autouse=True)
def _settle_check_restored(monkeypatch):
    monkeypatch.setattr(settle, "SETTLE_CHECK", settle.SETTLE_CHECK)


def _deep(n: int, b=None):
    """One node full, a blocker, then `n` jobs of carol (account phi: a max_running cap far away)."""
    b = b or ClusterBuilder()
    b.node("n0", gpus=2, cpus=8)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="eta", user="alice")
    b.job(gpus=2, cpus=1, account="eta", user="alice", submit_offset=-50)
    for k in range(n):
        b.job(gpus=1, cpus=1, account="phi", user="carol", submit_offset=float(k))
    return b


DEEP = """
[scheduler]
backfill_depth = 0
[accounts.eta]
users = ["alice"]
[accounts.phi]
users = ["carol"]
max_running = 1000
"""


def test_jobs_behind_the_blocker_in_an_account_far_from_its_cap_take_its_verdict_unjudged(monkeypatch):
    snap, c = _deep(300).build(), cfg(DEEP)
    kept = Kept()
    judged = []
    real = policy._Pass.judge
    monkeypatch.setattr(policy._Pass, "judge", lambda p, j: judged.append(j.id) or real(p, j))
    got = policy.plan(snap, c, **kept.inputs(snap, c))
    mine = len(judged)
    same(got, policy.plan_per_job(snap, c))
    assert kept.backlog is not None
    # The blocker and the first job behind it, whose verdict the rest take; before, all 301.
    assert mine == 2, mine
    # A cap that one more job could reach (carol runs the one phi may): each job of phi is judged.
    b = ClusterBuilder()
    b.node("n1", gpus=1, cpus=8)
    b.running("n1", gpus=1, cpus=1, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    snap, near = _deep(300, b).build(), cfg(DEEP.replace("max_running = 1000", "max_running = 1"))
    judged.clear()
    got = policy.plan(snap, near, **Kept().inputs(snap, near))
    assert len(judged) == 301
    same(got, policy.plan_per_job(snap, near))
    assert strict.applies(near)


def test_a_record_that_changed_only_its_reason_is_not_filed_again(monkeypatch):
    snap, c = _deep(300).build(), cfg(DEEP.replace("backfill_depth = 0", "backfill_depth = 1")
                                      + '[priority]\nburst_jobs = 5\nburst_window = "1h"\n')
    kept = Kept()
    policy.plan(snap, c, **kept.inputs(snap, c))
    tails, unfiled = [], []
    real_tail, real_unfile = multifactor.burst_tail, queue.unfile
    monkeypatch.setattr(multifactor, "burst_tail", lambda *a: tails.append(1) or real_tail(*a))
    monkeypatch.setattr(queue, "unfile", lambda *a: unfiled.append(1) or real_unfile(*a))
    # A few records with a new reason (below the share that files everything anew).
    jobs = tuple(replace(j, detail="something else") if j.id % 20 == 0 and j.state == states.PENDING else j
                 for j in snap.jobs)
    again = replace(snap, jobs=jobs)
    got = policy.plan(again, c, **kept.inputs(again, c))
    assert tails == [] and unfiled == []
    same(got, policy.plan_per_job(again, c))
    assert all(kept.queue.jobs[j.id] is j for j in jobs if j.state == states.PENDING)


def _daemon_order(snap, data):
    """The next snapshot as the daemon's dict gives it: some pending records replaced in place by
    one with a new reason (or that expires now), some gone, a few new at the end."""
    jobs, twins, nxt = {}, [], max((j.id for j in snap.jobs), default=0) + 1000
    for j in snap.jobs:
        if j.state != states.PENDING:
            jobs[j.id] = j
            continue
        what = data.draw(st.sampled_from(["keep"] * 8 + ["drop", "reason", "expire", "twin"]))
        if what == "drop":
            continue
        if what == "reason":
            j = replace(j, reason=states.PRIORITY, detail=f"seen at {nxt}")
        elif what == "expire":
            j = replace(j, deadline=snap.now + 1)
        elif what == "twin":
            twins.append(replace(j, id=nxt, reason="", detail=""))
            nxt += 1
        jobs[j.id] = j
    return replace(snap, jobs=(*jobs.values(), *twins))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.data())
def test_the_kept_queue_filed_from_what_changed_decides_as_the_per_job_pass(scene, data):
    """Through Kept (which gives plan() its Seen: policy/seen.py) over snapshots in the daemon's
    order, a pass's expiries applied or not (the job left pending in the next snapshot, as when a
    plan is not applied); sometimes the same snapshot planned twice (a pass planned again)."""
    snap, c = scene
    settle_check(data)
    kept = Kept()
    for _ in range(5):
        got = policy.plan(snap, c, **kept.inputs(snap, c))
        same(got, policy.plan_per_job(snap, c))
        if data.draw(st.integers(0, 4)) == 0:
            same(policy.plan(snap, c, **kept.inputs(snap, c)), got)
        if got.expires and data.draw(st.booleans()):        # applied: the expired jobs are gone
            ended = {e.job_id for e in got.expires}
            snap = replace(snap, jobs=tuple(j for j in snap.jobs if j.id not in ended))
        snap = _daemon_order(snap, data)


# -- the daemon's kept plan() as the clock and the cluster change (issue 41) ---------------------------
# Kept (the Queue with its families, fronts.py; the Seen; the Backlog; the Tracks) decides as a whole
# pass over each snapshot of a queue that changes the way a live one does between passes: the clock
# moves (a --begin time or a retry backoff passes, ages cross age_max), the last pass's admissions
# start (the daemon's applier), running jobs end, pending ones are cancelled, new ones come, nodes
# drain and come back, budgets are charged and fair-share usage moves. A verdict kept past a change of
# an input it read shows up as a reason or an admission that differs.

# Ages cross age_max within a few passes (seconds), fair share weighs, a burst is a few jobs.
PRIORITY = dict(age_max=900.0, fairshare_weight=50.0, burst_jobs=2, burst_window=120.0)


def _step(snap, got, c, data):
    """The next snapshot after the plan `got` of `snap`: applied, then changed."""
    jobs = {j.id: j for j in snap.jobs}
    done = apply_plan(got, jobs, jobs, snap.nodes, snap.now)
    for j in done.started + done.pended + done.expired:
        jobs[j.id] = j
    for j in done.expired:
        jobs.pop(j.id, None)
    now = snap.now + data.draw(st.sampled_from([0.0, 1.0, 30.0, 600.0, 1000.0]))
    for j in list(jobs.values()):
        what = data.draw(st.sampled_from(["keep"] * 10 + ["end", "cancel", "twin", "backoff"]))
        if what == "end" and j.state in states.ON_NODE or what == "cancel" and j.state == states.PENDING:
            del jobs[j.id]
        elif what == "twin" and j.state == states.PENDING:
            nxt = max(jobs) + 1
            jobs[nxt] = replace(j, id=nxt, submit_time=now, reason="", detail="", earmark="", earmark_gpus=())
        elif what == "backoff" and j.state == states.PENDING and not j.held:
            jobs[j.id] = replace(j, eligible_time=now + data.draw(st.sampled_from([-1.0, 20.0])))
    nodes = tuple(replace(n, lease_expiry=now + 30.0, state=data.draw(st.sampled_from(["up"] * 5 + ["drain"])))
                  for n in snap.nodes)
    spent = tuple((b, s + data.draw(st.sampled_from([0, 0, 10**6, 10**8]))) for b, s in snap.spent)
    usage = (("eta", data.draw(st.sampled_from([0.0, 5.0, 500.0]))), ("phi", data.draw(st.sampled_from([0.0, 50.0]))))
    return replace(snap, now=now, nodes=nodes, jobs=tuple(jobs.values()), spent=spent, usage=usage)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.data())
def test_kept_passes_decide_as_whole_passes_as_the_queue_and_the_clock_change(scene, data):
    snap, c = scene
    settle_check(data)
    c = replace(c, priority=replace(c.priority, **PRIORITY))
    kept = Kept()
    for _ in range(6):
        got = policy.plan(snap, c, **kept.inputs(snap, c))
        same(got, policy.plan_per_job(snap, c))
        same(got, policy.plan(snap, c))         # a whole pass, nothing kept
        snap = _step(snap, got, c, data)
        if data.draw(st.integers(0, 5)) == 0:      # a reload turns backfill on or off
            c = replace(c, backfill_depth=data.draw(st.sampled_from([0, 1, 3])))


def _passed_scene(array: bool = False):
    """H (high QoS) takes the one reservation: the pass is frozen (settle._frozen). In phi's family
    (normal QoS), P0 is the front class; X (X1, X2: P0's shape, another time limit) comes next and
    fits no node, so the walk passes it unreached (settle.passes_from); B (phi, small) is admitted and
    takes phi to max_running; C (small) is reached before B's admission, Y (P0's shape) only after
    it, when C's turn comes. `array`: P0, X and B are dave's (no caps near), X and B tasks of one
    array throttled to 1, which B's admission reaches."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-40)       # H
    who = dict(account="default", user="dave") if array else dict(account="phi", user="carol")
    b.job(gpus=4, cpus=4, submit_offset=-35, **who)                                          # P0

    def task(k):
        return dict(array_id=100, array_throttle=1, array_index=k) if array else {}
    b.job(gpus=4, cpus=4, time_limit=7200, submit_offset=-30, **who, **task(0))             # X1
    b.job(gpus=1, cpus=1, time_limit=600, submit_offset=-20, **who, **task(2))              # B
    b.job(gpus=4, cpus=4, time_limit=7200, submit_offset=-10, **who, **task(1))             # X2
    b.job(gpus=1, cpus=1, time_limit=3600, submit_offset=-5, **who)                         # C
    b.job(gpus=4, cpus=4, time_limit=86400, submit_offset=0, **who)                         # Y
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0, max_running=2,
                          limit=100000))
    return b.build(), c


@pytest.mark.parametrize("array", [False, True])
def test_a_class_passed_unreached_is_judged_again_once_an_admission_reaches_a_cap(monkeypatch, array):
    """Issue 41: a class the frozen walk passes with its "no room" verdict (settle.passes_from: no index,
    no park) is woken by an admission of its account that reaches a cap, or of its array that reaches
    the throttle (settle.recall): X1, before B, keeps "no room"; X2, after it, meets the cap. A
    recall that misses it fails here, as does a class reached after B (Y) given the caps' answer
    from before B (settle.Dead.open kept past an admission)."""
    snap, c = _passed_scene(array)
    passed = []
    real = settle.passes_from

    def passes_from(w, src, k, groups):
        end = real(w, src, k, groups)
        passed.extend(groups[f[2]].ids[0] for f in src[k:end])
        return end
    monkeypatch.setattr(settle, "passes_from", passes_from)
    got = policy.plan(snap, c, queue=queue.Queue())
    reasons = {p.job_id: p.reason for p in got.pending}
    assert [p.job_id for p in got.places] == [5] and 4 in passed
    assert reasons[3] == reasons[4] == states.RESOURCES
    assert reasons[6] == (states.ARRAY_TASK_LIMIT if array else states.ACCOUNT_JOB_LIMIT)
    assert reasons[8] == (states.RESOURCES if array else states.ACCOUNT_JOB_LIMIT)
    same(got, policy.plan_per_job(snap, c))


@st.composite
def frozen_scenes(draw):
    """Passes that freeze early (one reservation, taken first by H; no preemption) over families of
    several classes each: big requests that fit no node (passed unreached: settle.passes_from) among small
    ones admitted up to a cap (phi's max_running and max_gpus, bob's max_gpus) or dave's array
    throttle: the admissions that must wake passed classes (settle.recall)."""
    c = cfg(CONFIG.format(depth=1, preempt="false", reserved=0, min_runtime="0s", guarantee=0,
                          max_running=draw(st.sampled_from([1, 2, 3, 100])), limit=100000))
    b = ClusterBuilder().node("n0", gpus=4, cpus=16, slots=16)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, account="phi", user="carol")
    b.job(gpus=4, cpus=4, qos="high", account="eta", user="alice", submit_offset=-10000)    # H
    throttle = draw(st.sampled_from([1, 2]))
    for k in range(draw(st.integers(2, 30))):
        acct, user = draw(st.sampled_from([("phi", "carol"), ("eta", "bob"), ("default", "dave")]))
        big = draw(st.booleans())
        task = dict(array_id=500, array_index=k, array_throttle=throttle) if user == "dave" and draw(st.booleans()) else {}
        b.job(gpus=4 if big else draw(st.sampled_from([0, 1])), cpus=4 if big else 1, account=acct, user=user,
              time_limit=draw(st.sampled_from([600, 7200, 86400])), submit_offset=-draw(st.integers(0, 5000)), **task)
    return b.build(), c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frozen_scenes())
def test_classes_a_frozen_walk_passes_decide_as_the_per_job_pass(scene):
    """Issue 41: the classes a frozen walk passes unreached and those its wake rule sends back
    (settle.passes_from, settle.recall) take the per-job pass's verdicts, with a kept Queue's families."""
    snap, c = scene
    same(policy.plan(snap, c, queue=queue.Queue()), policy.plan_per_job(snap, c))


# Run times at and around the floors' steps, below 1 s (each its own floor) and 0.
LEARNED = [None, None, 0.0, 0.5, 1.0, 30.0, 600.0, 650.0, 3600.0, 3601.0, 4000.0, 86400.0]


def short_first(c, data):
    w = c.priority
    return replace(c, priority=replace(
        w, short_job_weight=data.draw(st.sampled_from([w.age_weight, w.age_weight / 2])),
        short_job_scale=data.draw(st.sampled_from([60.0, 3600.0])),
        age_max=data.draw(st.sampled_from([600.0, 7 * 86400.0])),      # 600: some jobs' age term capped
        burst_jobs=data.draw(st.sampled_from([1, 100])), burst_window=600.0))


def learned(snap, data):
    jobs = tuple(replace(j, learned_est=data.draw(st.sampled_from(LEARNED))) if j.state == states.PENDING else j
                 for j in snap.jobs)
    return replace(snap, jobs=jobs)


def families_as_whole(q, now: float, c) -> None:
    """The Queue's families are its groups split by run time floor, each at its first job's place (split:
    its Linear key at the Queue's epoch, multifactor.Linear: the classes near or past their full age first,
    by submit time), a family's floor is at most the expected run time of each of its classes and its
    slopes span theirs (the bounds' premises); not split only while every job waiting has waited past the
    short-job term (their scores tie, FIFO)."""
    aged = multifactor.aged(now, c.priority)
    assert q.split or all(aged(j.submit_time) for j in q.jobs.values())
    fams = {}
    for k, g in q.groups.items():
        head = g.jobs[0]
        e = multifactor.expected_runtime(head)
        assert all(multifactor.expected_runtime(j) == e for j in g.jobs)
        floor = multifactor.runtime_floor(e)
        assert floor <= e
        fam = (head.qos, head.account, k[1]) + ((floor,) if q.split else ())
        fams.setdefault(fam, []).append((q.linear.key(head) if q.split else head.submit_time, head.id, k, g))
        if q.split:
            assert q.linear.upto >= now and q.flats[fam] <= q.linear.slope(head) <= q.slopes[fam]
    assert q.families == {f: sorted(fr) for f, fr in fams.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.data())
def test_a_kept_queue_with_short_jobs_first_decides_as_the_per_job_pass(scene, data):
    snap, c = scene
    settle_check(data)
    c = short_first(c, data)
    snap = learned(snap, data)
    q = classes.Queue()
    for _ in range(4):
        same(policy.plan(snap, c, queue=q), policy.plan_per_job(snap, c))
        families_as_whole(q, snap.now, c)
        snap = learned(_changed(snap, data), data) if data.draw(st.booleans()) else _changed(snap, data)
        snap = replace(snap, now=snap.now + data.draw(st.sampled_from([0.0, 1.0, 300.0, 5000.0])))
    c = replace(c, priority=replace(c.priority, short_job_weight=0.0))     # a reload turns it off: filed anew
    same(policy.plan(snap, c, queue=q), policy.plan_per_job(snap, c))
