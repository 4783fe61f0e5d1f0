"""The end of a pass that can change nothing more (classes._Walk): once no reservation is left to
make, no class judged on its own is left, and no request left may start now or try to preempt, the
state of the pass is final, and every class left takes one verdict for all its jobs, in any order.
On a full cluster that is most of the classes of a pass.

The verdict of such a class is read as `_Pass._verdict` would reach it in that state: a gate
(hold, begin, retry backoff, dependency) is judged as the walk judges it; else a cap
(`Usage.blocked`), else the "no room" verdict of its request shape (`_Pass._no_room`: no node has
room, it may not preempt, it gets no reservation). tests/property/test_plan_classes.py checks the
plans against the per-job pass.

Should a gate's verdict change the state of a settled pass after all (its invariant broken: a bug),
the pass is not trusted: `Unsettled` is raised, plan() logs it and plans the snapshot again with a
whole pass (`guarded`), rather than fail the scheduler's tick or hand out a plan nobody checked."""
import functools
import logging
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..jobs.model import Job
from ..jobs.plan import Pending, Verdict
from . import blocks, delays, kinds
from .queue import RECENT, Front, Group, Key, Queue

if TYPE_CHECKING:       # the walk is classes.py's, which imports this module
    from .classes import _Walk

_DEFAULTS: tuple[Any, ...] = tuple(f.default for f in fields(Pending))
DELAYS, RESERVED = delays.DELAYS, delays.RESERVED
_FOREVER = float("inf")
_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
# The walk asks whether the pass has settled after this many turns without a change of state, then
# after four times as many, and so on: an ask that finds it unsettled costs a look per class left.
SETTLE_CHECK = 64


class Unsettled(Exception):
    """A pass taken for settled changed its state: its shortcut verdicts may be wrong."""


def guarded(plan: F) -> F:
    """`plan` (which takes `settles=`), planned again with `settles=False` (a whole pass, no
    settled shortcut) when a settled pass broke its invariant; the break is logged."""
    @functools.wraps(plan)
    def planned(*a: Any, **kw: Any) -> Any:
        try:
            return plan(*a, **kw)
        except Unsettled as e:
            _log.warning("plan(): %s; planned again as a whole pass", e)
            return plan(*a, **{**kw, "settles": False})
    return cast(F, planned)


def done(w: "_Walk", version: tuple[int, ...]) -> bool:
    """Before each turn of the walk `w`: whether the pass has settled (then every class left has
    taken its verdict: `finish`), asked once `w.check` turns have gone by without a change."""
    if w.since < w.check:
        w.since += 1
        return False
    if settled(w):
        finish(w, version)
        return True
    w.check *= 4
    w.since += 1
    return False


def settled(w: "_Walk") -> bool:
    """Whether no verdict left in the merge of the walk `w` can change the pass state."""
    p, cfg = w.p, w.p.cfg
    if not p.settles or cfg.backfill_depth == 0 or len(p.starts) < cfg.backfill_depth:
        return False
    preempting = cfg.preemption and (p.lowest_victim() is not None or bool(p.usage.guarantees))
    asked: set[tuple[Any, ...]] = set()
    q = w.reached.queue
    if q is not None and not preempting and kinds.OWN not in q.kinds.shapes and all(
            p.free.find(next(iter(gs)).jobs[0])[0] is None for gs in q.kinds.shapes.values()):
        return True     # no class of the queue may start now, so none left may: a look per shape, not per class
    for _, key, jobs, _, k in w.reached.rest():
        if key[0] == "own":
            return False
        # What a fit reads of a job: its shape; a preemption try, its QoS and account too.
        ask = (key[5], key[6], key[7], key[8], key[0], key[1]) if preempting else key[5:9]
        if ask in asked:
            continue
        asked.add(ask)
        job = jobs[k]
        if p.free.find(job)[0] is not None or preempting and p._may_preempt(job):
            return False
    return True


def finish(w: "_Walk", version: tuple[int, ...]) -> None:
    """Every class left in the merge of `w` takes the verdict of its next job for the rest of its jobs
    (`settled`: the state no longer changes); with `quiet`, one without gates gets no run (`passed_runs`)."""
    p, at, quiet = w.p, w.at, w.p.quiet
    now, blocked, runs = p.now, p.usage.blocked, p.runs
    rooms: dict[tuple[int, str, int, int], Verdict] = {}      # request shape -> its "no room" verdict
    w.reached.sweep(w._passes)
    for i, key, jobs, ids, k in list(w.reached.rest()):
        job = jobs[k]
        if i >= 0:
            at[i] = len(jobs)
        if (job.held or job.deps or job.begin is not None and job.begin > now
                or job.eligible_time is not None and job.eligible_time > now):
            if w._judge(job, key, version, k + 1 < len(jobs)) != version:
                raise Unsettled(f"a settled pass changed its state at job {job.id}")
            if k + 1 < len(jobs):
                runs.append((ids[k + 1:], w.cache[key][3]))
            continue
        if quiet:       # a cap or "no room": no earmark, no budget; each run a copy of its class's ids
            continue
        capped = blocked(job)
        shape = (job.gpus, job.gpu_type, job.cpus, job.mem)
        got = cast(Verdict, tuple(capped) + _DEFAULTS[1 + len(capped):]) if capped is not None else rooms.get(shape)
        if got is None:
            why = p._no_room(job)
            got = rooms[shape] = cast(Verdict, tuple(why) + _DEFAULTS[1 + len(why):])
        runs.append((ids[k:], got))
    w.reached.clear()


class Dead:
    """What `dead` found so far in a pass: the "no room" verdict of each request shape (while no room
    came back: Placer.grown), each shape's `_bound` (while no room was taken: Placer.changes), and
    whether the caps pass the jobs of an (account, user, GPUs, CPUs, nodes) (while nothing was admitted:
    Usage.blocked reads nothing else of a job without a throttle)."""
    __slots__ = ("verdicts", "grown", "bounds", "changes", "open", "placed", "used", "reserved", "lost", "recent")

    def __init__(self, queue: Queue | None = None) -> None:
        self.verdicts: dict[tuple[int, str, int, int], Verdict] = {}
        self.bounds: dict[tuple[int, str, int, int], float] = {}
        self.grown, self.changes, self.placed = 0, -1, 0
        # request shape -> a job of it, of the shapes some class was passed with Reservation; and of those,
        # the ones an admission left without room: (its score, their "no room" verdict) (`recall`)
        self.reserved: dict[tuple[int, str, int, int], Job] = {}
        self.lost: dict[tuple[int, str, int, int], tuple[Any, Verdict]] = {}
        self.open: dict[tuple[str, str, int, int, int], bool] = {}
        self.used: list[tuple[blocks.Block, dict[blocks.Shape, Verdict]]] = []     # blocks taken, their verdicts
        self.recent = queue.passes - RECENT if queue is not None else 0     # a cut since is recent (`_join`)


def passes_from(w: "_Walk", src: list[Front], k: int, groups: dict[Key, Group]) -> int:
    """The classes of a family's order `src` (queue.Queue.families) from its k-th on whose `dead`
    verdict the walk `w` knows now, taken one after another; returns the first it does not take. A
    class without gates (hold, begin, retry backoff, dependencies, throttle: Group.plain) is read by
    what `dead` reads of it: its account, user and need (Usage.blocked's answer kept while nothing is
    admitted) and its shape (the "no room" verdict kept while no room comes back); a class judged on
    its own is not taken. With the kept Queue's families (fronts.Reach.kept), runs of plain classes
    are kept as blocks (blocks.py): a block that starts here and whose inputs all pass is taken whole,
    at a look per input; the plain classes taken one by one since the last block join the next block
    taken or become one (`w.dead.used`). The other classes taken are kept in `w.passed` with their
    verdict's park (`w.park_of`). Nothing here changes the state of the pass, so `w.dead`'s stamps
    are checked once (at 10k×50 a pass takes ~3,600 classes here)."""
    n = len(src)
    if k >= n or not (w.frozen or _frozen(w)):
        return k            # neither a plain class nor a gated one passes an unfrozen pass (`dead`)
    p, d = w.p, w.dead
    if d.placed != len(p.places):
        d.open, d.placed = {}, len(p.places)
    if d.grown != p.free.grown:
        d.verdicts, d.grown = {}, p.free.grown
    out, parks, kept = w.passed, w.parks, w.reached.kept
    run: list[Group] = []       # plain classes taken one by one since the last block, and their entries
    fronts: list[Front] = []
    after = False       # whether the last of `d.used` is a block taken here right before `run`: they join
    while k < n:
        _, _, key, g = src[k]
        if kept and (g.block is not None or g.within is not None):     # (else _block_at takes none)
            took = _block_at(w, g, run, fronts)
            if took:
                k += took
                run, fronts = [], []
                if after:
                    _join(d)
                after = True
                continue
        verdict = _dead_class(w, g)
        if verdict is None:
            break
        if kept and g.plain is not None:
            run.append(g)
            fronts.append(src[k])
        else:
            if run:
                _close(d, run, fronts, after)
                run, fronts = [], []
            after = False
            hit = parks.get(id(verdict))
            if hit is None:
                hit = w.park_of(verdict)
            out.append((key[0], key, g, hit))
        k += 1
    if run:
        _close(d, run, fronts, after)
    return k


def _close(d: Dead, run: list[Group], fronts: list[Front], after: bool) -> None:
    """The plain classes taken one by one become a block, joined to the block taken right before them (`after`)."""
    d.used.append((b := blocks.Block(run, fronts), blocks.taken(b, d.verdicts)))
    if after:
        _join(d)


def _join(d: Dead) -> None:
    """The last two blocks taken, one right after the other in their family, become one (the smaller joins
    the larger): else a family's blocks, cut where a pass stops (`_block_at`), only ever split. Not where
    a pass cut lately (queue.RECENT): in the drain the next pass with room there cut them again."""
    (a, _), (b, _) = d.used[-2:]
    if b.groups[0].cut >= d.recent:
        return
    del d.used[-2:]
    if len(a.groups) >= len(b.groups):
        a.extend(b)
    else:
        b.prepend(*blocks.absorb(a))
        a = b
    d.used.append((a, blocks.taken(a, d.verdicts)))


def _block_at(w: "_Walk", g: Group, run: list[Group], fronts: list[Front]) -> int:
    """The walk `w` reaches class `g` taking classes: the number of classes it takes as `g`'s block (0:
    none; `run`, `fronts`: the plain classes taken one by one before it, which join it). Where its blocks
    do not all pass now, it takes those up to the first whose verdict is not known (`g` itself, asked first:
    the walk then stops at it, without `holds`); taking that starts inside a block (at `g`) drops those
    before `g` or, where they are the more, ends the block there (Block.lead)."""
    b = g.block
    if b is None:
        b = g.within
        if b is None or not b.lead(g):
            return 0
    d, u = w.dead, w.p.usage
    if _dead_class(w, g) is None:       # (g leads b: first_unknown's 0 at a look; ~8 % of a deep replay)
        g.cut = w.reached.queue.passes      # type: ignore[union-attr]  # (kept: a Queue's)
        b.cut(0)        # (g leaves the block, the rest stay one)
        return 0
    learned, blocked = w.p.timelines is not None and w.p.timelines.learned, u.blocked
    capped = u.caps
    if not blocks.holds(b, d.open, d.verdicts, lambda j: blocked(j) is None, lambda j: dead(w, j), learned, d,
                        w.p.now, capped):
        # Its classes up to the first whose verdict is not known now are taken (a block of their own); that
        # one leaves it, the walk stops there; the rest stay a block for the walk's next turn in the family.
        k = blocks.first_unknown(b, d, lambda j: blocked(j) is None, lambda j: dead(w, j), w.p.now, learned, capped)
        if k == len(b.groups):      # (holds answers for every class: not reached)
            blocks.kill(b)
            return 0
        b.groups[k].cut = w.reached.queue.passes      # type: ignore[union-attr]  # (kept: a Queue's)
        got = b.cut(k)
        if got is None:
            return 0
        if run:
            got.prepend(run, fronts)
        d.used.append((got, blocks.taken(got, d.verdicts)))
        return k
    took = len(b.groups)
    if run:
        b.prepend(run, fronts)
    d.used.append((b, blocks.taken(b, d.verdicts)))
    return took


def _dead_class(w: "_Walk", g: Group) -> Verdict | None:
    """The `dead` verdict of class `g` now, or None; a plain class's answers kept in `w.dead`."""
    plain = g.plain
    if plain == 0:
        plain = blocks.plain(g)
    if plain is None:
        return None if g.key[0][0] == "own" else dead(w, g.jobs[0])
    d = w.dead
    who, shape = cast(blocks.Plain, plain)
    if w.p.usage.caps:
        open_ = d.open.get(who)
        if open_ is None:
            open_ = d.open[who] = w.p.usage.blocked(g.jobs[0]) is None
        if not open_:
            return None
    return d.verdicts.get(shape) or dead(w, g.jobs[0])


def dead(w: "_Walk", job: Job) -> Verdict | None:
    """The verdict of a job of a class the walk `w` reaches now, where it is known unjudged: "no
    room" for good, as its turn (later, room only shrinks) would find it. So where the pass can no
    longer reserve, preempt or get room back (no earmark or draining preemptor left: `_frozen`), the
    job (not judged on its own: the caller's) meets no gate or cap and its shape fits no node
    (Placer.failed); or Reservation, where its shape has room but it would delay the reservation
    wherever it started (delays.py; an admission before its turn may still take the room: `recall`).
    None: not known."""
    p, now, d = w.p, w.p.now, w.dead
    if not (w.frozen or _frozen(w)) or (job.held or job.deps or job.begin is not None and job.begin > now
                                        or job.eligible_time is not None and job.eligible_time > now):
        return None
    if job.array_throttle:
        if p.usage.blocked(job) is not None:
            return None
    elif p.usage.caps:
        if d.placed != len(p.places):
            d.open, d.placed = {}, len(p.places)
        who = (job.account, job.user, job.gpus, job.cpus, job.nodes)
        passes = d.open.get(who)
        if passes is None:
            passes = d.open[who] = p.usage.blocked(job) is None
        if not passes:
            return None
    if d.grown != p.free.grown:
        d.verdicts, d.grown = {}, p.free.grown
    shape = (g, model, c, m) = (job.gpus, job.gpu_type, job.cpus, job.mem)
    verdict = d.verdicts.get(shape)
    if verdict is None:
        if not any(g >= fg and c >= fc and m >= fm and (not fmodel or fmodel == model)
                   for fg, fmodel, fc, fm in p.free.failed):
            bound = delays.bound(w, job, shape)
            if bound is not None:       # room now: Reservation where the job would delay it (delays.py)
                tl = p.timelines
                if bound == _FOREVER or tl is None or p.now + tl.span(job) <= bound:
                    return None
                d.reserved[shape] = job
                return RESERVED
        why = p._no_room(job)
        verdict = d.verdicts[shape] = cast(Verdict, tuple(why) + _DEFAULTS[1 + len(why):])
    return verdict


def _frozen(w: "_Walk") -> bool:
    """Whether the pass of `w` can no longer reserve, preempt or get room back (then for good)."""
    p, cfg = w.p, w.p.cfg
    w.frozen = (0 < cfg.backfill_depth <= len(p.starts) and not p.earmarked and not p.draining
                and not (cfg.preemption and (p.lowest_victim() is not None or p.usage.guarantees)))
    return w.frozen


def recall(w: "_Walk", placed: Job | None, changed_room: bool) -> None:
    """Park, as reached, the classes `w` passed unreached with their `dead` verdict (classes._Walk._passes)
    that a change may concern, so that `_unpark` applies its rules to them as to any parked class: every
    one where the room stamp moved (never, once frozen); else, after an admission (`placed`), those of
    its array, and those of its account or user if a cap of theirs is near (Usage.tight). A request shape
    passed with Reservation that the admission left without room is noted (`lost`): its jobs whose turn
    comes after the admission get "no room" instead (`passed_runs`), a cut per class at the pass's end."""
    d = w.dead
    if not (w.passed or d.used) or not changed_room and placed is None:
        return
    if placed is not None and d.reserved:
        delays.lose(w, placed)
    acct = user = array = None
    if placed is not None:
        array = placed.array_id
        if w.p.usage.tight(placed.account, placed.user, *w.most):
            acct, user = placed.account, placed.user
        elif array is None and not changed_room:
            return
    used = []
    for b, verdicts in d.used:     # a block some of whose classes the change concerns: one by one
        if changed_room or any(who[0] == acct or who[1] == user for who in b.whos):
            w.passed += blocks.entries_of(b, verdicts, lambda v: w.parks.get(id(v)) or w.park_of(v))
        else:
            used.append((b, verdicts))
    d.used = used
    keep = []
    for entry in w.passed:
        key, group_key, g, hit = entry
        if changed_room or key[1] == acct or key[2] == user or array is not None and key[16] == array:
            i = w.reached.add(group_key)
            if hit[3] is RESERVED:
                hit = delays.reparked(w, i, g)
            if hit is not None:
                w._park(i, key, hit)
        else:
            keep.append(entry)
    w.passed = keep


def passed_runs(w: "_Walk") -> None:
    """The runs of the classes `w` passed unreached: one per verdict, their ids together (a pass on a full
    cluster passes most of its classes; a run each made as many lists and tuples for the collector).
    None for a caller that keeps no reasons (plan's `quiet`, the replay): their verdicts ("no room",
    Reservation) name no earmark and no budget, and no job of a passed class has one (a class of its
    own), so applying them changes no record; made, they cost the depth of the queue every pass."""
    if w.p.quiet:
        return
    by: dict[int, tuple[Verdict, list[int]]] = {}

    def add(verdict: Verdict, ids: list[int]) -> None:
        got = by.get(id(verdict))
        if got is None:
            by[id(verdict)] = (verdict, ids[:])
        else:
            got[1].extend(ids)
    lost = w.dead.lost
    for _, _, g, hit in w.passed:
        verdict, ids = hit[3], g.ids
        if lost and verdict is RESERVED:
            got = delays.cut(w, g)
            if got is not None:
                add(got[1], ids[got[0]:])
                ids = ids[:got[0]]
        add(verdict, ids)
    w.p.runs.extend((ids, verdict) for verdict, ids in by.values())
    blocks.runs(w.dead.used, w.p.runs, lost, lambda b, shape, ids: delays.split(w, b, shape, ids))
