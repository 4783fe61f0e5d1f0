"""Whether a pass may take a block of passed classes (blocks.py), and up to where: `holds` asks each of its
inputs once (each who's caps, each shape's "no room" or Reservation verdict, the latter read off the shape's
shortest class: a heap kept on the block); where it does not hold, `first_unknown` finds the first class from
where the pass reaches the block whose verdict the pass does not know now, which the pass then judges one by
one while the block stays whole. In the drain of a deep queue that class is one that can backfill, thousands
of classes in, pass after pass: cutting the block there and joining it again cost the depth of the queue a
pass (issue 41); without caps it is found by the block's spans (spans.py). A block may then hold classes the
pass reached (judged one by one: before `lo`), so what `dead` keeps for a shape reads no job's own start
(settle.dead: `_no_room(own=False)`).

tests/property/test_plan_blocks.py and test_sim_through.py hold the passes that take blocks to whole passes.
"""
from collections.abc import Callable
from heapq import heapify, heappop, heappush, heapreplace
from typing import TYPE_CHECKING

from ..jobs.model import Job
from ..jobs.plan import Verdict
from .backfill import span
from .blocks import Block, Shape, Who
from .delays import RESERVED
from .spans import KINDS

if TYPE_CHECKING:
    from .queue import Group
    from .settle import Dead

_NEVER = float("-inf")


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
        for who in b.whos:
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
        verdict = dead(b.one[shape])
        if not verdict:
            return False        # (so would the shortest's be: the verdict reads only its span)
        if verdict is not RESERVED or now + got[1] > d.bounds[shape]:
            return True
    return bool(dead(_least(b, shape, gs, learned)))


def first_unknown(b: Block, lo: int, d: "Dead", passes: Callable[[Job], bool], dead: Callable[[Job], Verdict | None],
                  now: float, learned: bool, capped: bool = True, timed: bool = False) -> int:
    """Of a block that `holds` did not pass, reached at its class `lo`: the place of the first class from
    there whose `dead` verdict is not known now (len: none), as settle._dead_class class by class would find
    it (caps kept in `d.open`, "no room" in `d.verdicts`). Where no cap is asked and the pass keeps
    timelines (`timed`), that is the first class whose shape has room and which would not delay the
    reservation (settle.dead: now + its span within the shape's bound, delays.bound), found over the
    block's spans and shapes in C (`_by_spans`); else class by class."""
    if timed and not capped:
        return _by_spans(b, lo, d, dead, now, learned)
    return _scan(b, lo, d, passes, dead, now, learned, capped)


def _scan(b: Block, lo: int, d: "Dead", passes: Callable[[Job], bool], dead: Callable[[Job], Verdict | None],
          now: float, learned: bool, capped: bool) -> int:
    """first_unknown class by class, each shape passed with Reservation asked once: a later class of it
    is past its bound (delays.bound) by its span alone."""
    bounds: dict[Shape, float] = {}     # shape -> its bound, of the shapes whose classes took Reservation
    groups = b.groups
    for k in range(lo, len(groups)):
        g = groups[k]
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


def _by_spans(b: Block, lo: int, d: "Dead", dead: Callable[[Job], Verdict | None], now: float, learned: bool
              ) -> int:
    """first_unknown without caps: each shape's bound (-inf for a shape without room: "no room" for all),
    then the first class from `lo` on with now + span within its shape's, a scan in C of the block's
    `spans` and `kinds` (~40 ns a class; class by class in Python ~10 times that, where a deep block's
    first class that can backfill is thousands in)."""
    spans = b.timed(learned)
    bounds = [_NEVER] * len(KINDS)
    for shape, job in b.one.items():
        if not d.verdicts.get(shape):
            got = dead(job)
            if got is None or got is RESERVED:      # room now: its bound was found (delays.bound)
                bounds[KINDS[shape]] = d.bounds[shape]
                d.reserved[shape] = job     # (as _scan: those past it pass with Reservation)
    return spans.first(lo, b.fronts, bounds, now)


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
