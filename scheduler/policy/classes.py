"""plan() by request class: the same decisions as the per-job pass, judging each class once.

Jobs that share everything a verdict reads (`class_key`: shape, account, user, QoS, budgets, holds,
begin, dependencies, throttle...) get the same verdict from the same pass state. The pass state only
changes when a verdict changes it (an admission, a preemption, a hold, a reservation, the backfill-off
blocker, a request found to have no victims): `_Pass.version` counts those. So a class's blocked
verdict, once judged without changing anything, holds for every later job of the class until the
state changes again.

Order: within a class (and burst flag) the priority order is submit order, because the other terms
of the priority are the same for all of them and the age term grows with the wait (faster than the
short-job term fades: short_job_weight ≤ age_weight, multifactor.py). Each class is a
list in that order; the pass takes the best next job among the classes. A class whose verdict still
holds takes its whole run at once (its jobs that come before every other class's next job, found
by binary search), so a class of 10,000 alike jobs costs a few verdicts and searches, not 10,000.

A class whose verdict holds is parked (out of the merge) until a change that concerns it, so once
admissions stop a pass costs a look per class (_Walk.go). A "no room" verdict is also shared by
classes alike in what it reads (shape, QoS), in the same state (_Walk.rooms). The classes and their
order are kept from pass to pass by the caller's Queue (queue.py), and a class joins the merge only
once it may come next (fronts.py).

A job whose verdict depends on its own id (a singleton dependency; a preemptor whose victims are
draining) is a class of its own and never cached. A field a verdict starts to read must join
`class_key`; tests/property/test_plan_classes.py checks the result against the per-job pass.
"""
import heapq
from collections.abc import Callable, Collection, Iterable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, cast

from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Pending, Place, Verdict
from ..multifactor import Score, aged, ordered, scorer
from ..settings.config import Config
from . import settle
from .capacity import avoided
from .counting import counting
from .fronts import Bound, Reach, apart, lazy, runtimes
from .queue import Front, Group, Key, Queue, Waiting

if TYPE_CHECKING:       # the pass is policy/__init__'s, which imports this module
    from . import _Pass

Hit = tuple[tuple[int, ...], int, tuple[int, ...] | None, Verdict]   # cached: (version, kind, stamp, verdict)


def class_key(j: Job) -> tuple[Any, ...]:
    """Everything of a pending job that `_Pass._verdict` reads, except its id."""
    held = (j.reason, j.detail if j.reason == states.CRASH_GUARD else "") if j.held else None
    return (j.qos, j.account, j.user, j.project, j.budget, j.gpus, j.gpu_type, j.cpus, j.mem, j.time_limit, j.est,
            held, j.begin, j.eligible_time, j.deps, j.array_throttle, j.array_id if j.array_throttle else None,
            j.preempt_count, j.nodes, j.learned_est, avoided(j))


def _own(j: Job, draining: Collection[int]) -> bool:
    """Whether the job's verdict may name the job itself (a singleton, a preemptor whose victims
    drain, one whose room is earmarked) or whose verdict walks every node (a gang, policy/gang.py):
    then it is judged on its own."""
    return j.nodes > 1 or bool(j.earmark) or j.id in draining or bool(j.deps) and any(k == "singleton" for k, _ in j.deps)


# Grouping pays when classes hold many jobs each (arrays, sweeps); with a class per few jobs the
# walk's heaps cost more than the verdicts they save, and the per-job order is used instead (the
# same decisions), with the verdict cache when a job's class holds several jobs on average (plan_bench's
# random queue of 100,000 jobs: ~39; a 100k-job pass 10-20 % faster) and without it below that (the
# same queue at 10,000: ~5, where the key, lookup and copies cost what the saved verdicts do).
# Judged on a sample of the queue.
MIN_JOBS_PER_CLASS = 8
MIN_JOBS_TO_CACHE = 8
SAMPLE = 512


def _walk_kind(waiting: list[Job], draining: Collection[int]) -> str:
    """"merge" (the class walk), "cached" (per job, verdicts cached by class) or "plain"."""
    if MIN_JOBS_PER_CLASS <= 0:
        return "merge"
    if MIN_JOBS_TO_CACHE <= 0:
        return "cached"
    if len(waiting) < 2 * MIN_JOBS_PER_CLASS:
        return "plain"
    sample = waiting[::max(1, len(waiting) // SAMPLE)]
    seen: dict[Key, int] = {}
    for j in sample:
        key = ("own", j.id) if _own(j, draining) else class_key(j)
        seen[key] = seen.get(key, 0) + 1
    if len(seen) * MIN_JOBS_PER_CLASS <= len(sample):
        return "merge"
    # Alike pairs in the sample estimate the number of classes (the birthday count): classes ≈
    # pairs in the sample / alike pairs, so jobs per class ≈ len(waiting) × alike / pairs.
    alike = sum(c * (c - 1) // 2 for c in seen.values())
    pairs = len(sample) * (len(sample) - 1) // 2
    return "cached" if len(waiting) * alike >= MIN_JOBS_TO_CACHE * pairs else "plain"


def file(queue: Queue, p: "_Pass", waiting: Waiting, cfg: Config) -> None:
    """File this pass's `waiting` jobs in `queue` (queue.py), or what changed since its last (a Seen)."""
    w = cfg.priority
    queue.file(waiting, p.draining, (w.burst_jobs, w.burst_window) if w.burst_penalty else None, group_key, runtimes(w),
               apart(w), aged(p.now, w), p.now, w)


def run(p: "_Pass", waiting: list[Job], cfg: Config, queue: Queue | None = None) -> None:
    """Consider `waiting` in priority order on the pass `p` (a policy._Pass), class by class;
    `queue`: the caller's Queue with `waiting` filed (`file`), else the classes are filed anew."""
    kind = "merge" if queue is not None else _walk_kind(waiting, p.draining)
    if kind != "merge":
        order = ordered(waiting, p.now, dict(p.snap.usage), cfg)
        if kind == "cached":
            w = _Walk(p, _unordered)
            with counting(w):
                w.one_by_one(order)
        else:
            for job in order:
                p.consider(job)
        return
    if queue is None:
        queue = Queue()
        file(queue, p, waiting, cfg)
    w = _Walk(p, _scorer(p, cfg, queue.bursting), queue, lazy=lazy(p.now, dict(p.snap.usage), cfg, queue.split))
    with counting(w):       # (the pass's methods counted while it walks)
        w.go()


def _unordered(j: Job) -> Score:      # the score of a walk that merges nothing (one_by_one): never asked
    raise AssertionError("one_by_one takes the jobs in the order given")


def group_key(j: Job, draining: bool) -> Key:
    """A job's class key, or ("own", id) for one judged on its own (_own; `draining`: its victims drain)."""
    return ("own", j.id) if draining or _own(j, ()) else class_key(j)


def _scorer(p: "_Pass", cfg: Config, bursting: Collection[int]) -> Callable[[Job], Score]:
    """multifactor.scorer at the pass's time and fair-share usage."""
    return scorer(p.now, dict(p.snap.usage), cfg, bursting)


# How long a verdict judged without changing anything stays true (the property test checks each):
# gates (hold, begin, dependencies) for the whole pass; caps and "no room" until an admission of the
# same account, user or array, or a change to preemptions, reservations, the blocker or the victims
# found, or room coming back (an earmark given up); anything that quoted a budget, tried an
# admission, a preemption or a reservation only while the whole state is unchanged.
STATIC = frozenset((states.HELD, states.CRASH_GUARD, states.BEGIN_TIME, states.DEPENDENCY, states.DEPENDENCY_NEVER))
CAPS = frozenset((states.PRIORITY, states.RESOURCES, states.NODE_DOWN, states.ARRAY_TASK_LIMIT,
                  states.ACCOUNT_JOB_LIMIT, states.ACCOUNT_GPU_LIMIT, states.ACCOUNT_CPU_LIMIT,
                  states.USER_JOB_LIMIT, states.USER_GPU_LIMIT, states.USER_CPU_LIMIT))
# "No room" (Resources, Priority, no node up) without guarantees: an admission of the same account,
# user or array changes it only by a cap that now stops the job (nothing else on the way to it reads
# the usage), so it holds while the rest of the stamp is unchanged and `Usage.blocked` still passes.
# With guarantees the usage also decides reclaiming (`_may_preempt`): those keep the full stamp.
ROOM = frozenset((states.PRIORITY, states.RESOURCES, states.NODE_DOWN))
_STATIC, _CAPS, _FULL, _ROOM = 0, 1, 2, 3
# ROOM_KEY: a "no room" verdict reached without a budget quote, admission, preemption or reservation, by a job
# past the gates (hold, begin, retry backoff, dependencies, caps: `Usage.blocked` passes) and not
# judged on its own, reads of the job only its shape (capacity.find, _no_room's text), its QoS and,
# with guarantees, its account (_may_preempt): no node had room, so backfill's `accept` (which reads
# the time limit) was never asked. In the same state (version) every class alike in these takes it,
# unjudged; without guarantees, while the room stamp is unchanged too (as ROOM's cache, above).

_DEFAULTS: tuple[Any, ...] = tuple(f.default for f in fields(Pending))
Dim = tuple[int, str, object]   # what a parked verdict concerns: (kind, "a"/"u"/"t", account/user/array)


class _Walk:
    """The merge over the classes in priority order, with the verdict cache. A class whose verdict
    holds in the present state is *parked*: it leaves the merge and its jobs take the verdict as a
    run, up to the next change of state (or the end), so that once the state stops changing the
    walk costs a look per class, not per job. Parking pays only while the state is quiet: a change
    sends every parked class back into the merge (their next jobs may be judged otherwise), so the
    walk parks only once it has taken a class's worth of turns without a change."""

    def __init__(self, p: "_Pass", score: Callable[[Job], Score], queue: Queue | None = None,
                 lazy: bool | Bound = True) -> None:
        self.p, self.score = p, score
        self.reached = r = Reach(score, queue, lazy)    # the classes reached (fronts.py)
        self.lists, self.keys, self.ids, self.at, self.heads, self.most = r.lists, r.keys, r.ids, r.at, r.heads, r.most
        self.cache: dict[Key, Hit] = {}     # class key -> (state version, kind, stamp, plan.Verdict)
        self.admitted: dict[tuple[str, object], int] = {}   # ("a", account) / ("u", user) / ("t", array): so far
        self.touched = 0                    # calls into budget quotes, admission, preemption, reservation (counting.py)
        self.frozen = False                 # settle._frozen
        self.dead = settle.Dead(queue)      # what settle.dead found in this pass
        self.rooms: dict[Key, tuple[tuple[int, ...], tuple[int, ...], Verdict]] = {}  # key -> (version, stamp, verdict)
        self.passed: list[tuple[Key, Key, Group, Hit]] = []    # (class key, group key, group, its park): _passes
        self.parks: dict[int, Hit] = {}     # id(verdict) -> the park of the classes passed with it (park_of)

    def _stamp(self, key: Key) -> tuple[int, ...]:
        p, n = self.p, self.admitted
        return (n.get(("a", key[1]), 0), n.get(("u", key[2]), 0), n.get(("t", key[16]), 0), len(p.preempts),
                len(p.starts), id(p.blocker), len(p.no_victims), p.free.grown)

    def _room_stamp(self) -> tuple[int, ...]:
        p = self.p
        return (len(p.preempts), len(p.starts), id(p.blocker), len(p.no_victims), p.free.grown)

    def _valid(self, key: Key, version: tuple[int, ...], job: Job) -> Hit | None:
        """The cache entry of `job`'s class if its verdict still holds (`job`: the class's next job)."""
        hit = self.cache.get(key)
        if hit is None:
            return None
        if hit[0] == version or hit[1] == _STATIC:
            return hit
        if (hit[1] == _CAPS and hit[2] == self._stamp(key)
                or hit[1] == _ROOM and hit[2] == self._room_stamp() and self.p.usage.blocked(job) is None):
            # Holds in this state, which nothing changes until the version does: the next jobs of
            # the class at this version need no stamp.
            hit = self.cache[key] = (version,) + hit[1:]
            return hit
        return None

    def go(self) -> None:
        p, heads, lists, at, ids, score = self.p, self.heads, self.lists, self.at, self.ids, self.score
        version, room = p.version(), self._room_stamp()
        static: dict[int, Verdict] = {}     # class -> verdict that holds for the whole pass (gates)
        # class -> (verdict, kind, dims): holds until a change that concerns it
        self.parked: dict[int, tuple[Verdict, int, tuple[Dim, ...]]] = {}
        self.dims: dict[Dim, set[int]] = {}     # (kind, "a", account) / ("u", user) / ("t", array) -> parked classes
        self.full: set[int] = set()     # parked classes whose verdict holds only while nothing changes
        self.churn = 0          # classes the last change sent back into the merge
        quiet = 0               # turns since then
        self.since, self.check = 0, settle.SETTLE_CHECK    # turns without a change; when to ask (settle.py)
        taken, passes = self.reached.taken, self._passes
        while heads and not settle.done(self, version):
            s, i = heapq.heappop(heads)
            taken(i, passes)
            jobs, key = lists[i], self.keys[i]
            hit = self._valid(key, version, jobs[at[i]])
            if hit is not None:
                if hit[1] == _STATIC:
                    static[i] = hit[3]
                    continue
                if quiet >= self.churn:
                    self._park(i, key, hit)
                    continue
                end = self.reached.run_end(i, heads[0][0] if heads else None)
                p.runs.append((ids[i][at[i]:end], hit[3]))
                at[i] = end
                quiet += 1
            else:
                job = jobs[at[i]]
                at[i] += 1
                now = self._judge(job, key, version, at[i] < len(jobs))
                quiet += 1
                if now == version and at[i] < len(jobs) and quiet >= self.churn:
                    hit = self.cache.get(key)
                    if hit is not None and hit[0] == version:     # judged without a change: park now
                        if hit[1] == _STATIC:
                            static[i] = hit[3]
                        else:
                            self._park(i, key, hit)
                        continue
                if now != version:
                    version = now
                    self.since, self.check = 0, settle.SETTLE_CHECK
                    changed_room = room != self._room_stamp()
                    if changed_room:
                        room = self._room_stamp()
                    went = self._unpark(s, job if p.places and p.places[-1].job_id == job.id else None, changed_room,
                                        version)
                    if went:
                        self.churn, quiet = went, 0
            if at[i] < len(jobs):
                heapq.heappush(heads, (score(jobs[at[i]]), i))
        for i, verdict in (*((i, v[0]) for i, v in self.parked.items()), *static.items()):
            if at[i] < len(lists[i]):
                p.runs.append((ids[i][at[i]:], verdict))
        settle.passed_runs(self)

    def _passes(self, src: list[Front], k: int, groups: dict[Key, Group]) -> int:
        """Take the classes from a family's k-th on while settle.dead knows their verdict ("no room" until
        a change sends one back: settle.recall parks it then, with no cache entry, so that `_unpark`
        sends it back), in `passed`, with no index, heap entry or park; returns where it stopped."""
        return settle.passes_from(self, src, k, groups)

    def park_of(self, verdict: Verdict) -> Hit:     # one park for the classes passed with a verdict
        self.parks[id(verdict)] = hit = ((), _ROOM, None, verdict)
        return hit

    def _park(self, i: int, key: Key, hit: Hit) -> None:
        """Class i leaves the merge with its verdict, which holds until a change concerns it."""
        kind = hit[1]
        dims: tuple[Dim, ...] = ((kind, "a", key[1]), (kind, "u", key[2])) + (
            ((kind, "t", key[16]),) if key[16] is not None else ())
        self.parked[i] = (hit[3], kind, dims)
        if hit[1] == _FULL:
            self.full.add(i)
        for d in dims:
            mine = self.dims.get(d)
            if mine is None:
                self.dims[d] = {i}
            else:
                mine.add(i)

    def _unpark(self, limit: Score, placed: Job | None, changed_room: bool, version: tuple[int, ...]) -> int:
        """The state changed at the job whose priority is `limit` (`placed`: that job, if it was
        admitted). The parked classes whose verdict may no longer hold go back into the merge at their
        next job after it; their jobs before it take the verdict. Which may not hold (_valid's rules):
        a verdict that read anything changeable, at any change; any other, when preemptions,
        reservations, the blocker, victims found or returned room changed; a cap (or, with
        guarantees, no room) when the admitted job shares its account, user or array; no room, when
        it shares its array, or its account or user is near a cap. Returns how many went back."""
        settle.recall(self, placed, changed_room)
        parked = self.parked
        if changed_room:
            gone = [i for i, v in parked.items() if v[1] != _STATIC]
        else:
            gone = list(self.full)
            if placed is not None:
                u = self.p.usage
                near = u.tight(placed.account, placed.user, *self.most)
                for kind in (_CAPS, _ROOM):
                    for d in ("a", placed.account), ("u", placed.user), ("t", placed.array_id):
                        if kind == _ROOM and not near and d[0] != "t":
                            continue
                        for i in self.dims.get((kind, *d), ()):
                            if self._valid(self.keys[i], version, self.lists[i][self.at[i]]) is None:
                                gone.append(i)
        at, ids, heads, runs = self.at, self.ids, self.heads, self.p.runs
        for i in set(gone):
            verdict, _, dims = parked.pop(i)
            self.full.discard(i)
            for dim in dims:
                self.dims[dim].discard(i)
            end = self.reached.run_end(i, limit, 0)     # parked right after a judgement: its next job may come after
            if end > at[i]:
                runs.append((ids[i][at[i]:end], verdict))
            at[i] = end
            if end < len(self.lists[i]):
                heapq.heappush(heads, (self.score(self.lists[i][end]), i))
        return len(gone)

    def one_by_one(self, order: Iterable[Job]) -> None:
        """The jobs in priority order, one at a time, with the verdict cache but no merge: for a
        queue of few jobs per class, where the merge's heap costs more than it saves."""
        p, draining, valid, judge = self.p, self.p.draining, self._valid, self._judge
        version = p.version()
        for job in order:
            own = (job.nodes > 1 or job.earmark or job.id in draining      # _own, inline
                   or job.deps and any(k == "singleton" for k, _ in job.deps))
            key = ("own", job.id) if own else class_key(job)
            hit = valid(key, version, job)
            if hit is None:
                version = judge(job, key, version)
            else:
                p.runs.append(((job.id,), hit[3]))

    def _room_key(self, job: Job, key: Key) -> Key | None:
        """What a "no room" verdict reads of a job that passed the gates (the comment on ROOM_KEY); None for
        a job that meets a gate or is judged on its own."""
        now = self.p.now
        if (key[0] == "own" or job.held or job.deps or job.nodes > 1 or job.begin is not None and job.begin > now
                or job.eligible_time is not None and job.eligible_time > now):
            return None
        return (job.gpus, job.gpu_type, job.cpus, job.mem, job.qos, job.account if self.p.usage.guarantees else None)

    def _judge(self, job: Job, key: Key, version: tuple[int, ...], more: bool = True) -> tuple[int, ...]:
        """The job's verdict, from the pass or a room shared by alike classes; cached for the rest of
        its class when `more` of them follow (a class of one is not cached)."""
        p, touched = self.p, self.touched
        room = self._room_key(job, key)
        hit = self.rooms.get(room) if room is not None else None
        if (hit is not None and (hit[0] == version or not p.usage.guarantees and hit[1] == self._room_stamp())
                and p.usage.blocked(job) is None):
            # Nothing judged, nothing changed: the version holds, and the verdict (no room) is
            # cached as _judge would cache it.
            verdict = hit[2]
            p.runs.append(((job.id,), verdict))
            if more:
                guarded = p.usage.guarantees
                self.cache[key] = (version, _CAPS if guarded else _ROOM,
                                   self._stamp(key) if guarded else self._room_stamp(), verdict)
            return version
        got = p.judge(job)
        if (room is not None and not isinstance(got, Place) and got[0] in ROOM
                and self.touched == touched and p.version() == version):
            self.rooms[room] = (version, self._room_stamp(), cast(Verdict, tuple(got) + _DEFAULTS[1 + len(got):]))
        if isinstance(got, Place):
            p.places.append(got)
            for k in (("a", job.account), ("u", job.user), ("t", job.array_id)):
                if k[1] is not None:
                    self.admitted[k] = self.admitted.get(k, 0) + 1
            return p.version()      # an admission is a change of state: the version moved
        # A run of one (plan.Pendings): no Pending object until a reader asks for one.
        verdict = cast(Verdict, tuple(got) + _DEFAULTS[1 + len(got):])
        p.runs.append(((job.id,), verdict))
        now = p.version()
        if now != version:
            return now
        if more and key[0] != "own":
            kind = _FULL if self.touched != touched else _STATIC if verdict[0] in STATIC else \
                _CAPS if verdict[0] in CAPS else _FULL
            if kind == _CAPS and verdict[0] in ROOM and not p.usage.guarantees:
                kind = _ROOM
            stamp = self._stamp(key) if kind == _CAPS else self._room_stamp() if kind == _ROOM else None
            self.cache[key] = (version, kind, stamp, verdict)
        return version
