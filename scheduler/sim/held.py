"""What the running jobs hold of one budget (policy/budget.py BudgetBook: in its current period,
`_held`; without periods, `committed`), kept as jobs start and end instead of summed over every
running job at each pass start of a replay.

A running job holds max(accrued, part) (balance.in_span: what it has accrued in the period plus what
its commitment still holds there; without periods balance.outstanding + balance.accrued, with the
commitment as the part). The part is fixed while the job runs and, until its commitment ends, the
accrued is at most the part: both are accrue() of the same rate over two stretches from the same
start, the accrued one no longer. So the sum is a running total of the parts of the jobs within
their commitment, plus what the few that have outrun it hold, computed at the instant asked. A job
counts as within only up to `MARGIN` before its commitment's end (a float quotient). A new period
changes every part: they are taken anew.
"""
import heapq
import math

from .. import units
from ..jobs.model import Job
from ..money import balance, periods

MARGIN = 1.0       # seconds


class Holdings:
    def __init__(self, budget):
        self.b = budget
        self.jobs: dict[int, Job] = {}       # the running jobs charged to it (their commitment names it)
        self.parts: dict[int, tuple] = {}    # id -> (part, until) in period `lab`
        self.lab: str | None = None
        self.span: tuple = ()
        self.steady = 0                      # the parts of the jobs before their `until`
        self.ends: list = []                 # heap of (until, id) of those
        self.outrun: set[int] = set()
        self.t = -math.inf
        self.committed = 0                   # the running jobs' whole commitments to it: at most what they hold in any period

    def start(self, job: Job) -> None:
        self.end(job.id)
        self.jobs[job.id] = job
        self.committed += balance.amount_of(job.commit, self.b.name)
        if self.lab is not None:
            self._part(job)

    def end(self, job_id: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        self.committed -= balance.amount_of(job.commit, self.b.name)
        got = self.parts.pop(job_id, None)       # (none before the first `at`: no part taken yet)
        if job_id in self.outrun:
            self.outrun.discard(job_id)
        elif got is not None:
            self.steady -= got[0]         # its heap entry is skipped when it comes up

    def at(self, t: float, lab: str) -> int:
        """The sum at `t` in period `lab` ("" without periods); `t` never earlier than the last."""
        if lab != self.lab or t < self.t:
            self.lab, self.t = lab, t
            self.span = periods.bounds(self.b.period, lab, self.b.timezone) if self.b.period != "none" else ()
            self.parts, self.steady, self.ends, self.outrun = {}, 0, [], set()
            for job in self.jobs.values():
                self._part(job)
        self.t = t
        ends, parts = self.ends, self.parts
        if not self.outrun and (not ends or ends[0][0] > t):
            return self.steady
        while ends and ends[0][0] <= t:
            until, i = heapq.heappop(ends)
            if i in parts and parts[i][1] == until and i not in self.outrun:
                self.steady -= parts[i][0]
                self.outrun.add(i)
        return self.steady + sum(self._held(self.jobs[i], t) for i in self.outrun)

    def _held(self, job: Job, t: float) -> int:
        """What the job holds at `t`, as BudgetBook sums it."""
        name = self.b.name
        if not self.span:
            return balance.outstanding(job, name, t) + balance.accrued(job, name, t)
        return sum(balance.in_span(job, name, t, self.span))

    def _part(self, job: Job) -> None:
        cur, name = job.current, self.b.name
        d = cur.dispatch_time if cur else None
        rate, committed = balance.amount_of(job.rates, name), balance.amount_of(job.commit, name)
        if not (d and rate and committed):
            self.parts[job.id] = (0, -math.inf)        # what it holds moves with the time: never steady
            self.outrun.add(job.id)
            return
        until = d + committed * 3600 / rate - MARGIN
        if self.span:
            # balance.in_span at the later of its dispatch and the period's start: nothing accrued yet
            lo = max(d, self.span[0])
            part = max(0, units.accrue(rate, min(d + committed * 3600 / rate, self.span[1]) - lo))
        else:
            part = committed      # outstanding + accrued at its dispatch
        self.parts[job.id] = (part, until)
        if self.t < until:
            self.steady += part
            heapq.heappush(self.ends, (until, job.id))
        else:
            self.outrun.add(job.id)
