"""A spent budget's waiting jobs, left out of a backfill replay's passes by their budget floors.

Once a budget is spent, its jobs wait for the next period (or for ever) while the cluster may have
room for them: each pass would quote them and pend them for the budget, thousands a pass, for
nothing. Such a job does nothing in a pass (policy/__init__.py: one its budget would not admit is
neither placed, nor a reservation or a preemptor), so the pass over the rest decides the same; it is
counted held by its budget (engine `budget_held`), as that pass would count it.

Which jobs: those whose budget floor (policy/floors.py `Floors.floor`: its least need over its run
and its least rate, on any node and GPU model) exceeds the room the budget leaves at the pass start
(policy/budget.py `BudgetBook.room`: c > x and rate > r) — the bound by which the backfill-off walk
(policy/strict.py) pends a group unquoted; a pass only adds commitments, so the bound holds to its
end. Per budget the queued jobs are kept per rate, sorted by c: the idle set at a room is a few
slices, copied in C, drawn again only when the room moves; a job that joins or leaves is put in or
out of it as it comes. The BudgetBook of the pass start also gives plan() what the running jobs hold
(`known`), summed once a pass.

Kept: a job charged to exactly one budget, on one node, with nothing timed (--max-wait, deadline,
begin, hold, dependency) and no earmark. The engine leaves the idle jobs out of a pass only while
the burst tails of the rest come out alike (`excludes`). The daemon keeps no such set: its passes
record every job's reason with the quote's figures (policy/floors.py says the same of floors).
"""
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from ..jobs.model import Job, Node
from ..jobs.plan import Place
from ..money import ledger
from ..money.ledger import Budget
from ..policy.budget import SLACK, BudgetBook, max_rate
from ..policy.capacity import shape
from ..policy.floors import Floors, Smallest
from ..settings.config import Config
from .queue import Queue, timed

INF = float("inf")
# admits_all reads the needs of a budget's jobs that are not idle one by one up to this many.
AWAKE = 256
NONE: frozenset[int] = frozenset()


class ByCost:
    """One budget's queued jobs of one rate: (c, id) sorted, with their ids alongside (a run of them
    is a slice copied in C, not a walk over the pairs)."""
    __slots__ = ("keys", "ids")

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.ids: list[int] = []

    def add(self, c: int, job_id: int) -> None:
        at = bisect_right(self.keys, (c, job_id))
        self.keys.insert(at, (c, job_id))
        self.ids.insert(at, job_id)

    def remove(self, c: int, job_id: int) -> None:
        at = bisect_left(self.keys, (c, job_id))
        del self.keys[at], self.ids[at]

    def over(self, x: float) -> int:
        """The index of the first job whose c exceeds x."""
        return bisect_right(self.keys, (x, INF))


class Idle:
    def __init__(self, cfg: Config, nodes: Sequence[Node]) -> None:
        self.cfg = cfg
        self.floors = Floors(cfg, nodes)
        self.budgets = {b.name: b for b in cfg.budgets}
        self.key: dict[int, tuple[str, int, int]] = {}       # kept queued job -> (budget, c, rate)
        self.most: dict[int, tuple[int, float]] = {}         # kept queued job -> Floors.most (dearest need, seconds)
        self.by: dict[str, dict[int, ByCost]] = {n: {} for n in self.budgets}      # budget -> rate -> jobs
        # per budget: the largest dearest need and billed seconds of its kept jobs (as negated least)
        self.needs = {n: Smallest() for n in self.budgets}
        self.runs = {n: Smallest() for n in self.budgets}
        self.count = {n: 0 for n in self.budgets}
        self.cut: dict[str, tuple[int, int]] = {}            # budget -> (x, r) of the last update
        self.left: dict[str, float | None] = {}             # budget -> seconds to its period's end (None: no periods)
        self.lab: dict[str, str] = {}                        # budget -> its current period's label ("": none)
        self.idle: set[int] = set()                          # the queued jobs over their budget's cut
        self.shape: dict[int, tuple[int, str, int, int]] = {}  # kept queued job -> its request shape
        self.shapes: Counter[tuple[int, str, int, int]] = Counter()    # request shape -> idle jobs of it
        self.fresh: list[int] = []                           # those that joined it since the last update
        self.book: BudgetBook | None = None
        self.synced: tuple[float, object] | tuple[()] = ()
        self.held: dict[tuple[str, str], int] = {}
        self._mine: dict[tuple[str, str, str], tuple[Budget, ...]] = {}

    def __len__(self) -> int:
        return len(self.key)

    # -- the queue's jobs ----------------------------------------------------------------------
    def add(self, job: Job) -> None:
        """A job entered the queue (its submit, a requeue, a new forecast)."""
        if job.nodes > 1 or job.earmark or timed(job):
            return
        who = (job.account, job.project, job.budget)
        mine = self._mine.get(who)
        if mine is None:
            mine = self._mine[who] = ledger.budgets_for(job, self.cfg.budgets)
        if len(mine) != 1:
            return
        (name, c, rate), = self.floors.floor(job)
        need, seconds = self.most[job.id] = self.floors.most(job, mine[0])
        self.key[job.id] = (name, c, rate)
        s = self.shape[job.id] = shape(job)
        self.by[name].setdefault(rate, ByCost()).add(c, job.id)
        self.needs[name].add(-need)
        self.runs[name].add(-int(seconds * 1000))
        self.count[name] += 1
        x, r = self.cut.get(name, NO_CUT)
        if c > x and rate > r:
            self.idle.add(job.id)
            self.shapes[s] += 1
            self.fresh.append(job.id)

    def remove(self, job_id: int) -> None:
        """A queued job left the queue (started, ended, or about to come back with a new forecast)."""
        k = self.key.pop(job_id, None)
        if k is None:
            return
        name, c, rate = k
        lst = self.by[name][rate]
        lst.remove(c, job_id)
        if not lst.ids:
            del self.by[name][rate]
        need, seconds = self.most.pop(job_id)
        self.needs[name].remove(-need)
        self.runs[name].remove(-int(seconds * 1000))
        self.count[name] -= 1
        s = self.shape.pop(job_id)
        if job_id in self.idle:
            self.idle.discard(job_id)
            self.shapes[s] -= 1

    # -- a pass start --------------------------------------------------------------------------
    def update(self, t: float, spent: dict[str, int], running: list[Job], attempts: object) -> list[int]:
        """The room of each budget at the start of a pass at `t` (`spent`: what each has settled in
        its current period; `running`: the jobs on nodes; `attempts`: a key that changes whenever
        they do), the idle set drawn at it. The ids that became idle since the last update."""
        book = self.book = BudgetBook(self.cfg, spent, running, t)
        self.synced = (t, attempts)
        held: dict[tuple[str, str], int] = {}
        new: list[int] = []
        for name, b in self.budgets.items():
            x, r, _ = book.room(name)
            if b.period == "none":
                self.left[name], self.lab[name] = None, ""
                held[(name, "")] = book.committed[name]
            else:
                lab, end = book.periods[name]
                self.left[name], self.lab[name] = end - t - SLACK, lab
                held[(name, lab)] = book.held[(name, lab)]
            new += self._move(name, x, r)
        self.held = held
        idle = self.idle       # (those that joined since the last update, still idle at the new cuts)
        new += [i for i in self.fresh if i in idle]
        self.fresh = []
        return new

    def _move(self, name: str, x: int, r: int) -> list[int]:
        """The idle set drawn at budget `name`'s new cut (x, r): per rate, only the jobs between the
        old cut and the new one go in or out. The ids that went in."""
        x0, r0 = self.cut.get(name, NO_CUT)
        self.cut[name] = (x, r)
        if x == x0 and r == r0:
            return []
        idle, added = self.idle, []
        for rate, lst in self.by[name].items():
            was, now = rate > r0, rate > r
            if was and now:
                lo, hi = (x, x0) if x < x0 else (x0, x)
                ids = lst.ids[lst.over(lo):lst.over(hi)]
                if x < x0:
                    added += ids
                else:
                    self._wake(ids)
            elif was:
                self._wake(lst.ids[lst.over(x0):])
            elif now:
                added += lst.ids[lst.over(x):]
        idle.update(added)
        self.shapes.update(map(self.shape.__getitem__, added))
        return added

    def _wake(self, ids: list[int]) -> None:
        """These idle jobs are no longer."""
        self.idle.difference_update(ids)
        self.shapes.subtract(Counter(map(self.shape.__getitem__, ids)))

    def known(self, t: float, attempts: object) -> dict[tuple[str, str], int]:
        """(budget, period) -> what the running jobs hold there (plan()'s `held`), as the update's
        BudgetBook summed it, if that update was at `t` with the same running `attempts`."""
        return self.held if self.synced == (t, attempts) else {}

    def excludes(self, queue: Queue) -> bool:
        """Whether a pass over `queue` without the idle jobs decides what the pass over all of them
        does: no queued job may depend on one (none is timed), and the others' burst tails come out
        alike (no burst penalty, or no tail among the jobs of any user of the idle ones)."""
        if queue.timed:
            return False
        if not queue.penalised or not queue.bursts.any():
            return True
        tails, jobs = queue.bursts.tails, queue.jobs
        return not any(tails[u] for u in {jobs[i].user for i in self.idle})

    # -- what easy.py asks of a pass -----------------------------------------------------------
    def admits(self, job: Job) -> bool:
        """Whether the budget provably admits the kept queued job at the last update, before any
        admission of the pass (Floors.admits: its dearest quote, in every period its run may touch)."""
        k = self.key.get(job.id)
        return k is not None and self.book is not None and Floors.admits({k[0]: self.most[job.id]}, self.book)

    def admits_all(self, budgeted: int) -> bool:
        """Whether, at the last update, every one of the `budgeted` queued jobs charged to a budget is
        kept here and, unless idle (counted held already), provably admitted by its budget (then a
        pass gives none of them a new budget reason): per budget, the largest dearest need over the
        longest run of its jobs not idle — read off the jobs themselves when they are few (`AWAKE`),
        else of all its jobs (more than enough)."""
        if budgeted != len(self.key) or self.book is None:
            return False
        most = {}
        for name, n in self.count.items():
            if not n:
                continue
            x, r = self.cut[name]
            ends = [(lst, lst.over(x) if rate > r else len(lst.ids)) for rate, lst in self.by[name].items()]
            awake = sum(k for _, k in ends)
            if not awake:
                continue           # every one idle: counted held
            if awake < n and awake <= AWAKE:
                got = [self.most[i] for lst, k in ends for i in lst.ids[:k]]
                most[name] = (max(need for need, _ in got), max(sec for _, sec in got))
            else:
                most[name] = (-self.needs[name].least(), -self.runs[name].least() / 1000)
        return Floors.admits(most, self.book)

    def room_to_spare(self, job: Job) -> bool:
        """Whether the budget provably admits the queued job (`admits`) and its room less the job's
        dearest need still holds the smallest floor among its queued jobs: the admission likely
        leaves room for another (easy.py's guess for a window of one)."""
        if not self.admits(job):
            return False
        name = self.key[job.id][0]
        smallest = min(lst.keys[0][0] for lst in self.by[name].values())
        return self.cut[name][0] - self.most[job.id][0] >= smallest

    def takes(self, commit: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        """(budget, its current period's part) of an admission's commitment (a Quote), per budget
        with kept jobs."""
        parts = getattr(commit, "parts", {})
        for name, amount in commit:
            if name in self.cut:
                yield name, parts[name].get(self.lab[name], 0) if name in parts else amount

    def _rate_at(self, name: str, x: int) -> int:
        left = self.left[name]
        return -1 if left is None else max_rate(x, left)

    def held_after(self, places: Iterable[Place]) -> set[int]:
        """The queued jobs, idle ones aside, for which no budget room is left once `places` (a pass's
        first admissions, with their commitments) are in: at their turn later in the same pass they
        are pended for their budget and do nothing else (the room at the last update, less those
        commitments)."""
        spend: dict[str, int] = {}
        for pl in places:
            for name, used in self.takes(pl.commit):
                spend[name] = spend.get(name, 0) + used
        out: set[int] = set()
        for name, used in spend.items():
            if not used:
                continue
            x0, r0 = self.cut[name]
            x = x0 - used
            r = self._rate_at(name, x)
            for rate, lst in self.by[name].items():
                if rate > r:       # over the lower cut, and not over the pass's own (the idle ones)
                    out.update(lst.ids[lst.over(x):lst.over(x0) if rate > r0 else len(lst.ids)])
        return out

    def priced_out(self, job_id: int, used: int) -> bool:
        """Whether the queued job's floor exceeds its budget's room at the last update less `used`
        (as `held_after` reads it): then its budget refuses it."""
        name, c, rate = self.key[job_id]
        x = self.cut[name][0] - used
        return c > x and rate > self._rate_at(name, x)


NO_CUT = (INF, -1)      # a budget no update has seen yet: no job is idle
