"""Runs of a family's passed classes kept from pass to pass (issue 41): a pass that settles (settle.passes_from) passes
most classes of a deep queue unreached, each with its "no room" verdict, and the next pass would visit each of them
again. A `Block` keeps such a run: its classes (a family's consecutive ones, in the kept Queue's order) by what their
verdicts read, each (account, user, GPUs, CPUs, nodes) (whether the caps pass it) and each request shape (its "no
room" verdict). The next pass that reaches the run takes it from the class it reaches to the first whose verdict it
does not know now (passing.py: to its end when every input gives a pass again, at a look per input, not per class),
and the block stays whole (`Used`: a drain's pass stops inside a block of thousands of classes at one that can
backfill, pass after pass; cutting the block there and joining it again cost the depth of the queue a pass). Their
ids are read from the classes at the end of the pass.

A block holds only *plain* classes (no gates, no throttle, not judged on its own: `plain`), whose verdict in a frozen
pass reads nothing but those inputs, so the same answers give the same verdicts, class by class, as the one-by-one
walk. The kept Queue (queue.py) keeps the rest of the invariant, that a block's classes are its family's consecutive
classes: a class whose first job changes leaves its block (`remove`) and, put between two classes of one, joins it
(`insert`; a class that is not plain kills it). A job filed into or out of a class changes no input of its block. So a
queue that changes by a few jobs a pass keeps its blocks, where dropping a run on any change kept none (at 10k×50
every family changes every pass). tests/property/test_plan_blocks.py checks passes that take blocks against whole
passes as the queue changes; each of the Queue's rules (remove, insert, a class that is not plain killing the block,
`Block.changed`) planted away fails it, as do the walk's own (`settle._block_at`: the count of a block taken, where
taking stops inside one: `passing.first_unknown`).
"""
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, count
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

from ..jobs.model import Job
from ..jobs.plan import Verdict
from .backfill import span
from .delays import RESERVED
from .spans import Spans

if TYPE_CHECKING:       # a Group holds its block; queue.py imports this module
    from .queue import Front, Group, Key

Who = tuple[str, str, int, int, int]        # (account, user, GPUs, CPUs, nodes): what Usage.blocked reads
Shape = tuple[int, str, int, int]           # (GPUs, model, CPUs, memory): what "no room" reads
# What settle.dead reads of a class without gates (Group.plain). A name of its own: cast() with the
# subscripted type spelled out built it per call.
Plain = tuple[Who, Shape]
# A block's classes [lo, hi) a pass took, with the verdict of each shape (settle.Dead.used): a pass takes
# a block from the class it reaches to the first whose verdict it does not know, which stays in the block.
Used = tuple["Block", int, int, dict[Shape, Verdict]]
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
    __slots__ = ("fronts", "groups", "whos", "shapes", "ids", "least", "some", "heaps", "spans", "one")

    def __init__(self, groups: "list[Group]", fronts: "list[Front]") -> None:
        self.groups, self.fronts = groups, fronts
        # who / shape -> its classes (a dict for its order and an O(1) removal: a list's was O(classes))
        self.whos: dict[Who, dict[Group, None]] = {}
        self.shapes: dict[Shape, dict[Group, int]] = {}     # (each class's number: _ENTERED)
        # who -> a job of it: the caps read only its who (`holds`); the first class of a who's dict was
        # found past the deleted entries of the classes that left, O(those) per look
        self.some: dict[Who, Job] = {}
        self.one: dict[Shape, Job] = {}     # shape -> a job of it: its bound reads only that (passing.py), as above
        # shape -> [learned, a heap of (span, number, class) of its classes, the highest number in it], made
        # when its shortest left (`_least`); classes that left stay in the heap until they come up
        self.heaps: dict[Shape, list[Any]] = {}
        # shape -> the ids of the block's jobs of that shape, made at a pass's end and kept until a job
        # or class of that shape changes (`changed`): the same tuple pass to pass while none does
        self.ids: dict[Shape, tuple[int, ...]] = {}
        # shape -> (learned, the shortest span then of its classes, a class of it): a Reservation verdict
        # holds for the block's classes of a shape when it holds for that class's first job (settle.dead)
        self.least: dict[Shape, tuple[bool, float, Group]] = {}
        # each class's span and shape in `groups`' order (spans.py): made when a pass first asks where in the
        # block it stops (passing.first_unknown), then kept as classes come and go
        self.spans: Spans | None = None
        self._index(groups)
        groups[0].block = self

    def changed(self, g: "Group") -> None:
        """A job was filed into or out of the block's class `g` (queue.py)."""
        self.touch(cast(Plain, g.plain)[1])

    def touch(self, shape: Shape) -> None:
        """The block's classes of `shape` changed: their ids are made again when asked."""
        self.ids.pop(shape, None)

    def _index(self, groups: "list[Group]") -> None:
        # (inline: a run of classes taken one by one joins a block of thousands)
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
                self.one[shape] = g.jobs[0]
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
            if not had:
                del shapes[shape], self.one[shape]
                self.heaps.pop(shape, None)
            g.within = None

    def timed(self, learned: bool) -> Spans:
        """`spans`, made where they are not (or were for the other `learned`)."""
        if self.spans is None or self.spans.learned != learned:
            self.spans = Spans(self.groups, self.fronts, learned)
        return self.spans

    def prepend(self, groups: "list[Group]", fronts: "list[Front]") -> None:
        """Classes taken one by one (or a block's, `absorb`) just before the block's first: they join it."""
        self.groups[0].block = None
        self.groups[:0] = groups        # in place: a copy of a block of thousands increfs each class
        self.fronts[:0] = fronts
        if self.spans is not None:
            self.spans.prepend(groups, self.fronts)
        self._index(groups)
        groups[0].block = self

    def extend(self, other: "Block") -> None:
        """The classes of block `other`, right after this one's last in their family, join it (`other` is no more)."""
        if self.spans is not None:
            self.spans.extend(other.spans, other.groups, other.fronts)
        groups, fronts = absorb(other)
        self.groups += groups
        self.fronts += fronts
        self._index(groups)


def absorb(b: Block) -> "tuple[list[Group], list[Front]]":
    """Block `b`'s classes and entries, as another block takes them all (`_index` then puts each in it):
    `b` is no more, without a pass over its classes (`kill`'s) before that one's."""
    groups, fronts = b.groups, b.fronts
    groups[0].block = None
    b.groups, b.fronts, b.spans = [], [], None
    return groups, fronts


def kill(b: Block | None) -> None:
    """No pass takes the block again; its classes are in none."""
    if b is not None:
        for g in b.groups:
            g.within = None
        if b.groups:
            b.groups[0].block = None
        b.groups, b.fronts, b.spans = [], [], None


def remove(g: "Group", front: "tuple[float | tuple[float, float], int]") -> None:
    """Class `g`, whose first job was at `front`, leaves its family's order there (queue.py: its
    first job changed, or it is gone): it leaves its block."""
    b = g.within
    if b is None:
        return
    at = bisect_left(b.fronts, front)
    del b.groups[at], b.fronts[at]
    if b.spans is not None:
        b.spans.remove(at)
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
    if b.spans is not None:
        b.spans.insert(at, front, g)
    b.touch(cast(Plain, p)[1])
    b._index([g])


def taken(b: Block, verdicts: dict[Shape, Verdict]) -> dict[Shape, Verdict]:
    """The verdict of each shape of `b`, which `holds` passed: its "no room" one, else Reservation."""
    if all(map(verdicts.get, b.shapes)):
        return verdicts
    return {shape: verdicts.get(shape) or RESERVED for shape in b.shapes}


def runs(used: "list[Used]", out: list[tuple[Sequence[int], Verdict]], lost: dict[Shape, Any] | None = None,
         split: "Callable[[Used, Shape, Sequence[int]], list[tuple[Sequence[int], Verdict]]] | None" = None) -> None:
    """The runs (plan.Pendings) of the blocks a pass took, each with the verdicts it was taken with: a run
    per block and shape, its ids a tuple kept on the block where the pass took it whole (made again only
    for a shape whose classes changed); of a shape taken with Reservation that an admission later left
    without room (`lost`), the runs before and after it (`split`: delays.split)."""
    for u in used:
        b, lo, hi, verdicts = u
        ids: Mapping[Shape, Sequence[int]] = b.ids if lo == 0 and hi == len(b.groups) else _ids(b.groups[lo:hi])
        if ids is b.ids and len(ids) != len(b.shapes):
            for shape, gs in b.shapes.items():
                if shape not in ids:
                    b.ids[shape] = tuple(chain.from_iterable(map(_IDS, gs)))
        if not lost or split is None:
            out.extend(zip(ids.values(), map(verdicts.__getitem__, ids)))
            continue
        for shape, got in ids.items():
            verdict = verdicts[shape]
            if verdict is not RESERVED or shape not in lost:
                out.append((got, verdict))
            else:
                out += split(u, shape, got)


def _ids(groups: "list[Group]") -> dict[Shape, list[int]]:
    """The ids of the classes `groups` (part of a block) by shape."""
    got: dict[Shape, list[int]] = {}
    for g in groups:
        shape = g.plain[1]      # type: ignore[index]
        mine = got.get(shape)
        if mine is None:
            got[shape] = g.ids[:]
        else:
            mine += g.ids
    return got


def entries_of(u: "Used", park_of: Callable[[Verdict], Any]) -> list[tuple[Any, Any, Any, Any]]:
    """The classes a pass took of a block as the walk's one-by-one passed entries (settle.recall, when a
    change concerns some of them): (class key, group key, group, the park of its verdict)."""
    b, lo, hi, verdicts = u
    return [(g.key[0], g.key, g, park_of(verdicts[cast(Plain, g.plain)[1]])) for g in b.groups[lo:hi]]
