"""What changed between a caller's snapshots, found by identity place by place (policy/seen.py),
against a reading of the whole snapshot, over snapshots that change as the daemon's do (its jobs
dict: records replaced in place, ended ones gone, new ones at the end) and as they may not (moved,
shuffled). plan() through policy.Kept, which files its Queue from those changes, is checked against
the per-job pass in test_plan_classes.py."""
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job
from labq.scheduler.policy import seen as seen_mod
from labq.scheduler.policy.seen import Seen

STATES = (states.PENDING, states.PENDING, states.RUNNING, states.PREEMPTING, states.COMPLETING)


def _job(i: int, state: str, k: int = 0) -> Job:
    return Job(id=i, user="alice", account="eta", argv=("true",), workdir="/tmp", submit_time=float(i),
               state=state, detail=f"v{k}")


def _step(jobs: dict[int, Job], rng: random.Random, nxt: int, k: int, order: str) -> int:
    """One pass's changes to the jobs dict: replaced in place, gone, new at the end; `order`:
    "dict" as the daemon's, "moved" (some taken out and put back at the end), "shuffled"."""
    for i in list(jobs):
        r = rng.random()
        if r < 0.1:
            del jobs[i]
        elif r < 0.25:
            jobs[i] = replace(jobs[i], state=rng.choice(STATES), detail=f"v{k}")
    for _ in range(rng.randrange(4)):
        jobs[nxt] = _job(nxt, rng.choice(STATES), k)
        nxt += 1
    if order == "moved":
        for i in rng.sample(list(jobs), min(3, len(jobs))):
            jobs[i] = jobs.pop(i)
    elif order == "shuffled":
        items = list(jobs.items())
        rng.shuffle(items)
        jobs.clear()
        jobs.update(items)
    return nxt


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10 ** 6), st.integers(0, 60), st.sampled_from(["dict", "dict", "moved", "shuffled"]),
       st.sampled_from([(8, 256), (1, 1), (0, 0), (2, 4)]))
def test_seen_finds_what_a_reading_of_the_whole_snapshot_finds(monkeypatch, seed, n, order, limits):
    monkeypatch.setattr(seen_mod, "AHEAD", limits[0])
    monkeypatch.setattr(seen_mod, "BUDGET", limits[1])
    rng = random.Random(seed)
    jobs = {i: _job(i, rng.choice(STATES)) for i in range(n)}
    s, before, nxt, was = Seen(), {}, n, []
    for k in range(6):
        snap = tuple(jobs.values())
        s.see(snap)
        pending = {j.id: j for j in snap if j.state == states.PENDING}
        assert s.running == [j for j in snap if j.state in states.ON_NODE]
        assert s.pending == pending
        assert all(pending.get(j.id) is j for j in s.changed)
        assert {j.id for j in s.changed if before.get(j.id) is not j} == \
            {i for i, j in pending.items() if before.get(i) is not j}
        assert s.gone == before.keys() - pending.keys()
        # the records on a node that left and came, by identity (what standing.py counts)
        on = s.running
        assert sorted(map(id, s.left)) == sorted(id(j) for j in was if not any(j is x for x in on))
        assert sorted(map(id, s.came)) == sorted(id(j) for j in on if not any(j is x for x in was))
        before, was = pending, on
        nxt = _step(jobs, rng, nxt, k + 1, order)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(0, 60), st.booleans())
def test_a_seen_told_the_changes_finds_what_one_that_sees_the_snapshot_finds(seed, n, moved):
    """sim/through.py tells its Seen the ids it put or took out (`Seen.tell`) instead of a comparison
    of the whole snapshot: the same running jobs (in snapshot order), pending, changed, gone, left and
    came as `see` over the same snapshots; a Seen that is told and then sees (or the other way) too."""
    from labq.scheduler.sim.through import Through
    rng = random.Random(seed)
    t, seeing, mixed = Through(), Seen(), Seen()
    for i in range(n):
        t.put(_job(i, rng.choice(STATES)))
    nxt, before = n, {}
    for k in range(8):
        snap = tuple(t.active.values())
        t.seen.tell(snap, t.touched, t.active, t._place)
        seeing.see(snap)
        if rng.random() < 0.5:
            mixed.see(snap)
        else:
            mixed.tell(snap, t.touched, t.active, t._place)
        t.touched = set()
        for s in (t.seen, mixed):
            assert s.running == seeing.running
            assert s.pending == seeing.pending
            # (`see` also names a record that moved unchanged; neither names one that did not change)
            assert [j.id for j in s.changed if before.get(j.id) is not j] == \
                [j.id for j in seeing.changed if before.get(j.id) is not j]
            assert s.gone == seeing.gone
            assert sorted(map(id, s.left)) == sorted(map(id, seeing.left))
            assert sorted(map(id, s.came)) == sorted(map(id, seeing.came))
        before = seeing.pending.copy()
        for i in list(t.active):
            r = rng.random()
            if r < 0.1:
                t.leave(i)
            elif r < 0.25:
                t.put(replace(t.active[i], state=rng.choice(STATES), detail=f"v{k}"))
            elif moved and r < 0.3:
                j = t.active[i]
                t.leave(i)
                t.put(j)
        for _ in range(rng.randrange(4)):
            t.put(_job(nxt, rng.choice(STATES), k))
            nxt += 1
