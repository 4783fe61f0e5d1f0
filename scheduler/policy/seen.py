"""What changed between two snapshots a caller plans one after the other (the daemon: kept.py),
found without reading every job: the running jobs in snapshot order, and the pending records that
are new or replaced and the pending ids that are gone, for the kept Queue to file (queue.py).

Records are frozen, so a job that changed is a new object, and one that did not is the same object
as last time. The daemon's snapshot lists its jobs dict in order: between two passes records are
replaced in place, ended ones leave and new ones come at the end. So the two tuples are compared
place by place by identity, in C (`map(is_not, ...)`), and only where they differ is a record
looked at: a replaced record (the same id), or records that left (the old one is found a few
places on). Each place costs a pointer comparison, not an attribute read: a 100,000-job snapshot
was read four or five times a pass (states, ids, the Queue's identity check, the gone ids).

Any order is handled: where the two differ in more places than the walk's budget, the snapshot is
read whole (`_whole`), as before. The result is the same either way (tests/property/test_plan_seen.py
checks it against a reading of the whole snapshot). The last snapshot's tuple is held, so that no
record it names is freed and its address reused by a new one that would pass for it."""
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress, count, repeat
from operator import attrgetter, eq, is_not

from ..jobs import states
from ..jobs.model import Job

# What a caller that makes each change tells `Seen.tell` beside the jobs: the ids changed since the last
# snapshot, the present record of each id, a job's place (the daemon's pass: state.pass_snapshot).
Told = tuple[Iterable[int], Mapping[int, Job], Callable[[Job], int]]

_ID, _STATE = attrgetter("id"), attrgetter("state")
# How far past a place where the tuples differ the old record of the new one is looked for (records
# that left in a row), and how many such places a pass may meet before reading the snapshot whole.
AHEAD = 8
BUDGET = 256


class Seen:
    def __init__(self) -> None:
        self.n = 0                             # snapshots seen
        self.jobs: tuple[Job, ...] = ()
        self.on_node: list[bool] = []          # for each of `jobs`: whether it is on a node
        self.pending: dict[int, Job] = {}      # id -> the pending record as last seen
        # What `see` found in the last snapshot:
        self.running: list[Job] = []           # the jobs on a node, in snapshot order
        self.changed: list[Job] = []           # pending records new or replaced
        self.gone: set[int] = set()            # ids pending before and not now (ended, started, dropped)
        # records on a node last time and not now (ended or replaced), and on a node now and not last
        # time (started or replaced): the changes a kept count of the running jobs takes (standing.py)
        self.left: list[Job] = []
        self.came: list[Job] = []
        self.on: dict[int, Job] | None = None   # id -> the record on a node, for `tell` (None: `see`'s)
        # `tell`: each running job's place (as `place` gave it), and those of `running` in its order (None:
        # not known, `see`'s order)
        self.places: dict[int, int] = {}
        self.at: list[int] | None = None

    def tell(self, jobs: tuple[Job, ...], touched: Iterable[int], now: Mapping[int, Job],
             place: Callable[[Job], int]) -> None:
        """Take `jobs` as the present ones, told what changed instead of finding it: a caller that makes
        each change itself (the replay, sim/through.py) names the ids it put or took out since the last
        snapshot (`touched`), `now` holds the present record of each id (`jobs` are its values) and
        `place` gives a job's place in `jobs`, so the running ones keep the snapshot's order. What is
        found is what `see` finds (tests/property/test_plan_seen.py), at the cost of the changes:
        `see` compares the whole snapshot, O(jobs) a pass, ~20 % of the 64-GPU replay's drain."""
        self.n += 1
        on, pending = self.on, self.pending
        if on is None:          # from `see`'s state: its running jobs, by id
            on = self.on = {j.id: j for j in self.running}
        changed: list[Job] = []
        gone: set[int] = set()
        left: list[Job] = []
        came: list[Job] = []
        moves: list[tuple[int, bool, Job | None]] = []     # (id, was on a node, its record on a node now)
        for i in touched:
            j = now.get(i)
            was = pending.get(i)
            if j is not None and j.state == states.PENDING:
                if j is not was:
                    changed.append(j)
                    pending[i] = j
            elif was is not None:
                gone.add(i)
                del pending[i]
            was = on.get(i)
            if j is not None and j.state in states.ON_NODE:
                moves.append((i, was is not None, j))       # (taken out and put back, it is last now)
                if j is not was:
                    if was is not None:
                        left.append(was)
                    came.append(j)
                    on[i] = j
            elif was is not None:
                moves.append((i, True, None))
                left.append(was)
                del on[i]
        changed.sort(key=place)
        self.changed, self.gone, self.left, self.came = changed, gone, left, came
        if moves:
            self._order(on, moves, place)
        self.jobs, self.on_node = jobs, []

    def _order(self, on: dict[int, Job], moves: list[tuple[int, bool, Job | None]], place: Callable[[Job], int]) -> None:
        """`running` in place order, as sorted(on.values(), key=place): the last one's, less the moved
        jobs at their old places, plus them at their new (a job's place changes only where it is
        told). Sorting every running job each pass (a key call each) was ~4 % of a replay's pass on
        512 GPUs; a move costs a search. A new list: the last pass's may be held."""
        at, places = self.at, self.places
        if at is None or len(moves) > 64:
            running = self.running = sorted(on.values(), key=place)
            self.at = list(map(place, running))
            self.places = dict(zip(map(_ID, running), self.at))
            return
        running = self.running.copy()
        for i, had, j in moves:
            if had:
                k = bisect_left(at, places.pop(i))
                del running[k], at[k]
            if j is not None:
                p = places[i] = place(j)
                k = bisect_left(at, p)
                running.insert(k, j)
                at.insert(k, p)
        self.running = running

    def see(self, jobs: tuple[Job, ...]) -> None:
        """Take `jobs` (a snapshot's) as the present ones."""
        self.n += 1
        told, self.on, self.at = self.on is not None, None, None     # last told (`tell`): no flags kept to align with
        got = None if told else _aligned(self.jobs, jobs, self.on_node, BUDGET + len(jobs) // 8)
        was = self.running
        if got is None:
            self._whole(jobs)
        else:
            flags, dropped, added = got
            self.left = [j for j in dropped if j.state in states.ON_NODE]
            self.came = [j for j in added if j.state in states.ON_NODE]
            both = {id(j) for j in self.left} & {id(j) for j in self.came} if self.left and self.came else ()
            if both:        # moved, not changed (dropped at its old place, added at its new one)
                self.left = [j for j in self.left if id(j) not in both]
                self.came = [j for j in self.came if id(j) not in both]
            left = {j.id for j in dropped if self.pending.get(j.id) is j}
            self.changed = list(compress(added, map(eq, map(_STATE, added), repeat(states.PENDING))))
            self.gone = left - {j.id for j in self.changed}
            for i in self.gone:
                del self.pending[i]
            for j in self.changed:
                self.pending[j.id] = j
            self.on_node = flags
        self.jobs = jobs
        self.running = list(compress(jobs, self.on_node))
        if got is None:     # by identity: `was` is held here, so no address of it was reused
            now, then = set(map(id, self.running)), set(map(id, was))
            self.left = [j for j in was if id(j) not in now]
            self.came = [j for j in self.running if id(j) not in then]

    def _whole(self, jobs: tuple[Job, ...]) -> None:
        said = list(map(_STATE, jobs))
        self.on_node = list(map(states.ON_NODE.__contains__, said))
        pending = list(compress(jobs, map(eq, said, repeat(states.PENDING))))
        known = self.pending
        self.changed = list(compress(pending, map(is_not, map(known.get, map(_ID, pending)), pending)))
        self.pending = dict(zip(map(_ID, pending), pending))
        self.gone = set(known.keys() - self.pending.keys())


def _aligned(old: Sequence[Job], new: Sequence[Job], flags: list[bool], budget: int
             ) -> tuple[list[bool], list[Job], list[Job]] | None:
    """(on-node flags of `new`, records of `old` not in `new`, records of `new` not in `old`), the
    two compared place by place; None where they differ in more than `budget` places."""
    out: list[bool] = []
    dropped: list[Job] = []
    added: list[Job] = []
    a, b = iter(old), iter(new)
    i = k = 0           # the places in old and new that `a` and `b` have reached
    while budget > 0:
        d = next(compress(count(), map(is_not, a, b)), None)
        if d is None:           # one of them ended: the rest of the other left, or is new
            same = min(len(old) - i, len(new) - k)
            out += flags[i:i + same]
            dropped += old[i + same:]
            added += new[k + same:]
            out += map(states.ON_NODE.__contains__, map(_STATE, new[k + same:]))
            return out, dropped, added
        out += flags[i:i + d]
        i, k = i + d + 1, k + d + 1
        was, now = old[i - 1], new[k - 1]
        budget -= 1
        if was.id == now.id:            # replaced in place
            dropped.append(was)
            added.append(now)
            out.append(now.state in states.ON_NODE)
            continue
        ahead = _find(old, now, i, AHEAD)
        if ahead is None:               # not met a few places on: new here (or moved)
            dropped.append(was)
            added.append(now)
            out.append(now.state in states.ON_NODE)
            continue
        # `was` and the records up to `now`'s old place left; `now` is where it was.
        dropped += old[i - 1:ahead]
        out.append(flags[ahead])
        _skip(a, ahead + 1 - i)
        i = ahead + 1
    return None


def _find(old: Sequence[Job], j: Job, at: int, ahead: int) -> int | None:
    for x in range(at, min(at + ahead, len(old))):
        if old[x] is j:
            return x
    return None


def _skip(it: Iterator[Job], n: int) -> None:
    for _ in range(n):
        next(it)
