"""The daemon's pass as it costs what changed (state.SchedulerState.pass_snapshot, Seen.tell, the
applier's Confirmed, index.Index) against the same pass read whole (`snapshot`'s tuple, Seen.see, every
run's records read), over random sequences of changes between passes: submits (held or not, with
dependencies, arrays' tasks), holds and releases, cancels, updates of pending jobs, starts (the plans'
own) and ends. Both states take the same changes; each pass must write the same records, reject the
same decisions and see the same snapshot."""
import random
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.daemon import applier
from labq.scheduler.daemon.change import Change
from labq.scheduler.daemon.crashguard import CrashGuard
from labq.scheduler.daemon.state import SchedulerState
from labq.scheduler.jobs import states
from labq.scheduler.jobs.estimate import Estimator
from labq.scheduler.jobs.model import Job, Node
from labq.scheduler.policy.depend import targets
from tests.harness import G, cfg

NOW = 1_000_000.0
USERS = ("alice", "bob", "carol")


def _state(c) -> SchedulerState:
    s = SchedulerState(c, Estimator.from_config(c), CrashGuard.from_config(c))
    s.nodes = (Node("n1", 8, 64 * G, 2, (), "up", NOW + 10 ** 7, NOW), Node("n2", 4, 32 * G, 1, (), "up", NOW + 10 ** 7, NOW))
    s.loaded({}, 0, {})
    return s


def _job(rng: random.Random, jid: int, at: float, known: list[int]) -> Job:
    deps = (("afterok", (rng.choice(known),)),) if known and rng.random() < 0.2 else ()
    return Job(id=jid, user=rng.choice(USERS), account="default", argv=("true",), workdir="/tmp",
               cpus=rng.choice((1, 2, 4)), mem=0, time_limit=rng.choice((60, 600, 3600)), submit_time=at,
               state=states.PENDING, held=rng.random() < 0.5, deps=deps)


def _changes(rng: random.Random, s: SchedulerState, now: float) -> tuple[list[Job], list[Job]]:
    """(records, a new array's tasks) changed between two passes."""
    out: list[Job] = []
    ids = list(s.jobs)
    for i in rng.sample(ids, min(len(ids), rng.randrange(6))):
        j = s.jobs[i]
        r = rng.random()
        if j.state == states.PENDING:
            if r < 0.3:
                out.append(replace(j, held=not j.held))                  # hold / release
            elif r < 0.5:
                out.append(replace(j, state=states.CANCELLED, end_time=now))
            elif r < 0.8:
                out.append(replace(j, time_limit=j.time_limit + 60))     # an update, reason kept
            else:
                out.append(replace(j, reason=states.NONE, detail=""))    # an update that resets it
        elif j.state in states.ON_NODE and r < 0.5:
            out.append(replace(j, state=states.COMPLETED, end_time=now))
    seq = s.seq
    for _ in range(rng.randrange(8)):
        seq += 1
        out.append(_job(rng, seq, now, ids))
    tasks: list[Job] = []
    if rng.random() < 0.15:
        first, n = seq + 1, rng.randrange(2, 6)
        t = _job(rng, first, now, ids)
        tasks = [replace(t, id=first + k, array_id=first, array_index=k) for k in range(n)]
        seq += n
    s.seq = seq
    return out, tasks


def _pass(s: SchedulerState, now: float, told: bool) -> tuple:
    """One pass as planning.Planner._schedule makes it (told: as it does; else read whole), committed."""
    want, resting, _ = s.ended_query()
    ended = tuple(sorted({**{i: states.COMPLETED for i in want}, **resting}.items()))
    if told:
        snap, t = s.pass_snapshot(now, {}, ended)
        p = applier.without(policy.plan(snap, s.cfg, **s.kept.inputs(snap, s.cfg, t)), s.tails)
        seen = tuple(snap.jobs)     # (a view of the table: as it was when planned)
        done = applier.apply_plan(p, s.jobs, s.tally.on_node, s.nodes, now, confirmed=s.confirmed)
    else:
        snap = s.snapshot(now, {}, ended)
        p = applier.without(policy.plan(snap, s.cfg, **s.kept.inputs(snap, s.cfg)), s.tails)
        seen = snap.jobs
        done = applier.apply_plan(p, s.jobs, s.tally.on_node, s.nodes, now)
    for change in applier.changes(done, 5):
        s.apply(change, False, s.usage)
    return (seen, snap.usage, snap.ended, done.started, done.expired, done.pended,
            tuple((type(r.decision).__name__, r.why) for r in done.rejected))


def _step(rng: random.Random, told: SchedulerState, whole: SchedulerState, now: float, k: int) -> None:
    """The same random changes to both states, then pass `k` of each: the same outcome and table."""
    jobs, tasks = _changes(rng, told, now)
    whole.seq = told.seq
    for s in (told, whole):
        s.apply(Change(jobs=list(jobs)), False, s.usage)
        if tasks:
            s.apply(Change(jobs=list(tasks)), True, s.usage)
    assert _pass(told, now, True) == _pass(whole, now, False), f"pass {k}"
    assert told.jobs == whole.jobs


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 30), st.booleans(), st.booleans())
def test_a_pass_told_what_changed_writes_what_a_pass_read_whole_writes(seed, passes, burst, strict):
    """`strict`: backfill off, where plan() walks the kept Backlog that the Seen's changes refile."""
    rng = random.Random(seed)
    c = cfg("[scheduler]\ntick = 1\n" + ("backfill_depth = 0\n" if strict else "")
            + ("[priority]\nburst_penalty = 0.5\nburst_jobs = 3\n" if burst else ""))
    told, whole = _state(c), _state(c)
    now = NOW
    for k in range(passes):
        now += 1.0
        _step(rng, told, whole, now, k)
        # what the index keeps is what a reading of the table finds
        want = targets([j for j in told.jobs.values() if j.deps and j.state == states.PENDING]) - told.jobs.keys()
        assert told.ended_query()[0] == want
        assert [j.id for j in told.jobs.values()] == sorted(told.jobs, key=told.index.on(told.jobs).places.__getitem__)


def test_a_deep_queue_told_what_changed_writes_what_a_pass_read_whole_writes():
    """The same over a queue as deep as a drain leaves (20,000 pending, most of them held, a fifth with
    dependencies), a few changes a pass: the runs of thousands of jobs that Confirmed skips."""
    rng = random.Random(41)
    c = cfg("[scheduler]\ntick = 1\n")
    told, whole = _state(c), _state(c)
    known: list[int] = []
    deep = []
    for jid in range(1, 20_001):
        j = _job(rng, jid, NOW + jid * 1e-3, known[-50:])
        deep.append(replace(j, held=rng.random() < 0.8))
        known.append(jid)
    for s in (told, whole):
        s.seq = len(deep)
        s.apply(Change(jobs=list(deep)), False, s.usage)
    now = NOW + 100.0
    for k in range(6):
        now += 1.0
        _step(rng, told, whole, now, k)
    assert len(told.confirmed.ids) > 10_000, "the deep runs were confirmed and skipped"
