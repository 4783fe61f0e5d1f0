"""Backfill reservations from timelines kept between passes (policy/tracks.py, through policy.Kept)
decide as whole passes: over changing snapshots where running jobs end, admitted jobs start, the
clock moves past time limits and learned estimates, and nodes change, plan() with the daemon's Kept
equals plan_per_job, reservations (Start: job, time, node) included."""
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.policy import classes, settle, tracks
from labq.scheduler.policy.kept import Kept
from labq.scheduler.sim.through import Through
from tests.harness import ClusterBuilder, G, cfg

CONFIG = """
[scheduler]
backfill_depth = {depth}
preemption = {preempt}
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
[qos.high]
priority = 200
[accounts.eta]
users = ["alice", "bob"]
[accounts.phi]
users = ["carol"]
max_running = {max_running}
[estimate]
backfill = {learned}
"""


@st.composite
def scenes(draw):
    text = CONFIG.format(depth=draw(st.sampled_from([1, 2, 3])), preempt=draw(st.sampled_from(["true", "false"])),
                         max_running=draw(st.sampled_from([2, 100])), learned=draw(st.sampled_from(["true", "false"])))
    b = ClusterBuilder()
    for n in range(draw(st.integers(1, 4))):
        b.node(f"n{n}", gpus=draw(st.sampled_from([2, 4, 8])), cpus=draw(st.sampled_from([8, 16])), mem=64 * G,
               slots=draw(st.sampled_from([2, 4, 8])))
    for n in list(b.nodes):
        left = len(n.gpus)
        for _ in range(draw(st.integers(0, 4))):
            g = draw(st.sampled_from([1, 2]))
            if g > left:
                break
            b.running(n.name, gpus=g, cpus=1, qos=draw(st.sampled_from(["low", "normal"])),
                      started_ago=draw(st.sampled_from([30.0, 500.0, 3000.0, 7200.0])),
                      time_limit=draw(st.sampled_from([600, 3600, 86400])),
                      learned_est=draw(st.sampled_from([None, 100, 1000, 4000])))
            left -= g
    two = b.nodes[:2]
    if len(two) == 2 and all(b.free_gpus(n, 1) for n in two) and draw(st.booleans()):
        b.running_gang([n.name for n in two], gpus=1, cpus=1, qos="low", started_ago=300.0, time_limit=3600)
    for _ in range(draw(st.integers(1, 25))):
        account, user = draw(st.sampled_from([("eta", "alice"), ("eta", "bob"), ("phi", "carol")]))
        b.job(gpus=draw(st.sampled_from([1, 2, 4, 8])), cpus=draw(st.sampled_from([1, 4])),
              time_limit=draw(st.sampled_from([300, 600, 3600, 86400])), qos=draw(st.sampled_from(["normal", "high"])),
              account=account, user=user,
              nodes=draw(st.sampled_from([1, 1, 1, 1, 2])), learned_est=draw(st.sampled_from([None, 200])),
              submit_offset=draw(st.sampled_from([0.0, -50.0, -5000.0])))
    return b.build(), cfg(text)


def _next(snap, got, data):
    """The next pass's snapshot: the plan's admissions running, some running jobs gone, the clock
    moved on (every node heartbeats), maybe a node changed, some new jobs."""
    now = snap.now + data.draw(st.sampled_from([0.0, 1.0, 60.0, 250.0, 700.0, 3700.0]))
    placed = {p.job_id: p for p in got.places}
    jobs, nxt = [], max(j.id for j in snap.jobs) + 1
    for j in snap.jobs:
        p = placed.get(j.id)
        if p is not None:
            a = Attempt(1, p.node, p.gpus, start_time=snap.now, dispatch_time=snap.now, parts=p.parts)
            j = replace(j, state=states.RUNNING, node=p.node, gpu_uuids=p.gpus, parts=p.parts, attempts=(a,),
                        start_time=snap.now)
        elif j.state in states.ON_NODE:
            what = data.draw(st.sampled_from(["keep"] * 4 + ["end", "copy"]))
            if what == "end":
                continue
            if what == "copy":      # a new record, the same allocation (a changed reason, usage...)
                j = replace(j, reason=states.PRIORITY)
        jobs.append(j)
    for _ in range(data.draw(st.integers(0, 3))):
        jobs.append(replace(jobs[-1], id=nxt, state=states.PENDING, attempts=(), node=None, gpu_uuids=(), parts=(),
                            start_time=None, submit_time=now, gpus=data.draw(st.sampled_from([1, 2]))))
        nxt += 1
    nodes = [replace(n, lease_expiry=now + 30, last_heartbeat=now) for n in snap.nodes]
    what = data.draw(st.sampled_from(["none"] * 4 + ["drain", "up", "cpus", "silent"]))
    k = data.draw(st.integers(0, len(nodes) - 1))
    if what == "silent":        # no heartbeat: the same record, its lease maybe run out (the kept Standing)
        nodes[k] = snap.nodes[k]
    elif what != "none":
        nodes[k] = replace(nodes[k], **{"drain": {"state": "drain"}, "up": {"state": "up"},
                                        "cpus": {"cpus": nodes[k].cpus + 8}}[what])
    return replace(snap, now=now, nodes=tuple(nodes), jobs=tuple(jobs))


def same(a, b) -> None:
    assert sorted(a.places, key=lambda p: p.job_id) == sorted(b.places, key=lambda p: p.job_id)
    assert a.expires == b.expires
    assert {p.job_id: (p.reason, p.detail) for p in a.pending} == {p.job_id: (p.reason, p.detail) for p in b.pending}
    assert a.preempts == b.preempts
    assert a.starts == b.starts


@pytest.mark.timeout(1200)      # six passes and their references per example, on a loaded machine
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(scenes(), st.data())
def test_reservations_from_kept_timelines_are_those_of_whole_passes_as_the_cluster_changes(monkeypatch, scene, data):
    """A pass may also settle early (policy/settle.py): SETTLE_CHECK 0 asks before every turn."""
    snap, c = scene
    monkeypatch.setattr(settle, "SETTLE_CHECK", data.draw(st.sampled_from([0, settle.SETTLE_CHECK])))
    monkeypatch.setattr(classes, "MIN_JOBS_PER_CLASS", 0)    # small queues too take the class walk
    kept = Kept()
    for _ in range(6):
        got = policy.plan(snap, c, **kept.inputs(snap, c))
        same(got, policy.plan_per_job(snap, c))
        snap = _next(snap, got, data)


def test_a_pass_writes_its_admissions_and_reservations_on_its_own_copy_of_the_kept_timelines():
    b = ClusterBuilder().node("n0", gpus=4, cpus=16).node("n1", gpus=4, cpus=16)
    b.running("n0", gpus=4, cpus=1, time_limit=3600, started_ago=60.0)
    b.running("n1", gpus=2, cpus=1, time_limit=7200, started_ago=60.0)
    b.job(gpus=4, cpus=1, submit_offset=-10)          # blocked: reserved on n0 at its end
    b.job(gpus=2, cpus=1, time_limit=600)             # fits n1 now
    snap, c = b.build(), cfg("[scheduler]\nbackfill_depth = 1\n")
    t = tracks.Tracks()
    got = policy.plan(snap, c, tracks=t)
    assert [p.node for p in got.places] == ["n1"] and [s.node for s in got.starts] == ["n0"]
    assert sorted(len(a) for a in t.allocs.values()) == [1, 1]      # the running jobs' alone
    assert not any(a.reserved for a in t.allocs["n0"])
    same(policy.plan(snap, c, tracks=t), policy.plan_per_job(snap, c))


def test_an_overdue_running_jobs_end_moves_with_the_clock_from_pass_to_pass():
    """Its expected end is now + 1 at every pass (backfill._expected_end): filed again at each, and
    only once (a job filed again at `now` is good until `now` again)."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=4, cpus=1, time_limit=600, started_ago=7200.0)      # overdue
    b.job(gpus=4, cpus=1)
    snap, c = b.build(), cfg("[scheduler]\nbackfill_depth = 1\n")
    kept = Kept()
    for step in (0.0, 0.0, 60.0, 1.0):
        snap = replace(snap, now=snap.now + step,
                       nodes=tuple(replace(n, lease_expiry=snap.now + step + 30) for n in snap.nodes))
        got = policy.plan(snap, c, **kept.inputs(snap, c))
        assert [s.at for s in got.starts] == [snap.now + 1]
        same(got, policy.plan_per_job(snap, c))


def test_a_running_job_replaced_by_a_record_with_a_later_limit_moves_the_reservation_behind_it():
    """The same id, a new record (its limit raised while it runs): the kept timelines file it again,
    so the reservation behind it moves to its new end, as a whole pass has it."""
    b = ClusterBuilder().node("n0", gpus=4, cpus=16)
    b.running("n0", gpus=4, cpus=1, time_limit=3600, started_ago=60.0)
    b.job(gpus=4, cpus=1)
    snap, c = b.build(), cfg("[scheduler]\nbackfill_depth = 1\n")
    kept = Kept()
    got = policy.plan(snap, c, **kept.inputs(snap, c))
    first = [s.at for s in got.starts]
    assert len(first) == 1
    longer = tuple(replace(j, time_limit=7200) if j.state in states.ON_NODE else j for j in snap.jobs)
    snap = replace(snap, jobs=longer)
    got = policy.plan(snap, c, **kept.inputs(snap, c))
    assert [s.at for s in got.starts] == [first[0] + 3600]
    same(got, policy.plan_per_job(snap, c))


def _held(t):
    """What a Tracks holds, but the order of its log within a sync (the log is read as a set of nodes from a
    sync's end on: Earliest.refresh; so the test keeps it whole, a cut falling inside one sync's entries)."""
    return (list(t.jobs.items()), t.allocs, sorted(t.until, key=lambda u: u[:3]), sorted(t.log), t.synced >= 0)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10 ** 6), st.integers(0, 30), st.sampled_from(["tell", "see", "mixed"]))
def test_tracks_synced_from_what_a_seen_found_changed_hold_what_a_comparison_of_every_running_job_holds(
        monkeypatch, seed, n, how):
    """Tracks.sync given the caller's Seen (its `left` and `came` since the last snapshot, where the running jobs
    are that Seen's) against one that compares every running job: the same records in the same order, the same
    allocations on each node in the same order, the same due ends; as sim/through.py tells the changes, as the
    daemon's Kept sees them, and a mix. Passes that build no timelines (no sync) come between some."""
    monkeypatch.setattr(tracks, "LOG_PER_NODE", 10 ** 6)
    rng = random.Random(seed)
    b = ClusterBuilder()
    for k in range(3):
        b.node(f"n{k}", gpus=4, cpus=16)
    nodes, c, now = b.build().nodes, cfg("[estimate]\nbackfill = true\n"), 1000.0

    def job(i, k):
        state = rng.choice([states.PENDING, states.RUNNING, states.RUNNING, states.PREEMPTING])
        node = rng.choice(["n0", "n1", "n2"])
        return Job(id=i, user="alice", account="eta", argv=("true",), workdir="/tmp", submit_time=float(i),
                   state=state, detail=f"v{k}", node=None if state == states.PENDING else node,
                   gpu_uuids=() if state == states.PENDING else (f"GPU-{node}-{rng.randrange(4)}",),
                   start_time=None if state == states.PENDING else now - rng.choice([10.0, 500.0]),
                   time_limit=rng.choice([600, 3600]), learned_est=rng.choice([None, 300.0]))
    t = Through()
    told, whole = tracks.Tracks(t.seen), tracks.Tracks()
    for i in range(n):
        t.put(job(i, 0))
    nxt = n
    for k in range(10):
        snap = tuple(t.active.values())
        if how == "tell" or how == "mixed" and rng.random() < 0.5:
            t.seen.tell(snap, t.touched, t.active, t._place)
        else:
            t.seen.see(snap)
        t.touched = set()
        if rng.random() < 0.8:
            for kept in (told, whole):
                kept.sync(nodes, t.seen.running, now, c)
            assert _held(told)[:4] == _held(whole)[:4]
        now += rng.choice([0.0, 100.0, 700.0])
        for i in list(t.active):
            r = rng.random()
            if r < 0.15:
                t.leave(i)
            elif r < 0.35:
                t.put(replace(job(i, k + 1), submit_time=t.active[i].submit_time))
        for _ in range(rng.randrange(4)):
            t.put(job(nxt, k + 1))
            nxt += 1
