"""The pending jobs of a replay, kept in the orders that let the simulator know plan()'s order
without a pass.

plan() considers pending jobs by (−priority, submit time, id) (multifactor.py), with

    priority = qos_weight × QoS priority + age_weight × age + fairshare_weight × account factor
               − burst_penalty × (1 if the job is the tail of its user's submit burst)

`age` never favours a younger job and the account factor is the same for every job of an
account. So, while every pending job has the same QoS priority (or qos_weight is 0) and no pending
job is the tail of a burst (or burst_penalty is 0), **each account's jobs come in submit order**;
and when, besides, fair share is off (or a single account pends), the whole queue does. Those two
facts are all easy.py's order (order.py) relies on.

Whether a job is the tail of a burst depends only on the pending jobs of its user: with the user's
pending jobs in (submit time, id) order s_0, s_1, ..., job k has `burst_jobs` = a earlier jobs within
`burst_window` = w before it (multifactor.burst_tail) exactly when s_k − s_(k−a) ≤ w. `Bursts` counts
those k per user, and a submit or start changes the pairs of at most a + 1 of them: O(a) per change,
never a pass over the queue. With no tail in the whole queue there is none in any part of it either
(a part has fewer earlier jobs within the window), so a pass over a part ranks alike.
"""
from bisect import bisect_left, insort
from collections import Counter

from ..jobs.model import Job
from ..money import ledger
from ..policy import backfill
from ..policy.capacity import shape
from ..settings.config import Config
from .order import Runtimes, ShortOrder, SubmitOrder
from .room import Shapes


def timed(job: Job) -> bool:
    """Whether plan() could act on the job because time passed: --max-wait, --deadline, --begin,
    a retry backoff, a hold or a dependency (a replay sets none of them; a caller might)."""
    return (job.max_wait is not None or job.deadline is not None or job.begin is not None
            or job.eligible_time is not None or job.held or bool(job.deps))


class Queue:
    def __init__(self, cfg: Config, ordered: bool = True):
        self.cfg = cfg
        self.jobs: dict[int, Job] = {}
        # Backfill on (easy.py): the jobs in submit order, per account, per request shape (and short jobs
        # first). At 200,000 pending each index costs ~20 MB. `ordered` False (a replay through plan(),
        # through.py) or backfill off (kept.py walks its Backlog), nothing draws an order from them.
        self.ordered = ordered and cfg.backfill_depth > 0
        self.fifo: list[tuple[float, int]] = []             # (submit time, id), sorted
        self.by_account: dict[str, list[tuple[float, int]]] = {}
        self.qos_levels: Counter = Counter()                 # QoS priority -> pending jobs
        self.per_user: Counter = Counter()
        self.bursts = Bursts(cfg.priority["burst_jobs"], cfg.priority["burst_window"])
        self.penalised = bool(cfg.priority["burst_penalty"])    # else no one reads the burst tails
        self._charged: dict = {}                             # (account, project, budget) -> charged()
        self._levels = {q.name: q.priority for q in cfg.qos}
        self.shapes = Shapes()
        # shape -> [(run as backfill counts it: `span`, submit time, id)], sorted: easy.py's index
        self.by_shape: dict[tuple, list] = {}
        self.shape_fifo: dict[tuple, list] = {}              # shape -> [(submit time, id)], sorted
        self.keys: dict[int, tuple] = {}                     # id -> (shape, span)
        self.learned = bool(cfg.estimate.backfill)
        # Short jobs first: the jobs by expected run time, from which order.py draws plan()'s order;
        # and per request shape, for easy.py's jobs that could start.
        self.runtimes = Runtimes() if cfg.priority.short_job_weight and self.ordered else None
        self.shaped: dict[tuple, Runtimes] = {}
        self.timed = 0
        self.gangs = 0                                       # pending jobs over several nodes (sub -N)
        self.budgeted = 0                                    # pending jobs charged to some budget
        self.backlog = None          # policy.Backlog: the queue in plan()'s order (kept.py), set by the engine

    def __len__(self) -> int:
        return len(self.jobs)

    def _qos(self, job: Job) -> int:
        return self._levels.get(job.qos, 0)

    def add(self, job: Job, pending: bool = False) -> None:
        """A job joins the queue; `pending`: it was pending already (parked), so the burst tails,
        which count every pending job, have it."""
        self.jobs[job.id] = job
        self.qos_levels[self._qos(job)] += 1
        self.per_user[job.user] += 1
        if self.penalised and not pending:
            self.bursts.add(job)
        self.shapes.add(job)
        if self.ordered:
            self._order(job)
        self.timed += timed(job)
        self.gangs += job.nodes > 1
        self.budgeted += self.charged(job)
        if self.backlog is not None:
            self.backlog.add(job)

    def remove(self, job_id: int, pending: bool = False) -> Job:
        """A job leaves the queue; `pending`: it stays pending (parked), in the burst tails."""
        job = self.jobs.pop(job_id)
        _less(self.qos_levels, self._qos(job))
        self.per_user[job.user] -= 1
        if self.penalised and not pending:
            self.bursts.remove(job)
        self.shapes.remove(job)
        if self.ordered:
            self._unorder(job)
        self.timed -= timed(job)
        self.gangs -= job.nodes > 1
        self.budgeted -= self.charged(job)
        if self.backlog is not None:
            self.backlog.remove(job_id)
        return job

    def _order(self, job: Job) -> None:
        key = (job.submit_time, job.id)
        insort(self.fifo, key)
        insort(self.by_account.setdefault(job.account, []), key)
        s, span = self.keys[job.id] = (shape(job), self.span(job))
        insort(self.by_shape.setdefault(s, []), (span, job.submit_time, job.id))
        insort(self.shape_fifo.setdefault(s, []), key)
        if self.runtimes is not None:
            self.runtimes.add(job, span)
            self.shaped.setdefault(s, Runtimes()).add(job, span)

    def _unorder(self, job: Job) -> None:
        key = (job.submit_time, job.id)
        del self.fifo[bisect_left(self.fifo, key)]
        _drop(self.by_account, job.account, key)
        s, span = self.keys.pop(job.id)
        _drop(self.by_shape, s, (span, job.submit_time, job.id))
        _drop(self.shape_fifo, s, key)
        if self.runtimes is not None:
            self.runtimes.remove(job, span)
            self.shaped[s].remove(job, span)
            if not self.shaped[s]:
                del self.shaped[s]

    def replace(self, job: Job) -> None:
        """The pending job's new record, alike in all the queue counts (plan() gave or took its earmark)."""
        self.jobs[job.id] = job
        if self.backlog is not None:
            self.backlog.replace(job)

    def span(self, job: Job) -> float:
        """How long backfill plans the job to hold its room (backfill.span): its learned run time
        under estimate.backfill, else its time limit."""
        return backfill.span(job, self.learned)

    def charged(self, job: Job) -> bool:
        """Whether the job is charged to some budget."""
        if not self.cfg.budgets:
            return False
        who = (job.account, job.project, job.budget)
        if who not in self._charged:
            self._charged[who] = bool(ledger.budgets_for(job, self.cfg.budgets))
        return self._charged[who]

    def bursting(self, now: float) -> bool:
        """Whether some pending job is the tail of its user's submit burst (multifactor.burst_tail's rule)."""
        return self.bursts.any()

    def accounts_in_submit_order(self, now: float) -> bool:
        """Whether each account's pending jobs come in submit order in plan()'s order (see above).
        Then also no job is the tail of a burst, in the whole queue or in any part of it."""
        w = self.cfg.priority
        return ((not w["qos_weight"] or len(self.qos_levels) <= 1)
                and (not w["burst_penalty"] or not self.bursting(now))
                and not w.short_job_weight)      # short jobs first: not submit order

    def one_order(self) -> bool:
        """Whether, given accounts_in_submit_order(), the whole queue is in submit order."""
        return not self.cfg.priority["fairshare_weight"] or len(self.by_account) <= 1

    def short_order(self, now: float) -> bool:
        """Whether plan()'s order is short jobs first by wait and expected run time alone (order.py):
        short_job_weight, and else what accounts_in_submit_order and one_order ask."""
        w = self.cfg.priority
        return (self.runtimes is not None and not self.runtimes.instant
                and (not w["qos_weight"] or len(self.qos_levels) <= 1)
                and (not w["burst_penalty"] or not self.bursting(now)) and self.one_order())

    def in_one_order(self, now: float) -> bool:
        """Whether `order` can draw plan()'s order of the whole queue: submit order, or short jobs first."""
        return self.accounts_in_submit_order(now) and self.one_order() or self.short_order(now)

    def order(self, now: float, usage: dict, leave=()):
        """plan()'s order at `now` (`usage`: fair-share usage as plan() gets it) of the jobs but those in
        `leave`, drawn on demand; given in_one_order()."""
        if self.runtimes is not None:
            return ShortOrder(self.jobs, self.runtimes, self.shaped, self.cfg, now, usage, leave)
        return SubmitOrder(self.jobs, self.fifo, self.keys, leave, self.by_shape, self.shape_fifo)


def _drop(index: dict, at, key: tuple) -> None:
    """`key` out of the sorted list `index[at]`, and the list once empty."""
    mine = index[at]
    del mine[bisect_left(mine, key)]
    if not mine:
        del index[at]


def _less(counts: Counter, key) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


class Bursts:
    """Per user, the pending jobs in (submit time, id) order and how many of them are a burst's tail."""

    def __init__(self, allowance: int, window: float):
        self.a, self.w = allowance, window
        self.keys: dict[str, list[tuple[float, int]]] = {}
        self.tails: Counter = Counter()
        self.total = 0

    def _count(self, keys, lo: int, hi: int) -> int:
        """Tails among indices lo..hi (inclusive) of `keys`."""
        a, w = self.a, self.w
        return sum(1 for k in range(max(lo, a), min(hi, len(keys) - 1) + 1) if keys[k][0] - keys[k - a][0] <= w)

    def _change(self, job: Job, add: bool) -> None:
        keys = self.keys.setdefault(job.user, [])
        key = (job.submit_time, job.id)
        p = bisect_left(keys, key)
        # Only the pairs (k − a, k) that straddle position p change: k in p..p+a−1 before an insert
        # (p..p+a before a removal), k in p..p+a after it (p..p+a−1 after a removal).
        before = self._count(keys, p, p + self.a - add)
        if add:
            keys.insert(p, key)
        else:
            del keys[p]
        after = self._count(keys, p, p + self.a - 1 + add)
        delta = after - before
        self.tails[job.user] += delta
        self.total += delta
        if not keys:
            del self.keys[job.user]
            del self.tails[job.user]

    def add(self, job: Job) -> None:
        self._change(job, True)

    def remove(self, job: Job) -> None:
        self._change(job, False)

    def any(self) -> bool:
        return self.total > 0
