"""plan()'s order over a replay's pending jobs, produced lazily: the first n jobs of a pass without
ranking the whole queue (easy.py's windows over a deep queue).

plan() considers pending jobs by (−priority, submit time, id) (multifactor.py). queue.py says
when that is submit order. With short jobs first (priority.short_job_weight > 0) it is not: then

    priority = constant + age_weight × a + short_job_weight × (1 − a) × scale / (scale + E)

where a = min(wait / age_max, 1), E is the job's expected run time (multifactor.expected_runtime) and
the constant (QoS, fair share, burst terms) is the same for every pending job under queue.py's
conditions (one QoS level, one account or no fair-share weight, no burst tail). The priority falls
as E grows (for any wait: each step of the float sum is monotone in E) and, for one E, rises with
the wait (short_job_weight ≤ age_weight: the age term grows faster than the short term fades), so

- the jobs of one E come in submit order (classes.py relies on the same fact, per request class);
- no job of a set of E's ranks above a job with the set's smallest E and its oldest submit time.

`Runtimes` keeps the jobs by class (E, span: the run backfill counts, queue.Queue.span), each in
submit order, and the classes in buckets of nearby E (a factor 2^(1/4) apart). `merge` pops one
heap of buckets and jobs: a bucket enters under the bound above (its smallest E, its oldest first
job), and is read in submit order (each class's first job joins the heap, the bucket re-enters
under the bound of the rest) only while that bound comes first, so the first n jobs cost the few
classes that could hold them, not a ranking of the queue. The queue keeps
one Runtimes for all its jobs and one per request shape: easy.py's jobs that could start (`fitting`:
some shapes, runs that end by a given time) are drawn from the buckets and classes of those shapes
whose spans end in time, never walking past the others.

The rising-with-the-wait fact holds in floats while the gap it makes between two waits of one E
(age_weight × Δwait / age_max × E / (scale + E) at short_job_weight = age_weight) exceeds the few
ulps of rounding in the sum: E ≥ 1 s (`Runtimes.instant` counts the jobs below; at E = 0 the two
terms sum to a constant and rounding alone would order them) and, at the default weights, waits
more than a few microseconds apart (or equal: then submit time and id decide, as in plan()).
"""
import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import filterfalse, islice
from operator import itemgetter

from ..money import fairshare
from ..multifactor import expected_runtime


class Order:
    """The pending jobs in plan()'s order at one instant, drawn on demand and kept as drawn; but the
    ids in `leave` (the jobs a budget keeps idle: engine `idle`), which `_next` never gives."""

    def __init__(self, jobs: dict, leave=()):
        self.jobs, self.leave = jobs, leave
        self.out: list = []

    def _next(self):
        raise NotImplementedError

    def _draw(self, n: int) -> bool:
        """Whether n jobs pend: the first n drawn."""
        out = self.out
        while len(out) < n:
            j = self._next()
            if j is None:
                return False
            out.append(j)
        return True

    def first(self, n: int) -> list:
        """plan()'s first n jobs (all of them when fewer pend)."""
        self._draw(n)
        return self.out[:n]

    def key(self, job) -> tuple:
        """The job's place in the order, as a sort key."""
        raise NotImplementedError

    def fitting(self, latest: dict, t: float, leave=None):
        """In plan()'s order, the jobs of a shape in `latest` whose run (`Queue.span`) ends by that
        shape's time there: `latest[shape] >= t + span`, but those in the sets `leave` (together a
        superset of the order's own; by default that)."""
        raise NotImplementedError


# `fitting` sorts a shape's jobs that end in time when they are at most this share of its jobs.
FEW_SHARE = 8


class SubmitOrder(Order):
    """The whole queue in submit order (queue.py: accounts_in_submit_order and one_order)."""

    def __init__(self, jobs: dict, fifo: list, keys: dict, leave=(), by_shape=None, shape_fifo=None):
        super().__init__(jobs, leave)
        self.fifo, self.keys, self.by_shape, self.shape_fifo = fifo, keys, by_shape, shape_fifo
        self.ids: Iterator[int] | None = None

    def _draw(self, n: int) -> bool:
        # The ids past those in `leave` in C (itertools), not a call per job: a spent budget's idle
        # jobs are hundreds of the oldest, walked past at every window.
        out = self.out
        if len(out) < n:
            ids = self.ids = ids_but(self.fifo, self.leave) if self.ids is None else self.ids
            out.extend(map(self.jobs.__getitem__, islice(ids, n - len(out))))
        return len(out) >= n

    def key(self, job) -> tuple:
        return (job.submit_time, job.id)

    def fitting(self, latest: dict, t: float, leave=None):
        jobs, keys = self.jobs, self.keys
        leave = (self.leave,) if leave is None else leave
        if isinstance(latest, dict) and self.by_shape is not None:    # (easy._Late: many shapes, asked lazily)
            yield from map(jobs.__getitem__, ids_but(heapq.merge(*self._shaped(latest, t)), *leave))
            return
        for i in ids_but(self.fifo, *leave):    # a spent budget's jobs passed over in C
            s, span = keys[i]
            late = latest.get(s)
            if late is not None and late >= t + span:
                yield jobs[i]

    def _shaped(self, latest: dict, t: float) -> list:
        """Per shape with room, the (submit time, id) of its jobs `fitting` yields, in submit order,
        from the shape's own jobs (Queue.by_shape by span, Queue.shape_fifo in submit order): all of
        them; a prefix by span, sorted, when few of the shape's jobs end in time; else the shape's
        jobs in submit order, filtered lazily (then many fit, and the first are met soon). On a deep
        queue whose room fits only short runs of a few shapes, a walk over the whole queue in submit
        order read all of it for each of easy.py's windows."""
        out: list = []
        keys = self.keys
        for s, late in latest.items():
            mine = self.by_shape.get(s, ()) if late is not None else ()
            n = bisect_right(mine, (late - t, math.inf, math.inf))
            # `late >= t + span` exactly as the walk tests it: the subtraction may round otherwise.
            while n < len(mine) and late >= t + mine[n][0]:
                n += 1
            while n and not late >= t + mine[n - 1][0]:
                n -= 1
            if n == len(mine) and n:
                out.append(self.shape_fifo[s])
            elif n and n * FEW_SHARE <= len(mine):
                out.append(sorted(map(_SUBMITTED, mine[:n])))      # (in C: thousands of jobs)
            elif n:
                out.append(filter(_ends_by(late, t, keys), self.shape_fifo[s]))
        return out


_SUBMITTED = itemgetter(1, 2)


def _ends_by(late: float, t: float, keys: dict) -> Callable[[tuple], bool]:
    """Whether a queued (submit time, id)'s run (`keys`: id -> (shape, span)) ends by `late`, from `t`."""
    return lambda k: late >= t + keys[k[1]][1]


def ids_but(keys: Iterable, *leave, at: int = 1):
    """The ids of sorted `keys` (the id at `at`) but those in the sets `leave`, lazily."""
    ids: Iterator[int] = map(itemgetter(at), keys)
    for ids_out in leave:
        if ids_out:
            ids = filterfalse(ids_out.__contains__, ids)
    return ids


def bucket(e) -> int:
    """The bucket of an expected run time: E's within a factor 2^(1/4); all E < 1 s in one."""
    return int(math.log2(e) * 4) if e >= 1 else -1


class Runtimes:
    """Pending jobs by (expected run time E, span as backfill counts it): each such class's (submit
    time, id) in order; per bucket of E the E's and the spans of its classes (sorted) and each
    class's first job as (submit time, id, E, span, the class's list), oldest first."""

    def __init__(self):
        self.classes: dict = {}
        self.lows: dict[int, list] = {}
        self.spans: dict[int, list] = {}
        self.heads: dict[int, list] = {}
        self.instant = 0            # pending jobs with E < 1 s: no short order (module docstring)

    def __bool__(self) -> bool:
        return bool(self.classes)

    def add(self, job, span: float) -> None:
        e, key = expected_runtime(job), (job.submit_time, job.id)
        self.instant += e < 1
        mine = self.classes.get((e, span))
        b = bucket(e)
        if mine is None:
            mine = self.classes[(e, span)] = [key]
            insort(self.lows.setdefault(b, []), e)
            insort(self.spans.setdefault(b, []), span)
            insort(self.heads.setdefault(b, []), (*key, e, span, mine))
            return
        if key < mine[0]:
            self._head(b, mine[0], (e, span), key, mine)
        insort(mine, key)

    def remove(self, job, span: float) -> None:
        e, key = expected_runtime(job), (job.submit_time, job.id)
        self.instant -= e < 1
        mine = self.classes[(e, span)]
        b = bucket(e)
        at = bisect_left(mine, key)
        del mine[at]
        if at:
            return
        if mine:
            self._head(b, key, (e, span), mine[0], mine)
            return
        del self.classes[(e, span)]
        lows, spans, heads = self.lows[b], self.spans[b], self.heads[b]
        del lows[bisect_left(lows, e)]
        del spans[bisect_left(spans, span)]
        del heads[bisect_left(heads, (*key, e, span))]
        if not lows:
            del self.lows[b], self.spans[b], self.heads[b]

    def _head(self, b: int, old, cls, new, mine: list) -> None:
        heads = self.heads[b]
        del heads[bisect_left(heads, (*old, *cls))]
        insort(heads, (*new, *cls, mine))


def merge(jobs: dict, sources, score, t: float, leave=()):
    """The jobs of `sources`, [(Runtimes, late)], in plan()'s order, but those in `leave`; of a source
    with a `late` (not None) only the classes whose span ends by it (late >= t + span). One heap of
    jobs and buckets: a job's entry is (−priority, submit time, id, its class's list, index, E); a
    bucket's (−bound, submit, −n, Runtimes, bucket, late, index): the bound of its classes from the
    index-th first job on (oldest first), at or before each of their jobs' entries (ids are ≥ 1).
    Popped, it lets that class's first job in and re-enters at the next one, so a bucket is read in
    submit order only as far as its bound comes first. A bucket none of whose spans ends by `late`
    is left out. A class's jobs in `leave` are stepped over in its list, never put on the heap (a
    spent budget's idle jobs: hundreds; the bound holds of the rest as of all)."""
    heap: list = []
    for r, late in sources:
        for b, heads in r.heads.items():
            if late is None or late >= t + r.spans[b][0]:
                heap.append((-score(heads[0][0], r.lows[b][0]), heads[0][0], -1 - len(heap), r, b, late, 0))
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        entry = pop(heap)
        if entry[2] < 0:            # a bucket: its next (fitting) class's first job joins
            _, _, tie, r, b, late, k = entry
            heads = r.heads[b]
            live = _first_live(heads, k, late, t, leave)
            if live is not None:     # (classes all left out: the next one, no heap round)
                k, s, i, mine, j, e = live
                push(heap, (-score(s, e), s, i, mine, j, e))
            else:
                k = len(heads)
            if k < len(heads):
                s = heads[k][0]
                push(heap, (-score(s, r.lows[b][0]), s, tie, r, b, late, k))
            continue
        _, _, i, mine, k, e = entry
        k += 1
        n = len(mine)
        while k < n and mine[k][1] in leave:
            k += 1
        if k < n:
            s, nxt = mine[k]
            push(heap, (-score(s, e), s, nxt, mine, k, e))
        yield jobs[i]


def _first_live(heads: list, k: int, late, t: float, leave):
    """From heads[k] of a bucket, the first class whose span ends by `late` (None: any) with a job
    not in `leave`: (the index past its head, that job's submit time and id, the class's list, the
    job's index there, E); None when there is none. A spent budget's idle classes come in runs: a
    class whose first job is left out is looked into only when it has more jobs. (Plain loops: for
    the runs met here, a few to a few hundred keys, cheaper than chains of iterators in C.)"""
    for m in range(k, len(heads)):
        s, i, e, span, mine = heads[m]
        if late is not None and late < t + span:
            continue
        if not leave or i not in leave:
            return m + 1, s, i, mine, 0, e
        if len(mine) > 1:
            j = _kept(mine, 1, leave)
            if j is not None:
                return m + 1, mine[j][0], mine[j][1], mine, j, e
    return None


def _kept(keys: list, k: int, leave):
    """The first index from k of sorted (…, id) `keys` whose id is not in `leave`, else None."""
    for j in range(k, len(keys)):
        if keys[j][1] not in leave:
            return j
    return None


class ShortOrder(Order):
    """Short jobs first, with aging (module docstring), drawn by `merge`. `shaped`: the pending
    jobs' Runtimes per request shape, for `fitting`."""

    def __init__(self, jobs: dict, runtimes: Runtimes, shaped: dict, cfg, now: float, usage: dict, leave=()):
        super().__init__(jobs, leave)
        self.shaped, self.now = shaped, now
        some = next(iter(jobs.values()), None)     # whose constant terms every pending job shares
        self.score = scorer(cfg, now, usage, some.qos if some else "", some.account if some else "")
        self.drawn = merge(jobs, [(runtimes, None)], self.score, now, leave)

    def _next(self):
        return next(self.drawn, None)

    def key(self, job) -> tuple:
        return (-self.score(job.submit_time, expected_runtime(job)), job.submit_time, job.id)

    def fitting(self, latest: dict, t: float, leave=None):
        if leave is None:
            leave = self.leave
        else:
            sets = [ids for ids in leave if ids]
            leave = sets[0] if len(sets) == 1 else set().union(*sets)
        return merge(self.jobs, [(self.shaped[s], late) for s, late in latest.items() if s in self.shaped],
                     self.score, t, leave)


def scorer(cfg, now: float, usage: dict, qos_name: str, account: str):
    """priority(submit time, E) for the pending jobs of one QoS level and account, none a burst's
    tail: multifactor.ordered's sum, term by term in the same order (so the same floats), for a job
    of QoS `qos_name` and `account`."""
    w = cfg.priority
    qw, aw, fw, sw = w.qos_weight, w.age_weight, w.fairshare_weight, w.short_job_weight
    qos = {q.name: q.priority * qw for q in cfg.qos}.get(qos_name, 0.0)
    fs = fairshare.factors(usage, {a.name: a.share for a in cfg.accounts}) if fw else {}
    share = fw * fs[account] if account in fs else fw
    per_s = aw / (w.age_max or 1)
    age_max, scale = w.age_max or 1, w.short_job_scale or 1

    def score(submit: float, e) -> float:
        age = now - submit
        # The burst term is 0.0 (no tail): subtracting it changes no float.
        s = qos + (aw if age * per_s >= aw else max(age, 0.0) * per_s) + share
        if sw:
            fade = 1.0 - min(max(age, 0.0) / age_max, 1.0)
            s += sw * (fade * scale / (scale + e) if fade > 0 else 0.0)
        return s
    return score
