"""The waiting jobs by request class, kept from pass to pass: what plan()'s class walk (classes.py) reads instead of
grouping and sorting every waiting job on every pass.

A `Queue` holds, for each (class key, burst flag), that class's jobs in their priority order within the class (submit
time, id), and each user's burst tail (multifactor.burst_tail). It also keeps each *family*'s classes (QoS, account,
burst flag: what the priority adds besides the age) in the order of their first jobs: within a family, without
short-jobs-first, a class whose first job was submitted earlier comes first at any `now` (multifactor.scorer: the age
term only grows with the wait), so a pass merges the families' heads and scores only the classes it reaches
(classes.py). None of this depends on `now`, so a pass only files what changed since the last: `sync` compares the
waiting jobs with the ones it holds by identity (a job changes by being replaced: records are frozen), re-files the new
and changed ones, drops the gone ones, and recomputes the burst tail of the users they belong to. A class's constant
terms of the priority (QoS, fair share) are the walk's, per pass.

It is a cache: plan() decides exactly as without it (tests/property/test_plan_classes.py runs plan() with one Queue over
a sequence of changing snapshots against plan_per_job). The daemon keeps one for its passes; a caller without one gets a
fresh Queue per pass.
"""
import heapq
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable
from itertools import compress
from math import inf
from operator import attrgetter, is_not, itemgetter
from typing import TYPE_CHECKING

from .. import multifactor
from ..jobs.model import Job
from . import blocks
from .groups import Group as Group, Key as Key, _order, file as file, place, retail, unfile as unfile  # (re-exported)
from .kinds import Kinds
from .seen import Seen

if TYPE_CHECKING:
    from ..settings.sections import Priority

KeyOf = Callable[[Job, bool], Key]  # a job's group key (no burst flag) from the job and whether it is its own class
# What a pass files: its waiting jobs, or what changed since the snapshot filed last (seen.py).
Waiting = list[Job] | Seen

_ID, _SUBMIT_TIME = attrgetter("id"), attrgetter("submit_time")
_FIRST_TWO = itemgetter(0, 1)
# Filing anew (grouping and sorting all) beats filing one by one once this many of the waiting jobs are new or changed.
REBUILD_SHARE = 0.25
# Two blocks a pass takes one right after the other are not joined where a pass of the last RECENT cut
# there (settle._join): in a drain a class that can backfill when room comes back sits between them.
RECENT = 64
# With short jobs first the families' classes are ordered by their priority at an epoch (multifactor.Linear),
# taken anew (every job filed again) once the clock is this share of age_max past it: the bound of a family's
# rest loosens by the spread of its slopes times the time since (fronts.Reach._bound).
EPOCH = 1 / 8
# A class within this share of age_max of its full age goes by submit time (multifactor.Linear.old): the young-keyed
# ones score below the tied priority by at least this share of their slope (fronts.Reach._linear's margin).
WINDOW = 1 / 1024


# Every field a waiting job is filed by, here and in backlog.py (order, class key and what a held
# job's adds, own class, marks, needs, gates; `attempts`: capacity.avoided): a new record equal in
# these is put in its old one's place. One tuple built in C: between the daemon's passes most
# records change only by their reason, thousands of them when a blocker or a reservation moves.
FILED = attrgetter("submit_time", "id", "user", "qos", "account", "project", "budget", "gpus", "gpu_type", "cpus",
                   "mem", "time_limit", "est", "held", "begin", "eligible_time", "deps", "array_throttle", "array_id",
                   "preempt_count", "nodes", "learned_est", "attempts", "max_wait", "deadline", "earmark")


def _marked(j: Job) -> bool:
    """What plan() looks at before the walk: a job that may expire (--max-wait, --deadline, a
    dependency) or whose room is earmarked."""
    return j.max_wait is not None or j.deadline is not None or bool(j.deps) or bool(j.earmark)


# A class's place in its family: its first job's (submit time, id) (with short jobs first, split by run time:
# (its multifactor.Linear key, id)), then its key and its Group (never compared: the ids differ). The Group rides along so that a walk over a family's classes reads it
# without hashing the key (a tuple of ~17 fields, hashed anew at every lookup).
Front = tuple["float | tuple[float, float]", int, Key, "Group"]


def family(j: Job, k: Key, runtimes: bool = False, apart: tuple[bool, bool] = (True, True)) -> Key:
    """The family of the group `k` that holds `j`: (QoS, account, burst flag), and with `runtimes`
    (the short-job term on: fronts.py) a floor of its expected run time (multifactor.runtime_floor).
    `apart`: whether the QoS and the account part families (fronts.apart: only where their weight
    is not 0)."""
    q, a = j.qos if apart[0] else "", j.account if apart[1] else ""
    if runtimes:
        return (q, a, k[1], multifactor.runtime_floor(multifactor.expected_runtime(j)))
    return (q, a, k[1])


class Queue:
    """Waiting jobs by (class key, burst flag). `own(j)` says which jobs are classes of their own
    (classes._own: it reads the pass's draining preemptors, so a change to those re-files them)."""

    def __init__(self) -> None:
        self.runtimes = False       # whether the families are to be split by run time (`file`)
        self.split = False          # whether they are now: not while every job filed has aged (`file`)
        self.newest = float("-inf")     # the latest submit time of a job filed
        self.apart = (True, True)   # whether the QoS and the account part families (`file`)
        self.passes = 0             # passes filed
        # the order of split families' classes (multifactor.Linear: (-P, submit time) at its epoch), and the
        # weights it was made for
        self.linear: multifactor.Linear | None = None
        self.weights: tuple[float, ...] = ()
        self._reset()

    def _reset(self) -> None:
        self.jobs: dict[int, Job] = {}            # id -> the job as last filed
        self.where: dict[int, Key] = {}           # id -> its group's key
        self.groups: dict[Key, Group] = {}
        self.users: dict[str, list[Job]] = {}     # user -> waiting jobs in (submit time, id) order
        # user -> those jobs' submit times and ids, place by place (`_retail` compares them in C)
        self.times: dict[str, list[float]] = {}
        self.uids: dict[str, list[int]] = {}
        self.bursting: set[int] = set()           # ids in their user's burst tail
        self.tails: dict[str, set[int]] = {}      # user -> those of the user's
        self.marked: dict[int, Job] = {}          # jobs something can end (marks) or whose room is kept
        self.draining: frozenset[int] = frozenset()
        self.burst: tuple[int, float] | None = None   # (allowance, window), None: no burst penalty
        self.left: set[int] = set()               # ids still waiting that `drop` left out
        self.seen_at: int | None = None           # Seen.n of the snapshot `update` filed last
        self.families: dict[Key, list[Front]] = {}   # family -> its classes by their first job
        self.kinds = Kinds()        # the classes' needs and shapes (kinds.py)
        self.slopes: dict[Key, float] = {}      # split family -> the largest slope of a class filed (Linear)
        self.flats: dict[Key, float] = {}       # and the smallest
        self.young: list[tuple[float, int, Key]] = []    # heap: (submit time, id, group) of young-keyed firsts
        self.aged: dict[Key, int] = {}      # split family -> fronts.kept_young's answer at its last pass

    def file(self, waiting: "Waiting", draining: Iterable[int], burst: tuple[int, float] | None, key: KeyOf,
             runtimes: bool = False, apart: tuple[bool, bool] = (True, True),
             aged: Callable[[float], bool] | None = None, now: float = 0.0, w: "Priority | None" = None) -> None:
        """`sync` a list of the waiting jobs; `update` from a Seen. `runtimes`, `apart`: how `family`
        splits the families; a change files every job anew. `aged(submit time)`: whether a job has
        waited past the short-job term (multifactor.aged): once every job filed has, all score alike
        but for (submit time, id), FIFO, and the families are not split (fronts.lazy), until one
        that has not comes (each change of `split` files every job anew). Split, a family's classes go
        in the order of their priority at an epoch (`linear`), taken anew at `now` every EPOCH of age_max
        (`w`: the weights)."""
        self.passes += 1
        weights = (w.age_weight, w.short_job_weight, w.short_job_scale, w.age_max) if runtimes and w else ()
        if (runtimes, apart, weights) != (self.runtimes, self.apart, self.weights):
            self.runtimes, self.apart, self.split, self.weights = runtimes, apart, runtimes, weights
            self.linear = multifactor.Linear(w, now, WINDOW) if w is not None and runtimes else None
            self._reset()
        if self.split and self.linear is not None and now > self.linear.upto:
            self._age(now)
        if isinstance(waiting, Seen):
            self.update(waiting, draining, burst, key)
        else:
            self.sync(waiting, draining, burst, key)
        split = runtimes and not (aged is not None and aged(self.newest))
        lin = self.linear
        if split != self.split or split and lin is not None and now - lin.epoch > EPOCH * lin.age_max:
            self.linear = multifactor.Linear(w, now, WINDOW) if split and w is not None else None
            self.split = split
            self._refront()

    def sync(self, waiting: list[Job], draining: Iterable[int], burst: tuple[int, float] | None, key: KeyOf) -> None:
        """File `waiting` (this pass's waiting jobs); `key(j, own)`: a job's group key without the
        burst flag."""
        draining = frozenset(draining)
        known = self.jobs
        self.left, self.seen_at = set(), None
        # The same as [j for j in waiting if known.get(j.id) is not j], in C: a pass over every
        # waiting job is most of what filing a few changes costs on a deep queue.
        ids = list(map(_ID, waiting))
        changed = list(compress(waiting, map(is_not, map(known.get, ids), waiting)))
        if burst != self.burst or len(changed) > REBUILD_SHARE * len(waiting):
            return self._rebuild(waiting, draining, burst, key)
        gone = [known[i] for i in known.keys() - set(ids)] \
            if len(known) + sum(1 for j in changed if j.id not in known) != len(waiting) else []
        self._file(changed, gone, draining, key)

    def update(self, seen: Seen, draining: Iterable[int], burst: tuple[int, float] | None, key: KeyOf) -> None:
        """File this pass's waiting jobs (`seen.pending`) as `sync` would, from what changed since
        the snapshot filed last (`seen.changed`, `seen.gone`: policy/seen.py), without reading the
        jobs that did not. A Queue last filed otherwise, or from a snapshot other than this one (a
        pass planned again) or the one before, is filed by `sync`."""
        if self.seen_at is None or seen.n - self.seen_at not in (0, 1):
            self.sync(list(seen.pending.values()), draining, burst, key)
            self.seen_at = seen.n
            return
        self.seen_at = seen.n
        draining, known, waiting = frozenset(draining), self.jobs, seen.pending
        # The jobs a pass left out (`drop`) that still wait come back (the plan may not have been
        # applied, or the pass is planned again).
        back = [waiting[i] for i in self.left if i in waiting]
        self.left = set()
        fresh = {j.id: j for j in (*back, *seen.changed) if known.get(j.id) is not j}
        if burst != self.burst or len(fresh) > REBUILD_SHARE * len(waiting):
            self._rebuild(list(waiting.values()), draining, burst, key)
            self.seen_at = seen.n
            return
        self._file(list(fresh.values()), [known[i] for i in seen.gone if i in known and i not in fresh], draining, key)

    def drop(self, ids: Collection[int], key: KeyOf) -> None:
        """Leave out jobs that still wait but that this pass does not walk (they expire); `update`
        files them again while they wait."""
        self._file([], [self.jobs[i] for i in ids if i in self.jobs], self.draining, key)
        self.left |= set(ids)

    def _file(self, changed: list[Job], gone: list[Job], draining: frozenset[int], key: KeyOf) -> None:
        """Re-file `changed` (new or replaced records), unfile `gone` (known records that left)."""
        known = self.jobs
        if changed and draining == self.draining:
            changed = [j for j in changed if not self._swap(j, key)]
        if draining != self.draining:
            # Whether a job is a class of its own reads the draining preemptors: re-file who changed.
            skip = {j.id for j in changed} | {j.id for j in gone}
            changed += [known[i] for i in (draining ^ self.draining) & known.keys() if i not in skip]
            self.draining = draining
        spots: list[tuple[str, tuple[float, int]]] = []   # (user, (submit time, id)) where a user's list changed
        for j in gone + [known[j.id] for j in changed if j.id in known]:
            self._unfile(j)
            self.bursting.discard(j.id)
            self.tails.get(j.user, set()).discard(j.id)
            spots.append((j.user, _order(j)))
        for j in changed:
            known[j.id] = j
            if j.submit_time > self.newest:
                self.newest = j.submit_time
            if _marked(j):
                self.marked[j.id] = j
            mine = self.users.setdefault(j.user, [])
            at = place(mine, _order(j))
            mine.insert(at, j)
            self.times.setdefault(j.user, []).insert(at, j.submit_time)
            self.uids.setdefault(j.user, []).insert(at, j.id)
            spots.append((j.user, _order(j)))
        refile = {j.id: j for j in changed}
        if self.burst is not None:
            for j in retail(self.users, self.times, self.uids, self.tails, self.bursting, self.where, spots,
                            *self.burst):
                if j.id not in refile:
                    refile[j.id] = j
                    self._ungroup(j)
        for j in refile.values():
            self._group(j, key(j, j.id in draining))

    def _rebuild(self, waiting: list[Job], draining: frozenset[int], burst: tuple[int, float] | None,
                 key: KeyOf) -> None:
        self._reset()
        self.draining, self.burst = draining, burst
        self.jobs = {j.id: j for j in waiting}
        self.newest = max(self.newest, max(map(_SUBMIT_TIME, waiting), default=self.newest))
        self.marked = {j.id: j for j in waiting if _marked(j)}
        self.bursting = multifactor.burst_tail(waiting, *burst) if burst is not None else set()
        lists: dict[Key, list[Job]] = {}
        bursting = self.bursting
        for j in waiting:
            k: Key = (key(j, j.id in draining), j.id in bursting)
            mine = lists.get(k)
            if mine is None:
                lists[k] = [j]
                self.where[j.id] = k
            else:       # the class's first job's key: one per class held (as file() keeps them)
                self.where[j.id] = self.where[mine[0].id]
                mine.append(j)
        for k, jobs in lists.items():
            jobs.sort(key=_ID)              # then stably by submit time: (submit time, id), the order
            jobs.sort(key=_SUBMIT_TIME)     # within a class (plain keys sort faster than tuples)
            self.groups[k] = g = Group(k, jobs)
            self.kinds.count(k, g, jobs[0], True)
        self._refront()
        users: dict[str, list[Job]] = {}
        for j in waiting:
            users.setdefault(j.user, []).append(j)
        for u, jobs in users.items():
            jobs.sort(key=_ID)
            jobs.sort(key=_SUBMIT_TIME)
            self.tails[u] = {j.id for j in jobs if j.id in bursting}
            self.times[u] = list(map(_SUBMIT_TIME, jobs))
            self.uids[u] = list(map(_ID, jobs))
        self.users = users

    def _refront(self) -> None:
        """Each family's classes in order anew (their split or the Linear epoch changed) from the classes as
        they are, as filing every job anew (`_rebuild`) orders them, at a key a class, not a class key and a
        Group a job (~5 % of a deep replay's CPU). No block of passed classes outlives it (its order changed)."""
        self.families, self.slopes, self.flats, self.young = {}, {}, {}, []
        split = self.split and self.linear is not None
        for k, g in self.groups.items():
            g.anew()
            head = g.jobs[0]
            fam = family(head, k, self.split, self.apart)
            self.families.setdefault(fam, []).append((self._key(head), head.id, k, g))
            if split:
                self._slope(fam, head)
                if not self.linear.old(head.submit_time):      # type: ignore[union-attr]  # (split)
                    self.young.append((head.submit_time, head.id, k))
        for fronts in self.families.values():
            fronts.sort(key=_FIRST_TWO)
        heapq.heapify(self.young)

    def _age(self, now: float) -> None:
        """The classes whose first job waited its full age by `now` (since the last pass) take the aged
        key (Linear.key): they go by submit time, at their tied priority (fronts.Reach._bound); a class
        left young-keyed would have its rest bounded above every aged class of the pass."""
        lin, young, groups = self.linear, self.young, self.groups
        assert lin is not None
        moved, seen = [], set()
        was = lin.upto
        lin.upto = now
        while young:
            t, jid, k = young[0]
            if not lin.old(t):
                break
            heapq.heappop(young)
            g = groups.get(k)
            if g is None or g.jobs[0].id != jid or jid in seen:
                continue            # (gone, or its first job changed: filed again under its new key)
            seen.add(jid)
            moved.append(g)
        for g in moved:
            lin.upto = was
            head = g.jobs[0]
            self._front(g.key, head, None, g, count=False)
            lin.upto = now
            self._front(g.key, None, head, g, count=False)

    def _slope(self, fam: Key, j: Job) -> None:
        assert self.linear is not None
        slope = self.linear.slope(j)
        if slope > self.slopes.get(fam, -1.0):
            self.slopes[fam] = slope
        if slope < self.flats.get(fam, inf):
            self.flats[fam] = slope

    def _key(self, j: Job) -> "float | tuple[float, float]":
        """The place in its family of a class whose first job is `j` (with its id): its submit time, or
        split, its Linear key."""
        lin = self.linear
        return lin.key(j) if self.split and lin is not None else j.submit_time

    def _swap(self, j: Job, key: KeyOf) -> bool:
        """Put a known job's new record where its old one is, when nothing that files it changed
        (most changes between passes are a new reason): no re-filing, no burst tail. False: not so."""
        old = self.jobs.get(j.id)
        if old is None or FILED(old) != FILED(j) or j.held and key(old, False) != key(j, False):
            return False
        self.jobs[j.id] = j
        if j.id in self.marked:
            self.marked[j.id] = j
        self.groups[self.where[j.id]].swap(j)
        mine = self.users[j.user]
        mine[bisect_left(mine, _order(j), key=_order)] = j
        return True

    def _unfile(self, j: Job) -> None:
        self._ungroup(j)
        del self.jobs[j.id]
        self.marked.pop(j.id, None)
        mine = self.users[j.user]
        at = bisect_left(mine, _order(j), key=_order)
        del mine[at], self.times[j.user][at], self.uids[j.user][at]

    def _ungroup(self, j: Job) -> None:
        k = self.where[j.id]
        g = self.groups[k]
        if g.within is not None:
            g.within.changed(g)
        head = g.jobs[0]
        unfile(self.groups, self.where, j)
        if head.id == j.id:
            self._front(k, head, g.jobs[0] if g.jobs else None, g)

    def _group(self, j: Job, k: Key) -> None:
        k = (k, j.id in self.bursting)
        g = self.groups.get(k)
        head = g.jobs[0] if g is not None else None
        file(self.groups, self.where, j, k)
        g = self.groups[k]
        if g.within is not None:
            g.within.changed(g)
        if g.jobs[0] is not head:
            self._front(k, head, g.jobs[0], g)

    def _front(self, k: Key, was: Job | None, now: Job | None, g: Group, count: bool = True) -> None:
        """Group `k` (`g`)'s first job went from `was` to `now` (None: the group was made or is gone):
        its place in its family, its block of passed classes (blocks.py) and, made or gone, its
        kinds follow."""
        any_ = now if now is not None else was
        assert any_ is not None
        fam = family(any_, k, self.split, self.apart)
        fronts = self.families.setdefault(fam, [])
        if was is not None:
            spot = (self._key(was), was.id)
            del fronts[bisect_left(fronts, spot)]
            blocks.remove(g, spot)
        if now is not None:
            spot = (self._key(now), now.id)
            at = bisect_left(fronts, spot)
            fronts.insert(at, (*spot, k, g))
            if self.split and self.linear is not None:
                self._slope(fam, now)
                if not self.linear.old(now.submit_time):
                    heapq.heappush(self.young, (now.submit_time, now.id, k))
            if 0 < at < len(fronts) - 1:
                blocks.insert(g, fronts[at], (fronts[at - 1][3], fronts[at + 1][3]))
        if count and (was is None or now is None):
            self.kinds.count(k, g, any_, was is None)
        if not fronts:
            del self.families[fam]
