"""A block's classes' spans and shapes in the block's order (blocks.Block.spans), for a pass that asks where
in a block it stops (passing.first_unknown): at the first class, from where it reaches the block, whose shape
has room and whose span would not delay the reservation (settle.dead). In the drain of a deep queue that class
is thousands in, pass after pass (issue 41). The spans are read in C, in chunks of about CHUNK classes, each
with the shortest span of each shape in it: a chunk without one within its shape's bound is passed at a look.
A class that leaves keeps its span in its chunk's shortest (a lower bound still), made exact again when a scan
of the chunk finds none within. tests/unit/test_spans.py holds `Spans.first` to a scan class by class as
classes come and go.
"""
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import compress, count, repeat
from operator import add, le
from typing import TYPE_CHECKING, Any

from .backfill import span

if TYPE_CHECKING:
    from .queue import Group

CHUNK = 256
_NEVER = float("-inf")
# A chunk's shortest span of a shape it holds no class of: no sum with it is within a bound, inf included (a
# class without a time limit spans inf, and is within an inf bound, a node without a reservation).
_NONE = float("nan")
# Each request shape a block has held, numbered (`kind`): `Spans.kinds` are these numbers, which a list indexes,
# where a tuple of four would be hashed at each look. Shapes are few (a cluster's request kinds); a number
# outlives its shape's jobs.
KINDS: dict[tuple[int, str, int, int], int] = {}


def kind(shape: tuple[int, str, int, int]) -> int:
    """The shape's number (KINDS), given at its first use."""
    got = KINDS.get(shape)
    if got is None:
        got = KINDS[shape] = len(KINDS)
    return got


class Spans:
    """`spans[i]`, `kinds[i]`: the span (backfill.span: `learned`) and the shape's number of a block's i-th
    class; chunk c holds the classes whose family entries (fronts) are from `cuts[c]` (any, for c = 0) to
    `cuts[c + 1]`, and `mins[c][k]` is at most the span of each of them of shape k (nan: none of it);
    `sizes[c]`: how many classes came into chunk c (a class that left still counted)."""
    __slots__ = ("learned", "spans", "kinds", "cuts", "mins", "sizes")

    def __init__(self, groups: "list[Group]", fronts: Sequence[Any], learned: bool) -> None:
        self.learned = learned
        self.spans, self.kinds = _timed(groups, learned)
        self.cuts: list[Any] = []
        self.mins: list[list[float]] = []
        self.sizes: list[int] = []
        self._chunk(fronts)

    def _chunk(self, fronts: Sequence[Any]) -> None:
        """The chunks of every class (`fronts`: their entries)."""
        spans, kinds = self.spans, self.kinds
        for a in range(0, len(spans), CHUNK):
            self.cuts.append(fronts[a])
            self.mins.append(_least(spans[a:a + CHUNK], kinds[a:a + CHUNK]))
            self.sizes.append(min(CHUNK, len(spans) - a))

    def _of(self, front: Any) -> int:
        return max(0, bisect_right(self.cuts, front) - 1)

    def insert(self, at: int, front: Any, g: "Group") -> None:
        """Class `g` joins the block at place `at` (its entry `front`)."""
        s, k = span(g.jobs[0], self.learned), kind(g.plain[1])     # type: ignore[index]
        self.spans.insert(at, s)
        self.kinds.insert(at, k)
        if not self.mins:
            self.cuts.append(front)
            self.mins.append(_least([s], [k]))
            self.sizes.append(1)
            return
        c = self._of(front)
        self.sizes[c] += 1
        _fold(self.mins[c], [s], [k])

    def remove(self, at: int) -> None:
        del self.spans[at], self.kinds[at]

    def prepend(self, groups: "list[Group]", fronts: Sequence[Any]) -> None:
        """Classes `groups` join the block before its first (`fronts`: the block's entries now, theirs first):
        into chunk 0, or every chunk made again where that one would hold over two chunks' worth."""
        spans, kinds = _timed(groups, self.learned)
        self.spans[:0], self.kinds[:0] = spans, kinds
        if not self.mins or len(groups) + self.sizes[0] > 2 * CHUNK:
            self.cuts, self.mins, self.sizes = [], [], []
            self._chunk(fronts)
            return
        self.sizes[0] += len(groups)
        _fold(self.mins[0], spans, kinds)

    def extend(self, more: "Spans | None", groups: "list[Group]", fronts: Sequence[Any]) -> None:
        """Classes `groups` (their entries `fronts`; `more`: their Spans, if any) join the block after its last:
        into its last chunk while that stays within CHUNK (a family's new classes come a few a pass)."""
        if self.sizes and self.sizes[-1] + len(groups) <= CHUNK:
            spans, kinds = (more.spans, more.kinds) if more is not None and more.learned == self.learned \
                else _timed(groups, self.learned)
            self.spans += spans
            self.kinds += kinds
            self.sizes[-1] += len(groups)
            _fold(self.mins[-1], spans, kinds)
            return
        if more is None or more.learned != self.learned:
            more = Spans(groups, fronts, self.learned)
        self.spans += more.spans
        self.kinds += more.kinds
        self.cuts += more.cuts
        self.mins += more.mins
        self.sizes += more.sizes

    def first(self, lo: int, fronts: Sequence[Any], bounds: list[float], now: float) -> int:
        """The first place from `lo` on whose class has now + span within `bounds[its kind]` (len: none)."""
        spans, kinds, cuts, mins = self.spans, self.kinds, self.cuts, self.mins
        n = len(spans)
        ks = [k for k, bound in enumerate(bounds) if bound != _NEVER]
        if not ks or lo >= n:
            return n
        c, pos, last = self._of(fronts[lo]), lo, len(cuts) - 1
        while True:
            end = n if c == last else bisect_left(fronts, cuts[c + 1], pos)
            m = mins[c]
            if any(k < len(m) and now + m[k] <= bounds[k] for k in ks):
                ok = map(le, map(add, spans[pos:end], repeat(now)), map(bounds.__getitem__, kinds[pos:end]))
                hit = next(compress(count(pos), ok), None)
                if hit is not None:
                    return hit
                if pos == 0 or c and fronts[pos - 1] < cuts[c]:      # (the whole chunk read: exact again)
                    mins[c] = _least(spans[pos:end], kinds[pos:end])
            if c == last:
                return n
            pos, c = end, c + 1


def _timed(groups: "list[Group]", learned: bool) -> tuple[list[float], list[int]]:
    return [span(g.jobs[0], learned) for g in groups], [kind(g.plain[1]) for g in groups]     # type: ignore[index]


def _least(spans: list[float], kinds: list[int]) -> list[float]:
    """The shortest span of each kind (nan: none)."""
    m = [_NONE] * len(KINDS)
    _fold(m, spans, kinds)
    return m


def _fold(m: list[float], spans: list[float], kinds: list[int]) -> None:
    """Into a chunk's shortest spans `m`, those of more of its classes."""
    if len(m) < len(KINDS):
        m += [_NONE] * (len(KINDS) - len(m))
    for s, k in zip(spans, kinds):
        if not m[k] <= s:       # (nan: the first of its kind)
            m[k] = s
