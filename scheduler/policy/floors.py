"""Budget floors: lower bounds of what plan() can quote a pending job for each of its budgets, kept per
group of a kept Backlog (backlog.py), so that the backfill-off walk (strict.py `run_kept`) can tell
in O(1), or by a scan in C, that a budget admits none of a group's next jobs and pend them unquoted
(budget.py `BudgetBook.room` says what a budget leaves). Only for a caller that keeps no reasons'
figures (the simulator): the daemon's Backlog has none.
"""
import heapq
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from itertools import compress, count, islice

from ..jobs.model import Job, Node
from ..money import ledger, periods, pricing
from ..money.ledger import Budget
from ..settings.config import Config
from ..units import accrue
from .budget import SLACK, BudgetBook, Quote
from .capacity import could_ever_hold

Floor = tuple[tuple[str, int, int], ...]    # per budget of a job: (name, least need over its run, least rate)
NOT_CHARGED = -(1 << 62)     # the floors of a job not charged to a budget, in that budget's lists: always "may fit"


class Floors:
    """Lower bounds of what plan() can quote a job for each of its budgets, on whatever node and GPU
    model: its cheapest rate an hour over every node and model of the cluster (a node's whole-instance
    price, or a model's GPU rate: `pricing.rate`), and that rate over its billed run. Kept per group
    of a kept Backlog (backlog.py) in the group's order, with their least, they answer whether a
    budget admits none of the rest of a group in O(1), and where the next job it might admit is by a
    scan in C (`skip`): the backfill-off walk (strict.py `run_kept`) pends the jobs before it for
    their budget unquoted. Made for one config and cluster (`fits`)."""

    def __init__(self, cfg: Config, nodes: Sequence[Node]) -> None:
        self.cfg, self.nodes = cfg, tuple(nodes)
        self.models = sorted({"", *(g.model for n in self.nodes for g in n.gpus)})
        priced = {(cfg.rates.node_price(n.name), n.cpus, n.mem, len(n.gpus)): n for n in self.nodes
                  if cfg.rates.node_price(n.name)}
        self.priced = list(priced.values())      # one node of each priced kind: its rate reads only those
        self.mine: dict[tuple[str, str, str], tuple[Budget, ...]] = {}
        self.rates: dict[tuple[Hashable, ...], int] = {}
        self.of: dict[int, tuple[Job, Floor]] = {}       # job id -> (the record filed, its floors)
        self.groups: dict[Hashable, Least] = {}

    def fits(self, cfg: Config, nodes: Sequence[Node]) -> bool:
        """Whether these floors bound a pass under `cfg` on `nodes`."""
        return cfg is self.cfg and (nodes is self.nodes or tuple(nodes) == self.nodes)

    def floor(self, job: Job) -> Floor:
        who = (job.account, job.project, job.budget)
        bs = self.mine.get(who)
        if bs is None:
            bs = self.mine[who] = ledger.budgets_for(job, self.cfg.budgets)
        if not bs:
            return ()
        seconds = pricing.billed(pricing.planned_seconds(job, self.cfg), self.cfg) - SLACK
        out = []
        for b in bs:
            rate = self._rate(job, b.unit)
            out.append((b.name, accrue(rate, seconds), rate))
        return tuple(out)

    def _rate(self, job: Job, unit: str) -> int:
        key = (job.gpus, job.cpus, job.mem, job.nodes, job.qos, unit)
        got = self.rates.get(key)
        if got is None:
            rates = [pricing.rate(job, unit, m, self.cfg) for m in self.models]
            rates += [pricing.rate(job, unit, "", self.cfg, n) for n in self.priced]
            got = self.rates[key] = min(rates)
        return got

    def dearest(self, job: Job, unit: str) -> int:
        """The dearest rate an hour plan() may quote the job at: over the GPU models of its type (""
        where the cluster has none), on each node that could ever hold it and on no node (how a job
        that fits nowhere is quoted); a gang, over every model and priced node."""
        key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.nodes, job.qos, unit, "dearest")
        got = self.rates.get(key)
        if got is None:
            cfg = self.cfg
            if job.nodes > 1:
                rates = [pricing.rate(job, unit, m, cfg) for m in self.models]
                rates += [pricing.rate(job, unit, "", cfg, n) for n in self.nodes if cfg.rates.node_price(n.name)]
            else:
                rates = [pricing.rate(job, unit, m, cfg, n) for n in self.nodes if could_ever_hold(job, n)
                         for m in _quoted(job, (n,))]
                rates += [pricing.rate(job, unit, m, cfg) for m in _quoted(job, self.nodes)]
            got = self.rates[key] = max(rates)
        return got

    def admitted(self, jobs: Iterable[Job], book: BudgetBook) -> bool:
        """Whether each of its budgets provably admits every one of `jobs` now, as `book` has them
        (so no pass now gives any of them a budget reason): per budget, the dearest quote of any of
        them (its dearest rate over its run, plus the overhead) fits beside what is spent and held in
        every period the longest of their runs may touch. A caller with thousands of such jobs asks
        this only where it would otherwise skip a pass."""
        most: dict[str, tuple[int, float]] = {}
        cfg = self.cfg
        for job in jobs:
            who = (job.account, job.project, job.budget)
            bs = self.mine.get(who)
            if bs is None:
                bs = self.mine[who] = ledger.budgets_for(job, cfg.budgets)
            if not bs:
                continue
            for b in bs:
                need, seconds = self.most(job, b)
                was = most.get(b.name, (0, 0.0))
                most[b.name] = (max(was[0], need), max(was[1], seconds))
        return self.admits(most, book)

    def most(self, job: Job, b: Budget) -> tuple[int, float]:
        """(the dearest quote of `job` for budget `b`: its dearest rate over its run plus the overhead,
        its billed seconds): what `admits` reads of one job."""
        seconds = pricing.billed(pricing.planned_seconds(job, self.cfg), self.cfg) + SLACK
        return accrue(self.dearest(job, b.unit), seconds) + pricing.overhead(b.unit, self.cfg), seconds

    @staticmethod
    def admits(most: dict[str, tuple[int, float]], book: BudgetBook) -> bool:
        """Whether each budget named in `most` has room for a need of `most[name][0]` over a run of
        `most[name][1]` seconds from now, in every period such a run may touch, as `book` has it."""
        for name, (need, seconds) in most.items():
            b = book.named[name]
            q = Quote([(name, need)])
            if b.period != "none":
                q.parts[name] = {lab: need for lab, _, _ in periods.spans(b, book.now, book.now + seconds + 1)}
            if book.blocked(q):
                return False
        return True

    def add(self, key: Hashable, job: Job, at: int) -> None:
        """The job joins group `key` at place `at`."""
        got = self.of.get(job.id)
        if got is None or got[0] is not job:
            got = self.of[job.id] = (job, self.floor(job))
        least = self.groups.get(key)
        if least is None:
            least = self.groups[key] = Least()
        least.add(got[1], at)

    def remove(self, key: Hashable, job_id: int, at: int) -> None:
        """The job at place `at` leaves group `key` (for another, or the backlog: then `forget` it too)."""
        least = self.groups[key]
        least.remove(self.of[job_id][1], at)
        if not least.n:
            del self.groups[key]

    def forget(self, job_id: int) -> None:
        self.of.pop(job_id, None)

    def skip(self, key: Hashable, k: int, book: BudgetBook) -> tuple[int, str]:
        """(m, reason): the jobs at places k..m-1 of group `key` all pend for a budget now (`reason`),
        by their floors against what `book` leaves (`BudgetBook.room`); m = k where the job at k might
        fit. The least floors of a budget every job of the group is charged to answer for the whole
        group at once; else a scan of the budget's floors in the group's order, in C."""
        least = self.groups.get(key)
        if least is None:
            return k, ""
        end, why = k, ""
        for name, (n, cs, rs) in least.by.items():
            x, r, reason = book.room(name)
            if n == least.n and cs.least() > x and rs.least() > r:
                return least.n, reason
            c, rate = least.cs[name], least.rs[name]
            if c[k] <= x or rate[k] <= r:
                continue
            m = next(compress(count(k), map(x.__ge__, islice(c, k, None))), least.n)
            if r >= 0:
                m = min(m, next(compress(count(k), map(r.__ge__, islice(rate, k, m))), m))
            if m > end:
                end, why = m, reason
        return end, why


def _quoted(job: Job, nodes: Iterable[Node]) -> set[str]:
    """The GPU models plan() might quote the job at on `nodes`: those of its type, else none ("")."""
    models = {g.model for n in nodes for g in n.gpus if not job.gpu_type or g.model == job.gpu_type}
    return (models or {""}) | ({""} if not job.gpus else set())


class Least:
    """A group's floors: per budget, how many of its jobs are charged to it, the least of their
    floors (`Floor`'s need and rate), and every job's in the group's order (NOT_CHARGED for a job
    not charged to it)."""
    __slots__ = ("n", "by", "cs", "rs")

    def __init__(self) -> None:
        self.n = 0
        self.by: dict[str, tuple[int, Smallest, Smallest]] = {}
        self.cs: dict[str, list[int]] = {}
        self.rs: dict[str, list[int]] = {}

    def add(self, floor: Floor, at: int) -> None:
        mine = {name: (c, r) for name, c, r in floor}
        for name, (c, r) in mine.items():
            got = self.by.get(name)
            if got is None:
                got = (0, Smallest(), Smallest())
                self.cs[name] = [NOT_CHARGED] * self.n
                self.rs[name] = [NOT_CHARGED] * self.n
            got[1].add(c)
            got[2].add(r)
            self.by[name] = (got[0] + 1, got[1], got[2])
        for name in self.cs:
            c, r = mine.get(name, (NOT_CHARGED, NOT_CHARGED))
            self.cs[name].insert(at, c)
            self.rs[name].insert(at, r)
        self.n += 1

    def remove(self, floor: Floor, at: int) -> None:
        self.n -= 1
        for name in self.cs:
            del self.cs[name][at], self.rs[name][at]
        for name, c, r in floor:
            k, cs, rs = self.by[name]
            cs.remove(c)
            rs.remove(r)
            if k == 1:
                del self.by[name], self.cs[name], self.rs[name]
            else:
                self.by[name] = (k - 1, cs, rs)
class Smallest:
    """A multiset of integers with its least: counts, and a heap whose stale tops are dropped as read."""
    __slots__ = ("count", "heap")

    def __init__(self) -> None:
        self.count: Counter[int] = Counter()
        self.heap: list[int] = []

    def add(self, x: int) -> None:
        self.count[x] += 1
        if self.count[x] == 1:
            if len(self.heap) > 2 * len(self.count) + 16:     # mostly stale: rebuilt
                self.heap = sorted(self.count)
            else:
                heapq.heappush(self.heap, x)

    def remove(self, x: int) -> None:
        self.count[x] -= 1
        if not self.count[x]:
            del self.count[x]

    def least(self) -> int:
        heap, count = self.heap, self.count
        while heap and heap[0] not in count:
            heapq.heappop(heap)
        return heap[0] if heap else math.inf    # type: ignore[return-value]
