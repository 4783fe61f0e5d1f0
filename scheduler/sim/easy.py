"""A backfill pass (backfill_depth ≥ 1) given only the head of the queue, when that provably decides
the whole pass. Without it a replay of a deep queue gives plan() every pending job at every instant.

When plan()'s order of the whole queue can be drawn without a pass (queue.py `in_one_order`: submit
order — fifo weights, no burst tail, one QoS level, fair share off or one account — or, under the
same conditions, short jobs first by wait and expected run time, order.py) and
no gate but capacity applies (engine `ungated`, nothing timed, draining or preemptible), a pass over
the queue's first n jobs W (in that order) decides the same as the pass over all of it if every
later job is a no-op there. A later job J does nothing when

1. it cannot reserve: W's pass already made `backfill_depth` reservations (plan() makes no more), and
2. it cannot start: in the state W's pass ends in — room R' after W's admissions, and the
   reservations — no node has room for J's shape now that J's run also leaves every reservation
   there whole (backfill.Timelines.fits_now). Room only shrinks along a pass and reservations do not
   move, so a J that cannot start in that final state cannot start at its own turn either.

The jobs are added in rounds, each round's first few (in queue order) that could start in the state
the previous round's pass ends in. A job J left out but before some added job C was checked against
the round that added the first added job after J; every job added before that round comes before J,
so at J's turn in the whole pass room and reservations are at most what that round saw. The first
call's own extras are such a round on the state before the pass (room now, no reservation): the
first jobs after the head whose request fits some node's room now, which every job between them
does not; that call is kept only when the head itself made every reservation (`_reserved_by`).
With budgets, the jobs for which a head's admissions leave no budget room (idle.py `held_after`)
are pended for it at their turn and do nothing else (a budget-broke job does not reserve): once they
are all the rest of the queue, the head's pass decides. A head whose first job is charged to a budget
that may not admit it, or whose room it leaves too small for any other of its jobs, starts at one
job: a spent budget admits about one a pass, and that admission prices out the rest; otherwise the
head takes the unbudgeted windows.

Condition 2 is checked per request shape on the job of that shape with the shortest run outside W
as backfill counts it (`Queue.span`: the time limit, or under estimate.backfill the learned run
time; a longer run of the same shape only crosses more reservations), and per node on the free
room at each reservation's start, just as `Timelines._fits` checks it. The check errs only towards
"may start" (then W is widened, up to the whole queue): never a wrong plan. GPU models: nodes with
at most one model each (else the engine does not use this).
"""
import math
from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import accumulate

from ..policy.backfill import _expected_end
from .order import SubmitOrder

WINDOW = 4
# Shapes in the queue past which candidates first tries the walk in order (`_many`): with fewer, the
# look at each fitting shape costs less than the walk's set-up (a homogeneous trace: ~10 % more CPU).
MANY_SHAPES = 64
# A shallow queue: one pass over all of it costs less than the head's pass and the candidates' one.
MIN_QUEUE = 64


def single_model(nodes) -> bool:
    return all(len({g.model for g in n.gpus}) <= 1 for n in nodes)


def plan(sim, t: float):
    """The Plan of the pass over the whole queue, computed from the jobs that decide it: a head of the
    queue that makes every reservation, and the later jobs that could start in the state it leaves."""
    q, depth, calls = sim.queue, sim.cfg.backfill_depth, sim.calls
    # The jobs a budget keeps idle (engine `idle`) do nothing in the pass: left out like any no-op.
    idle = sim.idle
    size = len(q) - len(idle)
    usage = sim._usage(t)
    order = q.order(t, usage, idle)
    first = order.first
    head = first(WINDOW)
    # A first job charged to a budget that may have room for it alone (idle.py `room_to_spare`): its
    # admission prices out the jobs after it (below), and a window of its own decides.
    charged = sim.budget_idle is not None and q.charged(first(1)[0]) and not sim.budget_idle.room_to_spare(first(1)[0])
    if not charged:
        # The first call also takes the first jobs after the head that fit some node's room now (before
        # any admission or reservation, so every job before them in the queue fits nowhere and can do
        # nothing in this pass): most passes are then decided by that one call.
        decided = head + candidates(sim, t, _NOTHING, head, WINDOW, order)
        p = sim._call(t, decided)
    if charged or not _reserved_by(p, head, depth) and len(decided) < size:
        n, spent = (1 if charged else WINDOW), frozenset()     # type: tuple[int, frozenset | set]
        while True:
            head = q.order(t, usage, idle | spent).first(n) if spent else first(n)     # spent: budgets
            p = sim._call(t, head)
            if len(head) + len(spent) >= size or len(p.starts) >= depth:
                break
            n *= 4
            if depth == 1:
                # Jobs its admissions leave without budget room: at their turn, before the one
                # reservation is made, each is quoted and pended for its budget, fit or not
                # (policy/__init__.py `_blocked`), and does nothing else: left out, counted held.
                spent = _spent_by(sim, p, head, keep_held=False)
                if len(spent) + sum(1 for j in head if j.id not in spent) >= size:
                    break        # and every other job is among them: this pass decides
        if spent:
            fresh = spent.difference(sim.budget_held)     # (those counted at an earlier pass are)
            sim.budget_held.update(before(fresh, sim.queue.jobs, p.starts[0].job_id if p.starts else None, order.key))
        decided = head
    # The later jobs that could start, a few at a time in the queue's order: usually the first of
    # them fill the room the head left, and the pass over head + those shows that the rest cannot.
    # A job the head's admissions leave without budget room (`gone`) is pended for its budget at
    # its turn and does nothing else: one that could start is only counted held (`marks`), as the
    # whole pass, which quotes it there, would have it.
    p = _widen(sim, t, p, decided, size, order, _spent_by(sim, p, head))
    sim.calls = calls + 1             # however many calls it took, it is one pass (the report counts passes)
    return p


def _widen(sim, t: float, p, decided, size: int, order, gone):
    """The pass `p` over `decided` widened by the jobs that could start, k at a time, until none is
    left; the jobs counted held on the way (`gone`, and those the last pass prices out) into
    `sim.budget_held`."""
    k, marks = WINDOW, set()             # type: int, set[int]
    known = gone & sim.budget_held       # (marked again, they change nothing: not walked)
    passed = (sim.idle, known)           # (not their union: thousands of ids, mostly not walked)
    # every job outside the pass among them (a spent budget's queue): no candidate, nothing to mark
    rest = size - len(decided) - len(known.difference(j.id for j in decided))
    while rest > 0 and len(decided) < size:
        # (jobs the admissions before them price out: held only as the last pass has them)
        priced_out: set[int] = set()
        more = candidates(sim, t, p, decided, k, order, gone, marks, passed, _priced(sim, p, order), priced_out)
        if not more:
            marks |= priced_out
            break
        decided = decided + more
        p = sim._call(t, decided)
        k *= 4
    sim.budget_held.update(marks)
    return p


def _priced(sim, p, order):
    """A test of a queued job outside the pass `p`: whether the admissions of p's jobs before it in
    plan()'s `order` leave its budget no room for it (idle.py `priced_out`). Of the last pass,
    which decides those jobs as the whole pass does, such a job is pended for its budget at its turn
    and does nothing else; of an earlier one, a wider pass may decide the jobs before it otherwise:
    it is then only not taken yet. None: nothing to test."""
    pk = sim.budget_idle
    if pk is None or not p.places:
        return None
    jobs, per = sim.queue.jobs, {}          # type: tuple[dict, dict]
    for pl in p.places:
        for name, used in pk.takes(pl.commit):
            per.setdefault(name, []).append((order.key(jobs[pl.job_id]), used))
    sums = {}                               # budget -> (keys in order, what the admissions up to each used)
    for name, got in per.items():
        got.sort()
        sums[name] = ([key for key, _ in got], list(accumulate(used for _, used in got)))

    def priced(job) -> bool:
        k = pk.key.get(job.id)
        if k is None or k[0] not in sums:
            return False
        keys, used = sums[k[0]]
        i = bisect_left(keys, order.key(job))
        return i > 0 and pk.priced_out(job.id, used[i - 1])
    return priced if sums else None


def _spent_by(sim, p, head, keep_held: bool = True) -> frozenset | set:
    """The queued jobs for which the budget has no room once the admissions of `head` (a head of the
    queue) are in: those after it, and with `keep_held=False` those of it not admitted too."""
    if sim.budget_idle is None or not sim.queue.budgeted:
        return frozenset()
    ids = {j.id for j in head}
    placed = [pl for pl in p.places if pl.job_id in ids]
    return sim.budget_idle.held_after(placed) - (ids if keep_held else {pl.job_id for pl in placed})


class _Nothing:
    """A pass that admitted and reserved nothing: candidates() then reads the room as it is now."""
    places = starts = ()


_NOTHING = _Nothing()


def _reserved_by(p, head, depth: int) -> bool:
    """Whether the pass made every reservation it may, all of them for jobs of `head` (the queue's
    first jobs: no job outside the pass comes before them)."""
    ids = {j.id for j in head}
    return len(p.starts) >= depth and all(st.job_id in ids for st in p.starts)


def candidates(sim, t: float, p, head, k: int, order, gone=frozenset(), marks=None, passed=None, priced=None,
               priced_out=None) -> list:
    """The first `k` jobs outside `head`, in plan()'s `order`, that could start in the state its pass
    `p` ends in (above): for each request shape, those with a run (`Queue.span`) short enough to
    leave every reservation whole on some node with room for the shape. Those in `gone` are not
    taken but put in `marks`. `passed`: the sets of the idle jobs and of those of `gone` counted held
    already, not walked (marked again, they would change nothing); by default the idle ones. Those
    `priced` (`_priced`) says p's admissions price out are not taken but put in `priced_out`."""
    inside, idle = {j.id for j in head}, sim.idle       # (the idle set not copied: hundreds of ids)
    room = _room_after(sim, p)
    latest: dict = {}                 # shape -> the latest first-crossed reservation over its nodes (inf: none)
    ok: dict = {}                     # shape -> how many of its jobs (roughly) could start
    by_shape = sim.queue.by_shape
    many = (_many(sim, t, p, room, inside, k)
            if sim.budget_idle is None and isinstance(order, SubmitOrder) and len(by_shape) > MANY_SHAPES else None)
    fit = {} if many is not None else _fitting_shapes(sim, t, p, room)
    points = _reserved_points(sim, t, p) if fit else {}
    for s, nodes in fit.items():
        keyed = by_shape[s]
        first = None
        for span, _, jid in keyed:       # (a loop, not a generator: past a spent budget's idle jobs)
            if jid not in inside and jid not in idle:
                first = span
                break
        if first is None:
            continue
        if nodes is None:                # room on a node without reservations: every one of its jobs
            latest[s], ok[s] = math.inf, len(keyed)
            continue
        # Per node with room for the shape, the first reservation it would cross; a job may start
        # when some node crosses none before its end (Timelines._fits on the reservation points):
        # when the latest of those is at or past t + its span.
        late = max(min((at for at, f in points.get(name, ()) if not _covers(f, s, sim.model[name])), default=math.inf)
                   for name in nodes)
        if late >= t + first:
            latest[s] = late
            ok[s] = bisect_right(keyed, (late - t, math.inf, math.inf))
    if many is not None:
        latest = many
    elif not ok:
        return []
    elif sum(ok.values()) <= 4 * k:
        return _shortest(sim, t, latest, inside, gone, marks, order, priced, priced_out)[:k]
    out = []
    for j in order.fitting(latest, t, passed):     # many: the first of them in plan()'s order
        if j.id not in inside and j.id not in idle:
            if j.id in gone:
                marks.add(j.id)
                continue
            if priced is not None and priced(j):
                priced_out.add(j.id)
                continue
            out.append(j)
            if len(out) == k:
                break
    return out


def _many(sim, t: float, p, room: dict, inside, k: int):
    """Without budgets and in submit order: where the shapes that nodes without reservations have room
    for already hold more than 4k jobs (counted as candidates' `ok` counts them), `candidates`
    walks plan()'s order (the same first k as by the shape index), asking each shape's reservation
    crossing only as the walk meets it (`_Late`); else None."""
    reserved = {st.node for st in p.starts}
    seen, count, by_shape = set(), 0, sim.queue.by_shape
    for name, (c, m, slots, g) in room.items():
        if slots < 1 or name in reserved:
            continue
        model = sim.model[name]
        for s in sim.queue.shapes.within(c, m, lambda gpus, kind, model=model, g=g: (not kind or kind == model)
                                         and g >= gpus):
            if s not in seen:
                seen.add(s)
                keyed = by_shape[s]
                # as candidates counts a shape's jobs (ok): all of them, once one is outside the pass
                if any(jid not in inside for _, _, jid in keyed):
                    count += len(keyed)
                if count > 4 * k:
                    return _Late(sim, t, p, room, reserved)
    return None


class _Late:
    """shape -> the latest first-crossed reservation over the nodes with room for it (inf: a node
    without reservations has room; None: no node has), as `candidates` computes it, on demand."""

    def __init__(self, sim, t: float, p, room: dict, reserved: set):
        self.sim, self.t, self.p, self.room, self.reserved = sim, t, p, room, reserved
        self.points: dict | None = None
        self.memo: dict = {}

    def get(self, s):
        if s not in self.memo:
            sim = self.sim
            nodes = [name for name, free in self.room.items() if _covers(free, s, sim.model[name])]
            if not nodes:
                self.memo[s] = None
            elif any(name not in self.reserved for name in nodes):
                self.memo[s] = math.inf
            else:
                if self.points is None:
                    self.points = _reserved_points(sim, self.t, self.p)
                self.memo[s] = max(min((at for at, f in self.points.get(name, ()) if not _covers(f, s, sim.model[name])),
                                       default=math.inf) for name in nodes)
        return self.memo[s]


def _fitting_shapes(sim, t: float, p, room: dict) -> dict:
    """The shapes some node has room for (room.Shapes.within), not every shape of a deep queue of
    heterogeneous requests (about one per job): shape -> None where a node without a reservation
    has room (nothing to cross), else the nodes with room (each with reservations)."""
    fit: dict = {}
    reserved = {st.node for st in p.starts}
    for name, (c, m, slots, g) in room.items():
        if slots < 1:
            continue
        model = sim.model[name]
        for s in sim.queue.shapes.within(c, m, lambda gpus, kind, model=model, g=g: (not kind or kind == model)
                                         and g >= gpus):
            if name not in reserved:
                fit[s] = None
            elif s not in fit:
                fit[s] = [name]
            elif fit[s] is not None:
                fit[s].append(name)
    return fit


def _shortest(sim, t: float, latest: dict, inside, gone, marks, order, priced=None, priced_out=None) -> list:
    """Few candidates: taken from each shape's shortest spans (a longer one only crosses more
    reservations), in plan()'s order."""
    jobs, out = sim.queue.jobs, []
    for s, late in latest.items():
        for span, _, jid in sim.queue.by_shape[s]:
            if not late >= t + span:
                break
            if jid in gone:
                marks.add(jid)
            elif jid not in inside and jid not in sim.idle:
                if priced is not None and priced(jobs[jid]):
                    priced_out.add(jid)
                else:
                    out.append(jobs[jid])
    out.sort(key=order.key)
    return out


def _covers(free, s, model) -> bool:
    gpus, gpu_type, cpus, mem = s
    f_cpus, f_mem, f_slots, f_gpus = free
    return (f_slots >= 1 and f_cpus >= cpus and f_mem >= mem
            and (not gpus or ((not gpu_type or gpu_type == model) and f_gpus >= gpus)))


def _room_after(sim, p) -> dict:
    """Free (cpus, mem, slots, GPUs) of every node once the pass's admissions are in."""
    room = {name: (f.cpus, f.mem, f.slots, len(f.gpus)) for name, f in sim.standing.placer.free.items()}
    jobs = sim.queue.jobs
    for pl in p.places:
        j = jobs[pl.job_id]
        c, m, sl, g = room[pl.node]
        room[pl.node] = (c - j.cpus, m - j.mem, sl - 1, g - len(pl.gpus))
    return room


def _reserved_points(sim, t: float, p) -> dict:
    """node -> [(start of a reservation there, free room at that instant as Timelines counts it)]."""
    jobs, span = sim.queue.jobs, sim.queue.span
    allocs: dict = {}
    for j in sim.running.values():
        allocs.setdefault(j.node, []).append((t, _expected_end(j, t, sim.cfg), j.cpus, j.mem, len(j.gpu_uuids)))
    for pl in p.places:
        j = jobs[pl.job_id]
        allocs.setdefault(pl.node, []).append((t, t + span(j), j.cpus, j.mem, len(pl.gpus)))
    for st in p.starts:
        j = jobs[st.job_id]
        allocs.setdefault(st.node, []).append((st.at, st.at + span(j), j.cpus, j.mem, j.gpus))
    out: dict = {}
    for name in {st.node for st in p.starts}:
        node = sim.node_by_name[name]
        for at in sorted({a[0] for a in allocs[name] if a[0] > t}):
            active = [a for a in allocs[name] if a[0] <= at < a[1]]
            used: Counter = Counter()
            for a in active:
                used.update(cpus=a[2], mem=a[3], gpus=a[4])
            out.setdefault(name, []).append((at, (node.cpus - used["cpus"], node.mem - used["mem"],
                                                      node.slots - len(active), len(node.gpus) - used["gpus"])))
    return out


def before(ids, jobs, job_id, key) -> list:
    """Those of `ids` that come before the job `job_id` in the order whose sort key `key` gives
    (order.py); all of them without one."""
    if job_id is None:
        return list(ids)
    at = key(jobs[job_id])
    return [i for i in ids if key(jobs[i]) < at]
