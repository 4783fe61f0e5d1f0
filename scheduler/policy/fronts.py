"""Which classes a pass's class walk (classes._Walk) has reached: it scores a class's next job
only once the class may come next, not every class of the queue at the start of every pass.

The kept Queue (queue.py) keeps each family's classes (QoS, account, burst flag; the QoS and the
account only where their weights are not 0: `apart`) in the order of their first jobs, which is their priority order at any time when short-jobs-first is off
(multifactor.scorer: within a family only the age term differs, and it only grows with the wait;
ties go by submit time and id, as the order does). So the merge needs, of each family, only the
first class it has not reached: none after it can come before it. Once the walk first takes a
family's front class from the heap, the family's next class joins the heap. A pass that settles
(settle.py) reads the classes left, reached or not, through `rest`.

With short-jobs-first on, a class's order within its family moves with the time: a shorter class
passes a longer one that came first. The Queue then splits each family by a floor of its classes'
expected run time (queue.family, multifactor.runtime_floor: run times within ~19 %), and a family
takes part in the merge under a bound (multifactor.bounder): the priority of a job of its floor's
run time submitted when its first class not reached yet was, which no class left in it can pass
(the short-job term falls as the run time grows, the sum rises with the wait). When the walk would
take a bound (it comes first), the family's next class is reached with its own score and the family
goes back under the bound of the rest: the walk takes classes in the very order of the whole pass
(the bounds never come first when the walk takes a class), scoring a class only once some class of
its family may come next, not every class of the queue at the start of every pass.
"""
import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterator
from math import inf
from typing import cast

from ..jobs.model import Job
from ..multifactor import Bounder, Score, bounder
from ..settings.config import Config
from ..settings.sections import Priority
from .queue import Front, Group, Key, Queue

# How many classes past its answer at the last pass `kept_young` steps before it searches afresh.
AHEAD = 8

# settle.passes_from, as the walk asks it: where the run of a family's classes it takes unreached ends
Passes = Callable[[list[Front], int, dict[Key, Group]], int]
# multifactor.bounder's bound: (QoS, account, burst flag, submit time, id, run time floor) -> Score, and
# the exact Score of a job that waited its full age (Bounder.tied)
Bound = Bounder


def runtimes(w: Priority) -> bool:
    """Whether the families are split by run time and merged under bounds: the short-job term on, at
    most the age weight (else no bound holds: a job could rank lower the longer it waits)."""
    return 0 < w.short_job_weight <= w.age_weight


def apart(w: Priority) -> tuple[bool, bool]:
    """Whether the QoS and the account part families (queue.family). A term whose weight is 0 adds
    exactly 0.0 to every job's score (multifactor.scorer: a QoS level times qos_weight; without a
    fair-share weight no account factor), and the bounds alike (multifactor.bounder): jobs of any
    QoS (account) then score alike and one family holds them. With the replay's FIFO weights a pass
    merges a family per run-time floor, not one per account and floor."""
    return bool(w.qos_weight), bool(w.fairshare_weight)


def lazy(now: float, usage: dict[str, float], cfg: Config, split: bool = True) -> "bool | Bound":
    """How the walk reaches the classes: by the families' fronts (True), under the bounds of families
    split by run time (`runtimes`: the bound), or every class at the start (False). `split`: whether
    the Queue's families are split by run time; not while every job waited past the short-job term
    (queue.Queue.file): then its families' fronts are their priority order, as without the term."""
    w = cfg.priority
    if runtimes(w):
        return bounder(now, usage, cfg) if split else True
    return not w.short_job_weight and w.age_weight >= 0


def first_young(src: list[Front], lo: int, top: float, bound: Bounder) -> int:
    """The first of a split family's classes `src` from its lo-th on that is not keyed (`top`, a submit
    time `bound.aged` now): the aged ones come first, by submit time (Linear.key), and `aged` only turns
    false along them. Found by comparing the entries in C near the submit time age_max ago, then moved
    to `aged`'s exact answer (its float tests may differ from that cut by a rounding); a search that
    called `aged` at each step was ~5 % of a deep replay's pass (~40 families a pass)."""
    hi = bisect_left(src, ((top, inf),), lo)        # the top-keyed ones end here (an entry sorts by its key first)
    i = bisect_left(src, ((top, bound.now - bound.age_max),), lo, hi)
    aged = bound.aged
    while i > lo and not aged(cast(tuple[float, float], src[i - 1][0])[1]):
        i -= 1
    while i < hi and aged(cast(tuple[float, float], src[i][0])[1]):
        i += 1
    return i


def kept_young(src: list[Front], y: int | None, top: float, bound: Bounder) -> int:
    """first_young(src, 1, top, bound), given its answer `y` at an earlier pass (None: none): the family's
    aged top-keyed classes are a prefix of it (first_young's docstring) that only grows with the clock, so
    where src[y - 1] is still one of them (or y is 1) every class before it is, and the answer is y or a few
    classes on; else (classes left or came before it) it is searched afresh. The two searches in C of every
    family at every pass's start were ~8 % of a deep replay's CPU (at 200,000 jobs: long families)."""
    aged, n = bound.aged, len(src)
    if y is None or y > n or y > 1 and not (src[y - 1][0][0] == top and aged(src[y - 1][0][1])):     # type: ignore[index]
        return first_young(src, 1, top, bound)
    for _ in range(AHEAD):
        if y == n:
            return y
        key = cast(tuple[float, float], src[y][0])
        if key[0] != top or not aged(key[1]):
            return y
        y += 1
    return first_young(src, y, top, bound)


class Reach:
    """The classes reached so far, by index i: jobs, class key, ids, next job, and the family
    whose next class joins the heap once class i is first taken from it (else -1); `heads`, the
    heap of (score of the next job, i)."""

    def __init__(self, score: Callable[[Job], Score], queue: Queue | None = None, lazy: "bool | Bound" = True) -> None:
        self.score = score
        self.queue = queue      # (settle.settled reads its shapes)
        # short-jobs-first: the bound of a family's classes from a front on (families split by run time)
        self.bound = lazy if callable(lazy) else None
        self.lists: list[list[Job]] = []
        self.keys: list[Key] = []
        self.ids: list[list[int]] = []
        self.at: list[int] = []
        self.fam: list[int] = []
        self.groups = queue.groups if queue is not None else {}
        self.sources: list[list[Front]] = (list(queue.families.values()) if queue is not None and lazy
                                           else [[(0.0, 0, k, g)] for k, g in self.groups.items()])
        self.front = [0] * len(self.sources)     # how many of each family's classes were reached
        self.young: dict[int, int] = {}     # family -> its first class whose first job is not aged (_bound)
        # whether the classes' order is the Queue's families', whose runs of passed classes settle.passes_from
        # keeps as blocks (blocks.py)
        self.kept = queue is not None and lazy
        if self.bound is None:
            self.heads = [(score(self.lists[i][0]), i) for i in map(self.reach, range(len(self.sources)))]
        else:
            assert queue is not None
            self.fkeys = list(queue.families)
            self.linear = queue.linear
            self._terms(queue)
            self.heads = [(self._bound(f, 0), -1 - f) for f in range(len(self.sources))]
        heapq.heapify(self.heads)
        self._top(None)
        # The largest GPUs and CPUs any waiting job needs (Usage.tight after an admission).
        needs = queue.kinds.needs if queue is not None else {}
        self.most = (max((g for g, _ in needs), default=0), max((c for _, c in needs), default=0))

    def reach(self, f: int) -> int:
        """Family f's next class, which the walk reaches now: its index."""
        src, k = self.sources[f], self.front[f]
        self.front[f] = k + 1
        i = self.add(src[k][2], src[k][3])
        self.fam[i] = f if k + 1 < len(src) and self.bound is None else -1
        return i

    def _terms(self, queue: Queue) -> None:
        """Each family's terms of its bounds this pass, summed once a pass rather than at every bound: its
        tied priority (Bounder.tied's), its QoS, fair-share and burst terms and its largest slope times the
        time since the epoch (Bounder.linear's, in the order it sums them: the same floats), and whether
        `_linear`'s margin holds. A bound a family at each pass's start and at each class the walk reaches
        in it, each through Bounder's methods, was ~15 % of a deep replay's pass (~40 families)."""
        b, lin = self.bound, self.linear
        assert b is not None and lin is not None
        qos, fs, fw, aw, bw = b.qos, b.fs, b.fw, b.aw, b.bw
        since = max(b.now - lin.epoch, 0.0) / b.age_max
        share, pad = lin.window / lin.age_max, lin.aw + lin.sw + bw + 1
        slopes, flats = queue.slopes, queue.flats
        terms: list[tuple[float, float, float, float, float, bool]] = []
        self.terms = terms
        for fam in self.fkeys:
            q, account, burst, _ = fam
            qf, ff, bf = qos.get(q, 0.0), fs.get(account, fw), bw if burst else 0.0
            tied = -(qf + aw + ff - bf)
            terms.append((tied, qf, slopes[fam] * since, ff, bf, share * flats[fam] > 1e-9 * (abs(tied) + pad)))
        self.top = -lin.aw
        self.aged = queue.aged

    def _bound(self, f: int, k: int) -> Score:
        """The bound of family f's classes from its k-th on (the Queue's family key: QoS, account, burst
        flag, run time floor). The classes near or past their full age come first, by submit time
        (multifactor.Linear.old): where the k-th's first job has waited its full age, those up to the
        first younger one tie in priority and go by (submit time, id): the k-th's exact Score bounds them
        (multifactor.Bounder.tied); a younger one's padded bound (the priority of a job of the floor's
        run time submitted then: `bounder`) bounds every class after it. The rest go by their Linear key:
        `_linear` bounds them."""
        bound, src, top = self.bound, self.sources[f], self.top
        assert bound is not None
        key, jid = cast(tuple[float, float], src[k][0]), src[k][1]
        if key[0] != top:
            return self._linear(f, key, jid)
        submit = key[1]
        age = bound.now - submit
        if not (age * bound.per_s >= bound.aw and age >= bound.age_max):       # (Bounder.aged)
            q, account, burst, floor = self.fkeys[f]
            return bound(q, account, burst, submit, jid, floor)
        tied = (self.terms[f][0], submit, jid)          # (Bounder.tied)
        y = self.young.get(f)
        if y is None:       # (the same all pass: the families do not change during one)
            if k:
                y = first_young(src, k + 1, top, bound)
            else:           # (a pass's first bound of the family: kept for the next pass)
                fam = self.fkeys[f]
                y = self.aged[fam] = kept_young(src, self.aged.get(fam), top, bound)
            self.young[f] = y
        if y == len(src):
            return tied
        key, jid = cast(tuple[float, float], src[y][0]), src[y][1]
        if key[0] != top:
            return min(tied, self._linear(f, key, jid))
        q, account, burst, floor = self.fkeys[f]
        return min(tied, bound(q, account, burst, key[1], jid, floor))

    def _linear(self, f: int, key: tuple[float, float], jid: int) -> Score:
        """The bound of family f's young-keyed classes from the one keyed `key` on: its P plus the family's
        largest slope times the time since the epoch (Bounder.linear). Each of them is at least the Linear
        window from its full age, so it scores below the tied priority by the window's share of age_max
        times its slope at least: where that margin is far past the floats' rounding, no such class comes
        before an aged one of the family's QoS, account and burst flag, and the bound is put no earlier
        than those (else a family whose bound passed the tied priority, with classes near their full age,
        had them reached one by one before every aged class of the pass)."""
        tied, qf, moved, ff, bf, margin = self.terms[f]
        s = qf - key[0] + moved + ff - bf
        got = (-(s + abs(s) * 1e-9 + 1e-12), key[1], jid)      # (Bounder.linear, padded as it pads)
        if margin:
            return max(got, (tied, inf, 0))
        return got

    def _top(self, passes: Passes | None) -> None:
        """While a family's bound comes first in the heap, its next class joins the heap (unless
        `passes` takes it unreached: `taken`), and the family goes back under the bound of the rest:
        the first entry of the heap is a class's next job, as the walk reads it."""
        heads, sources, front = self.heads, self.sources, self.front
        while heads and heads[0][1] < 0:
            f = -1 - heapq.heappop(heads)[1]
            src, k = sources[f], front[f]
            if passes is not None:
                k = front[f] = passes(src, k, self.groups)
            if k < len(src):
                i = self.reach(f)
                heapq.heappush(heads, (self.score(self.lists[i][0]), i))
                if k + 1 < len(src):
                    heapq.heappush(heads, (self._bound(f, k + 1), -1 - f))

    def sweep(self, passes: Passes) -> None:
        """The pass settled (settle.finish): `passes` takes each family's classes left whose verdict it
        knows (kept as blocks for the next pass), not only those of the families whose bound came first;
        the classes it leaves take their verdicts one by one (`rest`). (A bound left in the heap still
        bounds its family's rest.)"""
        if self.bound is None:
            return
        groups, front = self.groups, self.front
        for f, src in enumerate(self.sources):
            if front[f] < len(src):
                front[f] = passes(src, front[f], groups)

    def add(self, key: Key, g: Group | None = None) -> int:
        """Class `key` (of the Queue's groups; `g`, its Group where known) reached: its index (its
        family's next class unchanged)."""
        if g is None:
            g = self.groups[key]
        i = len(self.lists)
        self.lists.append(g.jobs)
        self.keys.append(key[0])
        self.ids.append(g.ids)
        self.at.append(0)
        self.fam.append(-1)
        return i

    def taken(self, i: int, passes: Passes) -> None:
        """Class i was taken from the heap: if it was its family's front, the family's next class
        joins the heap, unless `passes` takes it unreached (its verdict known for now, without an
        index, a heap entry or a park: classes._Walk._passes; most classes of a pass on a full
        cluster), and then the one after it, and so on: `passes(src, k, groups)` says where that
        run of the family's order `src` from its k-th class ends. With families under bounds, a bound
        the taking leaves first is replaced (`_top`)."""
        if self.bound is not None:
            return self._top(passes)
        f = self.fam[i]
        if f < 0:
            return
        self.fam[i] = -1
        src = self.sources[f]
        n = len(src)
        k = passes(src, self.front[f], self.groups)
        self.front[f] = k
        if k < n:
            i = self.reach(f)
            heapq.heappush(self.heads, (self.score(self.lists[i][0]), i))

    def rest(self) -> Iterator[tuple[int, Key, list[Job], list[int], int]]:
        """(i, class key, jobs, ids, next job) of each class left in the merge (i: -1 for a class
        not reached yet)."""
        lists, keys, ids, at = self.lists, self.keys, self.ids, self.at
        for _, i in self.heads:
            if i >= 0:      # a bound's classes (i < 0) are the family's left, below
                yield i, keys[i], lists[i], ids[i], at[i]
        for f, src in enumerate(self.sources):
            for _, _, key, g in src[self.front[f]:]:
                yield -1, key[0], g.jobs, g.ids, 0

    def clear(self) -> None:
        """Every class left has taken its verdict (settle.finish)."""
        self.heads.clear()
        self.front = [len(src) for src in self.sources]

    def run_end(self, i: int, limit: Score | None, first: int = 1) -> int:
        """The end of class i's run: its jobs that come before `limit` (the next job of any other
        class), the first `first` of them known to. Its order is the priority order, so a binary
        search finds the end."""
        jobs, lo, hi = self.lists[i], self.at[i] + first, len(self.lists[i])
        if limit is None:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self.score(jobs[mid]) < limit:
                lo = mid + 1
            else:
                hi = mid
        return lo
