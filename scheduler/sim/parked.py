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
longer holds. Per budget the parked jobs are kept sorted by c and by rate, the queued ones by c in
one list per rate (a trace has few rates): the idle set is kept as a cut (x, the largest rate that
runs to the period's end within x) and moves with it, so a pass costs the jobs whose side of the
cut changed, not a walk over the idle ones (a rollover brings every one back at once).

Parked: a job charged to exactly one budget, on one node, with nothing timed (--max-wait, deadline,
begin, hold, dependency) and no earmark. The engine leaves the parked jobs out of plan() only while
nothing else they could change holds: no pending dependency, and burst tails computed alike (`excludes`).
"""
from bisect import bisect_left, bisect_right, insort
from collections import Counter

from .. import units
from ..jobs.model import Job
from ..money import ledger, periods, pricing
from ..policy.capacity import could_ever_hold
from ..settings.config import Config
from .bounds import INF, Bounds, Peak, max_rate
from .held import Holdings
from .queue import timed

# An idle job is moved out of the queue only once its bound exceeds the budget's room at each of the
# last RECENT passes; until then it stays queued, left out of each pass by id. A move costs a queue
# insert and a removal, and the room swings: an end settles a commitment well below its forecast and
# sends hundreds of jobs back, the next admissions take the room again.
RECENT = 128
# Seconds taken off a lower bound of a need: plan() computes the same amount from (now + s) - now,
# which float rounding may put one millisecond lower than s.
SLACK = 0.002


class Parking:
    def __init__(self, cfg: Config, nodes):
        self.cfg, self.nodes = cfg, nodes
        self.budgets = {b.name: b for b in cfg.budgets}
        self.jobs: dict[int, Job] = {}                    # parked: id -> record
        self.key: dict[int, tuple] = {}                   # every parkable pending job: id -> (budget, c, rate)
        self.active: dict[str, dict] = {b: {} for b in self.budgets}      # budget -> rate -> Bounds (queued)
        self.by_cost: dict[str, list] = {b: [] for b in self.budgets}     # budget -> sorted (c, id) parked
        self.by_rate: dict[str, list] = {b: [] for b in self.budgets}     # budget -> sorted (rate, id) parked
        self.users: Counter = Counter()                   # parked jobs per user
        self.room: dict[str, tuple] = {}                  # budget -> (x, time left, period) of the last update
        # budget -> its room in any later period, at most: cap less all the running jobs have committed
        self.later: dict[str, int] = {}
        self.top = {name: ledger.cap(b) - pricing.overhead(b.unit, cfg) for name, b in self.budgets.items()}
        self.period: dict[str, tuple] = {}                # budget -> (label, start, end) of its last period
        # The queued jobs idle at their budget's cut (x, r): c > x and rate > r. Kept as jobs come and
        # go and as the cut moves; `fresh`: those that joined it between two updates.
        self.cut: dict[str, tuple] = {}                   # budget -> (x, r)
        self.idle: set[int] = set()
        self.fresh: list[int] = []
        # What the running jobs hold of each budget (held.py), as of the last update: `sums`, at
        # `synced` = (t, the engine's attempts key).
        self.holdings = {name: Holdings(b) for name, b in self.budgets.items()}
        self.seen: dict[int, list] = {}                   # running id -> the Holdings of its budgets
        self.sums: dict[tuple, int] = {}
        self.synced: tuple = ()
        self.recent = {b: Peak(RECENT) for b in self.budgets}     # budget -> its x at the last RECENT updates
        # What each queued job may need at most (`admits`): (need at its dearest rate, billed seconds),
        # and per budget the queued jobs sorted by each, so that `admits_all` reads two maxima.
        self.most: dict[int, tuple] = {}
        self.by_need: dict[str, list] = {b: [] for b in self.budgets}
        self.by_seconds: dict[str, list] = {b: [] for b in self.budgets}
        self.queued = 0                                   # parkable jobs in the queue
        self._rates: dict = {}
        # update's walk: per budget its config and the structures above (the same objects throughout)
        self._each = [(n, b, self.active[n], self.by_cost[n], self.by_rate[n], self.by_need[n], self.holdings[n],
                       self.recent[n]) for n, b in self.budgets.items()]
        self._mine: dict[tuple, tuple] = {}               # (account, project, budget) -> the budgets it pays

    def __len__(self) -> int:
        return len(self.jobs)

    # -- the queue's jobs ----------------------------------------------------------------------
    def add(self, job: Job) -> None:
        """A job entered the queue (its submit, or a requeue)."""
        k = self._key(job)
        if k is not None:
            (name, c, rate), self.most[job.id] = k
            self.key[job.id] = (name, c, rate)
            self._in(name, c, rate, job.id)

    def remove(self, job_id: int) -> None:
        """A queued job left the queue (started or ended); a parked one never does (it cannot start)."""
        k = self.key.pop(job_id, None)
        if k is not None:
            self._out(k[0], k[1], k[2], job_id)
            del self.most[job_id]

    def _in(self, name: str, c: int, rate: int, job_id: int) -> None:
        """A job joins budget `name`'s queued ones: idle at once if its bound is over the cut."""
        mine = self.active[name].get(rate)
        if mine is None:
            mine = self.active[name][rate] = Bounds()
        mine.add(c, job_id)
        need, seconds = self.most[job_id]
        insort(self.by_need[name], (need, job_id))
        insort(self.by_seconds[name], (seconds, job_id))
        self.queued += 1
        x, r = self.cut.get(name, NO_CUT)
        if c > x and rate > r:
            self.idle.add(job_id)
            self.fresh.append(job_id)

    def _out(self, name: str, c: int, rate: int, job_id: int) -> None:
        mine = self.active[name]
        lst = mine[rate]
        lst.remove(c, job_id)
        if not lst.ids:
            del mine[rate]
        self.idle.discard(job_id)
        need, seconds = self.most[job_id]
        for lst2, k in ((self.by_need[name], (need, job_id)), (self.by_seconds[name], (seconds, job_id))):
            del lst2[bisect_left(lst2, k)]
        self.queued -= 1

    def _key(self, job: Job):
        """((budget, c, rate), (need at the dearest rate, billed seconds)) of a parkable job, else None."""
        if job.nodes > 1 or job.earmark or timed(job):
            return None
        who = (job.account, job.project, job.budget)
        mine = self._mine.get(who)
        if mine is None:
            mine = self._mine[who] = ledger.budgets_for(job, self.cfg.budgets)
        if len(mine) != 1:
            return None
        b = mine[0]
        rate = self._rate(job, b.unit)
        seconds = pricing.billed(pricing.planned_seconds(job, self.cfg), self.cfg)
        dear = self._rate(job, b.unit, dearest=True)
        return (b.name, units.accrue(rate, seconds - SLACK), rate), (units.accrue(dear, seconds + SLACK), seconds)

    def _rate(self, job: Job, unit: str, dearest: bool = False) -> int:
        """The job's cheapest rate on any node that could hold it, over every GPU model it might get;
        or its dearest, over the models plan() might quote it at there or, fitting nowhere, on no node."""
        key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.nodes, job.qos, unit, dearest)
        if key not in self._rates:
            nodes = [n for n in self.nodes if could_ever_hold(job, n)]
            if dearest:
                rates = [pricing.rate(job, unit, model, self.cfg, n) for n in nodes for model in _quoted(job, [n])]
                rates += [pricing.rate(job, unit, model, self.cfg, None) for model in _quoted(job, self.nodes)]
            else:
                rates = [pricing.rate(job, unit, model, self.cfg, n) for n in nodes
                         for model in {"", *(g.model for g in n.gpus)}]
            self._rates[key] = (max if dearest else min)(rates, default=0)
        return self._rates[key]

    def room_to_spare(self, job: Job) -> bool:
        """Whether the budget provably admits the queued job (`admits`) and its room less the job's
        need still holds the smallest bound among its queued jobs: the admission likely leaves room
        for another (easy.py's guess for a window of one)."""
        name = self.key[job.id][0] if self.admits(job) else None
        return name is not None and self.room[name][0] - self.most[job.id][0] >= self._smallest(name)

    def _smallest(self, name: str) -> int:
        """The smallest bound among budget `name`'s queued jobs (at least one)."""
        return min(lst.keys[0][0] for lst in self.active[name].values())

    def admits_all(self, budgeted: int) -> bool:
        """Whether, at the last update, every one of the `budgeted` queued jobs charged to a budget is
        parkable and provably admitted by its budget, as `admits` asks it (then a pass gives none of
        them a budget reason): per budget, the largest need and the longest run against its room."""
        if budgeted != self.queued:
            return False
        for name, needs in self.by_need.items():
            if not needs:
                continue
            if name not in self.room:
                return False
            x, left, _ = self.room[name]
            need = needs[-1][0]
            if need > x or (left is not None and self.by_seconds[name][-1][0] > left and need > self.later[name]):
                return False
        return True

    def admits(self, job: Job) -> bool:
        """Whether the budget provably admits the queued job at the last `update`, before any admission
        of the pass: its forecast at its dearest rate fits the room, and, if it may run past the
        period's end, the room of any later period too (where nothing is spent yet and the running
        jobs hold at most their whole commitments; a later period's part has no overhead)."""
        k = self.key.get(job.id)
        if k is None or k[0] not in self.room:
            return False
        x, left, _ = self.room[k[0]]
        need, seconds = self.most[job.id]
        return need <= x and (left is None or seconds <= left or need <= self.later[k[0]])

    # -- a pass --------------------------------------------------------------------------------
    def update(self, t: float, spent: dict, running, attempts=None) -> tuple[list[int], list[int], list[int]]:
        """(queued ids that became idle, those to park, parked ids to bring back) at the start of a
        pass at `t`: `spent` is what each budget has settled in its current period, `running` the
        jobs on nodes (plan()'s inputs; id -> record), `attempts` a key that changes whenever they do
        (for `known`), given by a caller that tells each start and end (`started`, `ended`); without
        it the running jobs are compared with those of the last update. `idle` is then every queued
        idle id; an idle job stays queued while its bound is within the budget's recent room
        (`RECENT`), and the engine leaves it out of the pass by id."""
        if attempts is None:
            self.sync(running)
        self.synced, self.sums = (t, attempts), {}
        new: list[int] = []
        park: list[int] = []
        back: list[int] = []
        self.room = room = {}
        sums, cuts = self.sums, self.cut
        for name, b, active, cost, by_rate, needs, holdings, recent in self._each:
            if not active and not cost:
                continue
            if b.period == "none":
                left, lab = None, ""
            else:
                lab, start, end = self.period.get(name, NO_PERIOD)
                if not start <= t < end:
                    lab = periods.current(b, t)
                    start, end = periods.bounds(b.period, lab, b.timezone)
                    self.period[name] = (lab, start, end)
                left = end - t - SLACK
            held = sums[(name, lab)] = holdings.at(t, lab)
            top = self.top[name]           # the cap less the per-attempt overhead
            x = top - spent.get(name, 0) - held
            room[name] = (x, left, lab)
            self.later[name] = top - holdings.committed
            # The largest rate whose run to the period's end fits in x: accrue(rate, left) <= x.
            r_max = max_rate(x, left)
            if not cost and (not needs or needs[-1][0] <= min(x, cuts.get(name, NO_CUT)[0])):
                # Nothing parked, and every queued job's bound (at most its need) within the room at the
                # old cut and the new one: no job of the budget is idle at either, nothing moves.
                cuts[name] = (x, r_max)
                recent.push(x)
                continue
            if cost and cost[0][0] <= x:
                back += [jid for _, jid in cost[:bisect_right(cost, (x, INF))]]
            if by_rate and by_rate[0][0] <= r_max:
                back += [jid for _, jid in by_rate[:bisect_right(by_rate, (r_max, INF))]]
            new += self._move(name, x, r_max)
            peak = self.recent[name].push(x)
            park += self._over(name, peak, max_rate(peak, left))
        idle = self.idle
        new += [i for i in self.fresh if i in idle]
        self.fresh = []
        return new, park, list(dict.fromkeys(back))

    def _move(self, name: str, x: int, r: int) -> list[int]:
        """The idle set drawn at budget `name`'s new cut (x, r): per rate, only the jobs between the
        old cut and the new one go in or out. The ids that went in."""
        x0, r0 = self.cut.get(name, NO_CUT)
        self.cut[name] = (x, r)
        if x == x0 and r == r0:
            return []
        idle, added = self.idle, []
        for rate, lst in self.active[name].items():
            was, now = rate > r0, rate > r
            if was and now:
                lo, hi = (x, x0) if x < x0 else (x0, x)
                ids = lst.ids[lst.over(lo):lst.over(hi)]
                if x < x0:
                    added += ids
                else:
                    idle.difference_update(ids)
            elif was:
                idle.difference_update(lst.ids[lst.over(x0):])
            elif now:
                added += lst.ids[lst.over(x):]
        idle.update(added)
        return added

    def known(self, t: float, attempts) -> dict:
        """(budget, period) -> what the running jobs hold there, for BudgetBook (plan()'s `held`): the
        sums of the last update, if it was at `t` with the same running `attempts`."""
        return self.sums if attempts is not None and self.synced == (t, attempts) else {}

    def started(self, job: Job) -> None:
        """The job is running now (as a caller that gives `update` its `attempts` tells it)."""
        mine = self.seen[job.id] = [h for name, _ in job.commit if (h := self.holdings.get(name))]
        for h in mine:
            h.start(job)

    def ended(self, job_id: int) -> None:
        for h in self.seen.pop(job_id, ()):
            h.end(job_id)

    def sync(self, running: dict) -> None:
        """The running jobs (id -> record) now: those that started or ended since the last sync are
        told to their budgets' Holdings."""
        ids = set(running)
        for i in self.seen.keys() - ids:
            self.ended(i)
        for i in ids - self.seen.keys():
            self.started(running[i])

    def _over(self, name: str, x: int, r: int) -> list[int]:
        """The queued jobs of budget `name` whose bound exceeds x: c > x and rate > r (r: the largest
        rate whose run to the period's end fits in x; -1 without periods)."""
        return [i for rate, lst in self.active[name].items() if rate > r for i in lst.ids[lst.over(x):]]

    def held_after(self, places) -> set[int]:
        """The queued jobs, idle ones aside, for which no budget room is left once `places` (a pass's
        first admissions, with their commitments) are in: at their turn later in the same pass they
        are pended for their budget and do nothing else (the room at the last `update`, less those
        commitments)."""
        spend: Counter = Counter()
        for pl in places:
            spend.update(dict(self.takes(pl.commit)))
        out: set[int] = set()
        for name, used in spend.items():
            if not used:
                continue
            x0, left, _ = self.room[name]
            r0 = self.cut[name][1]
            x = x0 - used
            r = max_rate(x, left)
            for rate, lst in self.active[name].items():
                if rate > r:       # over the lower cut, and not over the pass's own (the idle ones)
                    out.update(lst.ids[lst.over(x):lst.over(x0) if rate > r0 else len(lst.ids)])
        return out

    def takes(self, commit):
        """(budget, its current period's part) of an admission's commitment (a Quote), per budget in `room`."""
        parts = getattr(commit, "parts", {})
        for name, amount in commit:
            if name in self.room:
                yield name, parts[name].get(self.room[name][2], 0) if name in parts else amount

    def priced_out(self, job_id: int, used: int) -> bool:
        """Whether the queued job's bound exceeds its budget's room at the last update less `used`
        (as `held_after` reads it): then its budget refuses it."""
        name, c, rate = self.key[job_id]
        x0, left, _ = self.room[name]
        return c > x0 - used and rate > max_rate(x0 - used, left)

    def park(self, job: Job) -> None:
        name, c, rate = self.key[job.id]
        self._out(name, c, rate, job.id)
        self.jobs[job.id] = job
        insort(self.by_cost[name], (c, job.id))
        insort(self.by_rate[name], (rate, job.id))
        self.users[job.user] += 1

    def unpark(self, job_id: int) -> Job:
        job = self.jobs.pop(job_id)
        name, c, rate = self.key[job_id]
        for lst, k in ((self.by_cost[name], (c, job_id)), (self.by_rate[name], (rate, job_id))):
            del lst[bisect_left(lst, k)]
        self._in(name, c, rate, job_id)
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
NO_CUT = (INF, -1)      # a budget no update has seen yet: no job is idle
NO_PERIOD = ("", INF, -INF)


def _quoted(job: Job, nodes) -> set[str]:
    """The GPU models plan() might quote the job at on `nodes`: those of its type, else none ("")."""
    models = {g.model for n in nodes for g in n.gpus if not job.gpu_type or g.model == job.gpu_type}
    return (models or {""}) | ({""} if not job.gpus else set())
