"""Runs of a family's passed classes kept from pass to pass (issue 41): a pass that settles (settle.passes_from) passes
most classes of a deep queue unreached, each with its "no room" verdict, and the next pass would visit each of them
again. A `Block` keeps such a run: its classes (a family's consecutive ones, in the kept Queue's order) by what their
verdicts read, each (account, user, GPUs, CPUs, nodes) (whether the caps pass it) and each request shape (its "no
room" verdict). The next pass that reaches the run's first class takes the whole run when every input gives a pass
again, at a look per input, not per class; their ids are read from the classes at the end of the pass.

A block holds only *plain* classes (no gates, no throttle, not judged on its own: `plain`), whose verdict in a frozen
pass reads nothing but those inputs, so the same answers give the same verdicts, class by class, as the one-by-one
walk. The kept Queue (queue.py) keeps the rest of the invariant, that a block's classes are its family's consecutive
classes: a class whose first job changes leaves its block (`remove`) and, put between two classes of one, joins it
(`insert`; a class that is not plain kills it). A job filed into or out of a class changes no input of its block. So a
queue that changes by a few jobs a pass keeps its blocks, where dropping a run on any change kept none (at 10k×50
every family changes every pass). tests/property/test_plan_blocks.py checks passes that take blocks against whole
passes as the queue changes; each of the Queue's rules (remove, insert, a class that is not plain killing the block,
`Block.changed`) planted away fails it, as do the walk's own (`settle._block_at`: the count of a block taken, the
split where taking starts inside one).
"""
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from heapq import heapify, heappop, heappush, heapreplace
from itertools import chain, count
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

from ..jobs.model import Job
from ..jobs.plan import Verdict
from .backfill import span
from .delays import RESERVED

if TYPE_CHECKING:       # a Group holds its block; queue.py imports this module
    from .queue import Front, Group, Key
    from .settle import Dead

Who = tuple[str, str, int, int, int]        # (account, user, GPUs, CPUs, nodes): what Usage.blocked reads
Shape = tuple[int, str, int, int]           # (GPUs, model, CPUs, memory): what "no room" reads
# What settle.dead reads of a class without gates (Group.plain). Named: cast() of the spelled-out type built it per call.
Plain = tuple[Who, Shape]
_IDS = attrgetter("ids")
# The order classes enter blocks in: a class's number in its block's shape index (`Block.shapes`), so that
# the shortest class by (span, number) is the first shortest in the index's order, as min() finds it.
_ENTERED = count()


def plain(g: "Group") -> "Key | None":
    """Group.plain of the class `g`, found at its first use and kept on it: (who, shape), or None for a
    class with gates (hold, begin, retry backoff, dependencies, throttle) or judged on its own."""
    k = g.key[0]
    got = g.plain = None if k[0] == "own" or k[11] is not None or k[12] is not None or k[13] is not None \
        or k[14] or k[15] else ((k[1], k[2], k[5], k[7], k[18]), (k[5], k[6], k[7], k[8]))
    return got


class Block:
    """A run of plain classes (`groups`, in family order; `fronts`, their entries in the family's order:
    (submit time, id) of the first job, group key), by who and by shape. Each class is in at most one
    block (Group.within); the first one names it (Group.block)."""
    __slots__ = ("fronts", "groups", "whos", "shapes", "ids", "least", "some", "heaps")

    def __init__(self, groups: "list[Group]", fronts: "list[Front]") -> None:
        self.groups, self.fronts = groups, fronts
        # who / shape -> its classes (a dict for its order and an O(1) removal: a list's was O(classes))
        self.whos: dict[Who, dict[Group, None]] = {}
        self.shapes: dict[Shape, dict[Group, int]] = {}     # (each class's number: _ENTERED)
        # who -> a job of it: the caps read only its who (`holds`); the first class of a who's dict was
        # found past the deleted entries a cut leaves at its front, O(classes cut) per look
        self.some: dict[Who, Job] = {}
        # shape -> [learned, a heap of (span, number, class) of its classes, the highest number in it], made
        # when its shortest left (`_least`); classes that left stay in the heap until they come up
        self.heaps: dict[Shape, list[Any]] = {}
        # shape -> the ids of the block's jobs of that shape, made at a pass's end and kept until a job
        # or class of that shape changes (`changed`): the same tuple pass to pass while none does
        self.ids: dict[Shape, tuple[int, ...]] = {}
        # shape -> (learned, the shortest span then of its classes, a class of it): a Reservation verdict
        # holds for the block's classes of a shape when it holds for that class's first job (settle.dead)
        self.least: dict[Shape, tuple[bool, float, Group]] = {}
        self._index(groups)
        groups[0].block = self

    def changed(self, g: "Group") -> None:
        """A job was filed into or out of the block's class `g` (queue.py)."""
        self.touch(cast(Plain, g.plain)[1])

    def touch(self, shape: Shape) -> None:
        """The block's classes of `shape` changed: their ids are made again when asked."""
        self.ids.pop(shape, None)

    def _index(self, groups: "list[Group]") -> None:
        # (inline: blocks of hundreds of classes are joined and cut pass after pass)
        whos, shapes, ids, least = self.whos, self.shapes, self.ids, self.least
        for g in groups:
            who, shape = g.plain     # type: ignore[misc]  # (a plain class's; cast() is a call per class)
            got = whos.get(who)
            if got is None:
                whos[who] = {g: None}
                self.some[who] = g.jobs[0]
            else:
                got[g] = None
            had = shapes.get(shape)
            if had is None:
                shapes[shape] = {g: next(_ENTERED)}
            else:
                if g not in had:
                    had[g] = next(_ENTERED)     # (into the shape's heap, if any, when next asked: `_shortest`)
                if ids:
                    ids.pop(shape, None)        # (touch)
                if least:
                    old = least.get(shape)
                    if old is not None and (s := span(g.jobs[0], old[0])) < old[1]:
                        least[shape] = (old[0], s, g)
            within = g.within
            if within is not None and within is not self and within.groups:
                kill(within)      # a class is in one block: one it was in is no run now (`absorb`: is none)
            g.within = self

    def _out(self, groups: "Iterable[Group]") -> None:
        """Classes `groups`, taken out of `self.groups` already, leave the block's indexes."""
        whos, shapes, ids = self.whos, self.shapes, self.ids
        for g in groups:
            who, shape = g.plain     # type: ignore[misc]
            if ids:
                ids.pop(shape, None)            # (_left)
            mine = whos[who]
            del mine[g]
            if not mine:
                del whos[who], self.some[who]
            had = shapes[shape]
            del had[g]
            if not had:     # (a class of it that comes next is not checked against the shortest of these)
                del shapes[shape]
                self.heaps.pop(shape, None)
                self.least.pop(shape, None)
            g.within = None

    def prepend(self, groups: "list[Group]", fronts: "list[Front]") -> None:
        """Classes taken one by one (or a block's, `absorb`) just before the block's first: they join it."""
        self.groups[0].block = None
        self.groups[:0] = groups        # in place: a copy of a block of thousands increfs each class
        self.fronts[:0] = fronts
        self._index(groups)
        groups[0].block = self

    def extend(self, other: "Block") -> None:
        """The classes of block `other`, right after this one's last in their family, join it (`other` is no more)."""
        groups, fronts = absorb(other)
        self.groups += groups
        self.fronts += fronts
        self._index(groups)

    def lead(self, g: "Group") -> bool:
        """A pass starts taking classes at `g` (not the first; those before it were reached): True where the
        classes before `g` leave the block and `g` leads it, as they are fewer than `g` and those after it;
        else `g` and those after it leave (`split`: False). In the drain a family's front class is reached
        and the walk takes the rest from the second on, pass after pass: splitting those off had them taken
        one by one and made a block again each pass (~20 % of the 20,000-job 64-GPU replay)."""
        groups = self.groups
        at = groups.index(g)
        if at > len(groups) - at:
            self.split(g, at)
            return False
        groups[0].block = None
        gone = groups[:at]
        del groups[:at], self.fronts[:at]
        self._out(gone)
        g.block = self
        return True

    def split(self, g: "Group", at: int | None = None) -> None:
        """Class `g` (not the first; at `at`) and those after it leave the block (a pass starts taking classes at `g`)."""
        if at is None:
            at = self.groups.index(g)
        gone = self.groups[at:]
        del self.groups[at:], self.fronts[at:]
        if len(gone) <= at:         # out of the indexes, whichever side is the smaller
            self._out(gone)
            return
        for h in gone:
            h.within = None
        self.whos, self.shapes, self.ids, self.least, self.some, self.heaps = {}, {}, {}, {}, {}, {}
        self._index(self.groups)

    def cut(self, k: int) -> "Block | None":
        """The block's first `k` classes and the one after them leave it (a pass takes those `k` and stops
        at that one, settle._block_at); the rest stay a block. Returns the block of those `k` (None: k = 0):
        this one, or a new one, whichever moves fewer classes (each costs its indexes: blocks of thousands
        of classes are cut a few classes in, or a few from their end, pass after pass)."""
        groups, fronts, at = self.groups, self.fronts, self.groups[k]
        if k <= len(groups) - k - 1:
            groups[0].block = None
            first, first_fronts = groups[:k], fronts[:k]
            del groups[:k + 1], fronts[:k + 1]
            self._out(first)
            self._out((at,))
            if groups:
                groups[0].block = self
            return Block(first, first_fronts) if k else None
        rest, rest_fronts = groups[k + 1:], fronts[k + 1:]
        del groups[k:], fronts[k:]
        self._out((at,))
        self._out(rest)
        if rest:
            Block(rest, rest_fronts)
        return self


def absorb(b: Block) -> "tuple[list[Group], list[Front]]":
    """Block `b`'s classes and entries, as another block takes them all (`_index` then puts each in it):
    `b` is no more, without a pass over its classes (`kill`'s) before that one's."""
    groups, fronts = b.groups, b.fronts
    groups[0].block = None
    b.groups, b.fronts = [], []
    return groups, fronts


def kill(b: Block | None) -> None:
    """No pass takes the block again; its classes are in none."""
    if b is not None:
        for g in b.groups:
            g.within = None
        if b.groups:
            b.groups[0].block = None
        b.groups, b.fronts = [], []


def remove(g: "Group", front: "tuple[float | tuple[float, float], int]") -> None:
    """Class `g`, whose first job was at `front`, leaves its family's order there (queue.py: its
    first job changed, or it is gone): it leaves its block."""
    b = g.within
    if b is None:
        return
    at = bisect_left(b.fronts, front)
    del b.groups[at], b.fronts[at]
    who, shape = cast(Plain, g.plain)
    b._out((g,))
    if at == 0:
        g.block = None
        if b.groups:
            b.groups[0].block = b


def insert(g: "Group", front: "Front", between: "tuple[Group, Group]") -> None:
    """Class `g` was put in its family's order (at `front`) between two classes: if they are of one
    block, `g` joins it, or kills it where `g` is not plain."""
    b = between[0].within
    if b is None or between[1].within is not b:
        return
    p = g.plain
    if p == 0:
        p = plain(g)
    if p is None:
        return kill(b)
    at = bisect_left(b.fronts, front)
    b.fronts.insert(at, front)
    b.groups.insert(at, g)
    b.touch(cast(Plain, p)[1])
    b._index([g])


def holds(b: Block, opened: dict[Who, bool], verdicts: dict[Shape, Verdict], passes: Callable[[Job], bool],
          dead: Callable[[Job], Verdict | None], learned: bool = False, d: "Dead | None" = None,
          now: float = 0.0, capped: bool = True) -> bool:
    """Whether every class of `b` passes now: each who's caps pass (`opened`, this pass's answers so
    far; `passes` asks the rest; not asked where no account or user has a cap: `capped` False) and each
    shape has a "no room" verdict (`verdicts`; `dead` asks the rest of the first job of a class of it)
    or, where it has room, a Reservation verdict for the shape's class of the shortest span
    (backfill.span: `learned`), which then holds for each of its classes. The answers are kept as the
    one-by-one walk keeps them."""
    if capped and not all(map(opened.get, b.whos)):
        for who, gs in b.whos.items():
            ok = opened.get(who)
            if ok is None:
                ok = opened[who] = passes(b.some[who])
            if not ok:
                return False
    if all(map(verdicts.get, b.shapes)):
        return True         # every answer known, and each a pass (verdicts are non-empty tuples)
    return all(verdicts.get(shape) or _passes(b, shape, gs, learned, dead, d, now) for shape, gs in b.shapes.items())


def _passes(b: Block, shape: Shape, gs: "dict[Group, int]", learned: bool, dead: Callable[[Job], Verdict | None],
            d: "Dead | None", now: float) -> bool:
    """Whether the classes of `shape` in `b`, which has no "no room" verdict yet, take a `dead` one: that of its
    shortest class. Once that class left, its span is a lower bound of the shape's (`least`, kept as classes
    come): a verdict of any class of the shape that is Reservation with that bound past the shape's bound holds
    for all, without a min over the shape's classes (in the drain the shortest is the next to start)."""
    got = b.least.get(shape)
    if got is not None and got[0] == learned and got[2].within is not b and d is not None:
        verdict = dead(next(iter(gs)).jobs[0])
        if not verdict:
            return False        # (so would the shortest's be: the verdict reads only its span)
        if verdict is not RESERVED or now + got[1] > d.bounds[shape]:
            return True
    return bool(dead(_least(b, shape, gs, learned)))


def first_unknown(b: Block, d: "Dead", passes: Callable[[Job], bool], dead: Callable[[Job], Verdict | None],
                  now: float, learned: bool, capped: bool = True) -> int:
    """Of a block that `holds` did not pass: the place of its first class whose `dead` verdict is not known
    now (len: none), as settle._dead_class class by class would find it (caps kept in `d.open`, "no room" in
    `d.verdicts`), but each shape passed with Reservation asked once: a later class of it is past its bound
    (delays.bound) by its span alone. A pass cuts blocks of hundreds of classes there (settle._block_at)."""
    bounds: dict[Shape, float] = {}     # shape -> its bound, of the shapes whose classes took Reservation
    groups = b.groups
    for k, g in enumerate(groups):
        who, shape = g.plain     # type: ignore[misc]
        if capped:
            ok = d.open.get(who)
            if ok is None:
                ok = d.open[who] = passes(g.jobs[0])
            if not ok:
                return k
        if d.verdicts.get(shape):
            continue
        job = g.jobs[0]
        bound = bounds.get(shape)
        if bound is None:
            got = dead(job)
            if got is None:
                return k
            if got is RESERVED:
                bounds[shape] = d.bounds[shape]
        elif now + span(job, learned) <= bound:       # as settle.dead: room now, and it would not delay
            return k
        else:
            d.reserved[shape] = job
    return len(groups)


def _least(b: Block, shape: Shape, gs: "dict[Group, int]", learned: bool) -> Job:
    got = b.least.get(shape)
    if got is None or got[0] != learned or got[2].within is not b:
        g = _shortest(b, shape, gs, learned)
        got = b.least[shape] = (learned, span(g.jobs[0], learned), g)
    return got[2].jobs[0]


def _shortest(b: Block, shape: Shape, gs: "dict[Group, int]", learned: bool) -> "Group":
    """The first class of `shape` in `gs`'s order of the shortest span: min() over them, from a heap kept
    on the block (in the drain the shortest starts next and the min was made again each pass: ~10 % of
    the 20,000-job 64-GPU replay). An entry whose class left or whose span moved is dropped or put back."""
    got = b.heaps.get(shape)
    if got is None or got[0] != learned or len(got[1]) > 2 * len(gs) + 8:     # (its leavers)
        heap = [(span(g.jobs[0], learned), n, g) for g, n in gs.items()]
        heapify(heap)
        b.heaps[shape] = [learned, heap, next(reversed(gs.values()))]
    else:
        heap, upto = got[1], got[2]
        # The classes come since: last in `gs` (numbered as they enter, a dict keeps that order)
        for g, n in reversed(gs.items()):
            if n <= upto:
                break
            heappush(heap, (span(g.jobs[0], learned), n, g))
        got[2] = max(upto, next(reversed(gs.values())))
    while True:
        s, n, g = heap[0]
        if gs.get(g) != n:
            heappop(heap)
            continue
        now = span(g.jobs[0], learned)
        if now == s:
            return g
        heapreplace(heap, (now, n, g))


def taken(b: Block, verdicts: dict[Shape, Verdict]) -> dict[Shape, Verdict]:
    """The verdict of each shape of `b`, which `holds` passed: its "no room" one, else Reservation."""
    if all(map(verdicts.get, b.shapes)):
        return verdicts
    return {shape: verdicts.get(shape) or RESERVED for shape in b.shapes}


def runs(used: list[tuple[Block, dict[Shape, Verdict]]], out: list[tuple[Sequence[int], Verdict]],
         lost: dict[Shape, Any] | None = None,
         split: "Callable[[Block, Shape, tuple[int, ...]], list[tuple[Sequence[int], Verdict]]] | None" = None) -> None:
    """The runs (plan.Pendings) of the blocks a pass took, each with the verdicts it was taken with: a run
    per block and shape, its ids a tuple kept on the block (made again only for a shape whose classes changed);
    of a shape taken with Reservation that an admission later left without room (`lost`), the runs before
    and after it (`split`: delays.split)."""
    for b, verdicts in used:
        ids = b.ids
        if len(ids) != len(b.shapes):
            for shape, gs in b.shapes.items():
                if shape not in ids:
                    ids[shape] = tuple(chain.from_iterable(map(_IDS, gs)))
        if not lost or split is None:
            out.extend(zip(ids.values(), map(verdicts.__getitem__, ids)))
            continue
        for shape, got in ids.items():
            verdict = verdicts[shape]
            if verdict is not RESERVED or shape not in lost:
                out.append((got, verdict))
            else:
                out += split(b, shape, got)


def entries_of(b: Block, verdicts: dict[Shape, Verdict], park_of: Callable[[Verdict], Any]
               ) -> list[tuple[Any, Any, Any, Any]]:
    """The block's classes as the walk's one-by-one passed entries (settle.recall, when a change
    concerns some of them): (class key, group key, group, the park of its verdict)."""
    return [(g.key[0], g.key, g, park_of(verdicts[cast(Plain, g.plain)[1]])) for g in b.groups]
