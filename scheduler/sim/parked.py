"""Pending jobs a budget provably keeps waiting, parked out of the replay's queue.

Once a budget is spent, its account's jobs wait for the next period (or for ever) while the cluster
may have room for them. A plan() pass would reach each of them, quote its forecast and pend it
`BudgetReserved`/`BudgetExhausted`, at every instant: thousands of quotes a pass, for nothing. Such a
job does nothing in a pass (policy/__init__.py: one its budget would not admit is neither placed, nor
a reservation, a preemptor or, backfill off, the blocker), so the pass over the rest of the queue
decides the same.

Which jobs: the budget gate pends a job when, for one of its budgets, spent + committed + its need
exceeds the cap (budget.py `BudgetBook.blocked`), and a pass only adds commitments. Its need in the
current period is at least

    accrue(rate, min(seconds, R)) + overhead,     R = time left in the period (∞ without periods)

with `rate` its cheapest on any node that could hold it and `seconds` what its forecast bills. So
with x = cap − spent − committed − overhead at the start of a pass, a job is *idle* when
min(c, accrue(rate, R)) > x, c = accrue(rate, seconds): counted held by its budget and left out of
the pass, by id while the room swings (RECENT), else moved out of the queue (parked) until that no
longer holds. Per budget the parked jobs are kept sorted by c and by rate, the queued ones by c: a
pass lists the queued idle ones and moves only the jobs whose side of x changed (a rollover brings
every one back at once).

Parked: a job charged to exactly one budget, on one node, with nothing timed (--max-wait, deadline,
begin, hold, dependency) and no earmark. The engine leaves the parked jobs out of plan() only while
nothing else they could change holds: no pending dependency, and burst tails computed alike
(`excludes`).
"""
from bisect import bisect_left, bisect_right, insort
from collections import Counter, deque
from operator import itemgetter

from .. import ledger, periods
from ..config import Config
from ..model import Job
from ..policy.budget import BudgetBook
from ..policy.capacity import could_ever_hold
from .queue import timed

# An idle job is moved out of the queue only once its bound exceeds the budget's room at each of the
# last RECENT passes; until then it stays queued, left out of each pass by id. A move costs a queue
# insert and a removal, and the room swings: an end settles a commitment well below its forecast and
# sends hundreds of jobs back, the next admissions take the room again.
RECENT = 128
INF = float("inf")
# Seconds taken off a lower bound of a need: plan() computes the same amount from (now + s) - now,
# which float rounding may put one millisecond lower than s.
SLACK = 0.002


class Parking:
    def __init__(self, cfg: Config, nodes):
        self.cfg, self.nodes = cfg, nodes
        self.budgets = {b.name: b for b in cfg.budgets}
        self.jobs: dict[int, Job] = {}                    # parked: id -> record
        self.key: dict[int, tuple] = {}                   # every parkable pending job: id -> (budget, c, rate)
        self.active: dict[str, list] = {b: [] for b in self.budgets}      # budget -> sorted (c, rate, id) queued
        self.by_cost: dict[str, list] = {b: [] for b in self.budgets}     # budget -> sorted (c, id) parked
        self.by_rate: dict[str, list] = {b: [] for b in self.budgets}     # budget -> sorted (rate, id) parked
        self.users: Counter = Counter()                   # parked jobs per user
        self.room: dict[str, tuple] = {}                  # budget -> (x, time left, period) of the last update
        self.changed: Counter = Counter()                 # budget -> changes to its queued jobs (memo key)
        self.rates: dict[str, Counter] = {b: Counter() for b in self.budgets}    # budget -> its queued jobs' rates
        self.held_memo: dict[str, tuple] = {}             # budget -> ((period, running attempts), held, until)
        self.idle_memo: dict[str, tuple] = {}             # budget -> ((x, period, changed), ids, least rate)
        self.unchanged = False
        self._set: tuple = (None, set())
        self.recent: dict[str, deque] = {}                # budget -> its x at the last RECENT updates
        self._rates: dict = {}

    def __len__(self) -> int:
        return len(self.jobs)

    # -- the queue's jobs ----------------------------------------------------------------------
    def add(self, job: Job) -> None:
        """A job entered the queue (its submit, or a requeue)."""
        k = self._key(job)
        if k is not None:
            self.key[job.id] = k
            self._in(k[0], (k[1], k[2], job.id))

    def remove(self, job_id: int) -> None:
        """A queued job left the queue (started or ended); a parked one never does (it cannot start)."""
        k = self.key.pop(job_id, None)
        if k is not None:
            self._out(k[0], (k[1], k[2], job_id))

    def _in(self, name: str, entry: tuple) -> None:
        """(c, rate, id) joins budget `name`'s queued jobs."""
        insort(self.active[name], entry)
        self.changed[name] += 1
        self.rates[name][entry[1]] += 1

    def _out(self, name: str, entry: tuple) -> None:
        mine = self.active[name]
        del mine[bisect_left(mine, entry)]
        self.changed[name] += 1
        rates = self.rates[name]
        rates[entry[1]] -= 1
        if not rates[entry[1]]:
            del rates[entry[1]]

    def _key(self, job: Job):
        if job.nodes > 1 or job.earmark or timed(job):
            return None
        mine = ledger.budgets_for(job, self.cfg.budgets)
        if len(mine) != 1:
            return None
        b = mine[0]
        rate = self._rate(job, b.unit)
        seconds = ledger.billed(ledger.planned_seconds(job, self.cfg), self.cfg)
        return b.name, ledger.accrue(rate, seconds - SLACK), rate

    def _rate(self, job: Job, unit: str, dearest: bool = False) -> int:
        """The job's cheapest rate on any node that could hold it, over every GPU model it might get;
        or its dearest, over the models plan() might quote it at there or, fitting nowhere, on no node."""
        key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.nodes, job.qos, unit, dearest)
        if key not in self._rates:
            nodes = [n for n in self.nodes if could_ever_hold(job, n)]
            if dearest:
                rates = [ledger.rate(job, unit, model, self.cfg, n) for n in nodes for model in _quoted(job, [n])]
                rates += [ledger.rate(job, unit, model, self.cfg, None) for model in _quoted(job, self.nodes)]
            else:
                rates = [ledger.rate(job, unit, model, self.cfg, n) for n in nodes
                         for model in {"", *(g.model for g in n.gpus)}]
            self._rates[key] = (max if dearest else min)(rates, default=0)
        return self._rates[key]

    def admits(self, job: Job) -> bool:
        """Whether the budget provably admits the queued job at the last `update`, before any admission
        of the pass: its forecast at its dearest rate, all of it in the current period, fits the room."""
        k = self.key.get(job.id)
        if k is None or k[0] not in self.room:
            return False
        x, left, _ = self.room[k[0]]
        seconds = ledger.billed(ledger.planned_seconds(job, self.cfg), self.cfg)
        if left is not None and seconds > left:
            return False
        return ledger.accrue(self._rate(job, self.budgets[k[0]].unit, dearest=True), seconds + SLACK) <= x

    # -- a pass --------------------------------------------------------------------------------
    def update(self, t: float, spent: dict, running) -> tuple[list[int], list[int], list[int]]:
        """(queued ids now idle, those of them to park, parked ids to bring back) at the start of a
        pass at `t`: `spent` is what each budget has settled in its current period, `running` the
        jobs on nodes (plan()'s inputs). An idle job stays queued while its bound is within the
        budget's recent room (`RECENT`); the engine then leaves it out of the pass by id.
        `unchanged`: the idle ids are the very list the last update gave (the same jobs)."""
        parts: list[list[int]] = []
        running = tuple(running)
        attempts = tuple((j.id, j.attempts[-1].dispatch_time) for j in running if j.commit)
        park: list[int] = []
        back: list[int] = []
        self.room = {}
        self.unchanged = True
        for name, b in self.budgets.items():
            if not self.active[name] and not self.by_cost[name]:
                continue
            if b.period == "none":
                left, lab = None, ""
            else:
                lab = periods.current(b, t)
                left = periods.bounds(b.period, lab, b.timezone)[1] - t - SLACK
            held = self._held(b, lab, t, spent, running, attempts)
            x = ledger.cap(b) - spent.get(name, 0) - held - ledger.overhead(b.unit, self.cfg)
            self.room[name] = (x, left, lab)
            # The largest rate whose run to the period's end fits in x: accrue(rate, left) <= x.
            r_max = -1 if left is None else self._max_rate(x, left)
            cost, by_rate = self.by_cost[name], self.by_rate[name]
            back += [jid for _, jid in cost[:bisect_right(cost, (x, INF))]]
            if r_max >= 0:
                back += [jid for _, jid in by_rate[:bisect_right(by_rate, (r_max, INF))]]
            ids = self._idle(name, x, r_max, lab)
            if ids:
                parts.append(ids)
            recent = self.recent.setdefault(name, deque(maxlen=RECENT))
            recent.append(x)
            peak = max(recent)
            park += self._over(name, peak, -1 if left is None else self._max_rate(peak, left))
        idle = parts[0] if len(parts) == 1 else [i for ids in parts for i in ids]
        return idle, park, list(dict.fromkeys(back))

    def _held(self, b, lab: str, t: float, spent: dict, running, attempts) -> int:
        """What the running jobs hold in period `lab` of budget `b` (without periods: its committed),
        as plan()'s BudgetBook sums it. Remembered for the same running attempts with commitments
        until the first of them outruns its commitment: until then the sum does not change with time
        (ledger.in_span is max(accrued, part), and the part is fixed)."""
        memo = self.held_memo.get(b.name)
        if memo is not None and memo[0] == (lab, attempts) and t < memo[2]:
            return memo[1]
        book = BudgetBook(self.cfg, spent, running, t)
        held = book.committed[b.name] if b.period == "none" else book._held(b, lab)
        self.held_memo[b.name] = ((lab, attempts), held, _steady_until(running, b.name, t))
        return held

    def _idle(self, name: str, x: int, r_max: int, lab: str) -> list[int]:
        """_over(name, x, r_max), the same list while x, the period and the budget's queued jobs stay
        as they were and the rate test leaves every one in (r_max below the least of their rates)."""
        memo = self.idle_memo.get(name)
        if memo is not None and memo[0] == (x, lab, self.changed[name]) and r_max < memo[2]:
            return memo[1]
        self.unchanged = False
        if self._all_fit(name, r_max):
            self.idle_memo.pop(name, None)
            return []
        active = self.active[name]
        over = active[bisect_right(active, (x, INF, INF)):]
        least = min(map(itemgetter(1), over), default=INF) if r_max >= 0 else INF
        if r_max >= least:
            self.idle_memo.pop(name, None)
            return [e[2] for e in over if e[1] > r_max]
        ids = list(map(itemgetter(2), over))
        self.idle_memo[name] = ((x, lab, self.changed[name]), ids, least)
        return ids

    def idle_set(self, idle: list[int], park: list[int]) -> set[int]:
        """The idle ids but those parked, as a set: the last one again for the same idle list."""
        if not (self.unchanged and not park and self._set[0] is idle):
            self._set = (idle, set(idle).difference(park))
        return self._set[1]

    def _all_fit(self, name: str, r_max: int) -> bool:
        """Whether every queued job of budget `name` could run to the period's end within the room
        (its rate at most r_max): then none is idle, and no list need be walked."""
        return r_max >= 0 and r_max >= max(self.rates[name], default=-1)

    def _over(self, name: str, x: int, r_max: int) -> list[int]:
        """The queued jobs of budget `name` whose bound exceeds x: c > x and accrue(rate, left) > x."""
        if self._all_fit(name, r_max):
            return []
        active = self.active[name]
        over = active[bisect_right(active, (x, INF, INF)):]
        if r_max < 0:
            return [e[2] for e in over]
        return [e[2] for e in over if e[1] > r_max]

    def held_after(self, places) -> set[int]:
        """The queued jobs that, once `places` (a pass's first admissions, with their commitments)
        are in, no budget room is left for: at their turn later in the same pass they are pended for
        their budget and do nothing else (the room at the last `update`, less those commitments)."""
        spend: Counter = Counter()
        for pl in places:
            parts = getattr(pl.commit, "parts", {})
            for name, amount in pl.commit:
                if name in self.room:
                    lab = self.room[name][2]
                    spend[name] += parts[name].get(lab, 0) if name in parts else amount
        out: set[int] = set()
        for name, used in spend.items():
            x0, left, _ = self.room[name]
            x = x0 - used
            out.update(self._over(name, x, -1 if left is None else self._max_rate(x, left)))
        return out

    @staticmethod
    def _max_rate(x: int, seconds: float) -> int:
        """The largest rate r with accrue(r, seconds) <= x (-1 when x < 0)."""
        if x < 0:
            return -1
        ms = max(0, int(seconds * 1000))
        if not ms:
            return 1 << 62
        return ((x + 1) * ledger.MS_PER_HOUR - 1) // ms

    def park(self, job: Job) -> None:
        name, c, rate = self.key[job.id]
        self._out(name, (c, rate, job.id))
        self.jobs[job.id] = job
        insort(self.by_cost[name], (c, job.id))
        insort(self.by_rate[name], (rate, job.id))
        self.users[job.user] += 1

    def unpark(self, job_id: int) -> Job:
        job = self.jobs.pop(job_id)
        name, c, rate = self.key[job_id]
        for lst, k in ((self.by_cost[name], (c, job_id)), (self.by_rate[name], (rate, job_id))):
            del lst[bisect_left(lst, k)]
        self._in(name, (c, rate, job_id))
        self.users[job.user] -= 1
        if not self.users[job.user]:
            del self.users[job.user]
        return job

    def excludes(self, queue, idle) -> bool:
        """Whether a pass over `queue` without the parked and `idle` jobs decides what the pass over
        all of them does: no queued job may depend on one (none is timed), and the others' burst
        tails come out alike: no burst penalty, or no tail among the jobs of any user of theirs
        (`queue.bursts` counts the parked jobs too; a part of a user's jobs has no more tails)."""
        if queue.timed:
            return False
        if not queue.penalised or not queue.bursts.any():
            return True
        tails, jobs = queue.bursts.tails, queue.jobs
        return not any(tails[u] for u in self.users) and not any(tails[jobs[i].user] for i in idle)


NONE: frozenset = frozenset()


def _steady_until(running, name: str, t: float) -> float:
    """Until when what the running jobs hold of budget `name` stays as at `t`: the first end of a
    commitment among those charged to it (past it a job accrues more than it committed); `t` when one
    accrues with nothing committed or no dispatch time."""
    until = INF
    for j in running:
        if not j.commit or name not in dict(j.commit):
            continue
        rate, committed, cur = ledger.amount_of(j.rates, name), ledger.amount_of(j.commit, name), j.current
        if not rate:
            continue
        if not committed or not (cur and cur.dispatch_time):
            return t
        until = min(until, cur.dispatch_time + committed * 3600 / rate)
    return until


def _quoted(job: Job, nodes) -> set[str]:
    """The GPU models plan() might quote the job at on `nodes`: those of its type, else none ("")."""
    models = {g.model for n in nodes for g in n.gpus if not job.gpu_type or g.model == job.gpu_type}
    return (models or {""}) | ({""} if not job.gpus else set())


def settle(sim, t: float) -> None:
    """At the start of a pass of the replay `sim` (an engine.Simulator): find the jobs a budget now
    provably keeps waiting and bring back the others. Those count as held by their budget; they are
    parked, or, while recently affordable, left out of the pass by id (`sim.idle`). When a pass over
    the rest might not decide what the pass over every pending job does, every parked job comes
    back and none is left out."""
    pk = sim.parking
    sim.idle = NONE
    if pk is None:
        return
    spent = periods.spent_now(sim.cfg.budgets, sim.spent, t)
    idle, park, back = pk.update(t, spent, sim.running.values())
    for i in back:
        bring_back(sim, i)
    if not pk.unchanged:
        sim.budget_held.update(idle)
    if not pk.excludes(sim.queue, idle):
        for i in list(pk.jobs):
            bring_back(sim, i)
        return
    for i in park:
        move_out(sim, i)
    if len(park) < len(idle):
        sim.idle = pk.idle_set(idle, park)


def move_out(sim, job_id: int) -> None:
    job = sim.queue.remove(job_id)
    sim.parking.park(job)
    if sim.queue.penalised:
        sim.queue.bursts.add(job)       # burst tails are of every pending job (Parking.excludes)


def bring_back(sim, job_id: int) -> None:
    job = sim.parking.unpark(job_id)
    if sim.queue.penalised:
        sim.queue.bursts.remove(job)
    sim.queue.add(job)
