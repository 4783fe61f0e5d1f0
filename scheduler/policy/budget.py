"""The budget gate: every budget a job is charged to must have room for its forecast.

For each budget B of the job: spent(B) + committed(B) + forecast(job) ≤ limit(B) × (1 − reserve).
`committed` is what running jobs may still spend (their commitment minus what they have accrued),
plus what this pass has already admitted. A job that would fit once those commitments settle pends
`BudgetReserved`; one that would not fit even then pends `BudgetExhausted`.

A periodic budget is checked period by period: the job's forecast is split over the periods its
allocation would span if it started now (periods.split), and each part must fit that period's cap
next to what is spent there (only the current period has spending) and what running jobs hold
there. A long job thus holds each week only the week's share of its cost, not its whole cost in
every week it touches.
"""
from collections.abc import Iterable, Sequence
from functools import partial

from ..jobs import states
from ..jobs.model import Job, Node
from ..money import balance, ledger, periods, pricing
from ..money.ledger import Budget
from ..settings.config import Config
from ..units import MS_PER_HOUR, accrue, fmt_money

# (budget, period label) -> what the running jobs hold there ("" for a budget without periods).
Held = dict[tuple[str, str], int]
# Seconds taken off a floor's run: a quote computes (now + s) - now, which float rounding may put one
# millisecond below s.
SLACK = 0.002


class BudgetBook:
    """Per-budget spent and committed amounts during one plan pass."""

    def __init__(self, cfg: Config, spent: dict[str, int], running: Sequence[Job], now: float,
                 held: Held | None = None) -> None:
        """`held`: (budget, period) -> what the running jobs hold there, ("" without periods: what
        they have committed), where the caller knows it already (the replay's sim/idle.py sums it once
        a pass start, for every call of that pass); the rest is summed here."""
        self.cfg, self.now = cfg, now
        self.money = partial(fmt_money, currency=cfg.rates.currency)
        self.spent = {b.name: spent.get(b.name, 0) for b in cfg.budgets}
        self._on_nodes = running
        self._running: list[Job] | None = None
        self._committed: dict[str, int] | None = None
        self._added: dict[str, int] = {}                 # this pass's admissions, per budget
        self.known = held or {}
        self.held: dict[tuple[str, str], int] = dict(self.known)   # (periodic budget, period) -> held there
        self.mine: dict[tuple[str, str, str], tuple[Budget, ...]] = {}   # (account, project, budget) -> its budgets
        self.texts: dict[tuple[str, str, int, int], str] = {}           # (budget, period, spent, held) -> _state()
        self.named, self.caps = cfg.budget_caps
        # Per periodic budget: (label, end) of the period `now` is in.
        self.periods = {b.name: (lab, periods.bounds(b.period, lab, b.timezone)[1])
                        for b in cfg.budgets if b.period != "none" for lab in (periods.current(b, now),)}

    @property
    def running(self) -> list[Job]:
        """The running jobs with a commitment: listed on first use (a pass whose caller knows what
        they hold never walks them)."""
        if self._running is None:
            self._running = [j for j in self._on_nodes if j.commit]
        return self._running

    @property
    def committed(self) -> dict[str, int]:
        """budget -> what running jobs have committed to it and not yet settled (accrued included:
        it is not settled either), plus this pass's admissions. Summed on first use: a pass over
        periodic budgets only never needs it."""
        if self._committed is None:
            now, known = self.now, self.known
            out = {b.name: known.get((b.name, ""), 0) for b in self.cfg.budgets}
            summed = {b.name for b in self.cfg.budgets if b.period != "none" or (b.name, "") not in known}
            for j in self.running:
                for name, _ in j.commit:
                    if name in summed:
                        out[name] += balance.outstanding(j, name, now) + balance.accrued(j, name, now)
            for name, amount in self._added.items():
                out[name] += amount
            self._committed = out
        return self._committed

    def quote(self, job: Job, gpu_model: str, node: Node | None = None) -> tuple["Quote", tuple[tuple[str, int], ...]]:
        """(commit, rates) the job would take on `node`, which has `gpu_model` GPUs. `commit` is a
        Quote: a periodic budget's forecast also split over the periods it would span from now."""
        who = (job.account, job.project, job.budget)
        bs = self.mine.get(who)
        if bs is None:
            bs = self.mine[who] = ledger.budgets_for(job, self.cfg.budgets)
        cfg, now = self.cfg, self.now
        seconds = pricing.billed(pricing.planned_seconds(job, cfg), cfg)
        rates: list[tuple[str, int]] = []
        pairs: list[tuple[str, int]] = []
        for b in bs:
            # pricing.forecast at this rate, the seconds computed once
            rate = pricing.rate(job, b.unit, gpu_model, cfg, node)
            rates.append((b.name, rate))
            pairs.append((b.name, accrue(rate, seconds) + pricing.overhead(b.unit, cfg)))
        commit = Quote(pairs)
        for b, (name, rate) in zip(bs, rates):
            if b.period == "none":
                continue
            lab, end = self.periods[name]
            extra = pricing.overhead(b.unit, cfg)
            if now < now + seconds <= end:
                # Within the current period: what periods.split gives for one span, computed alike.
                commit.parts[name] = {lab: accrue(rate, now + seconds - now) + extra}
            else:
                commit.parts[name] = periods.split(b, rate, now, now + seconds, extra, lambda s: s)
        return commit, tuple(rates)

    def _held(self, b: Budget, lab: str) -> int:
        """What running jobs hold in period `lab` of periodic budget `b` (accrued there included)."""
        if (b.name, lab) not in self.held:
            span = periods.bounds(b.period, lab, b.timezone)
            name, now = b.name, self.now
            self.held[(b.name, lab)] = sum(sum(balance.in_span(j, name, now, span)) for j in self.running
                                           if name in dict(j.commit))
        return self.held[(b.name, lab)]

    def _blocked_periods(self, b: Budget, parts: dict[str, int]) -> tuple[str, str] | None:
        cap, current = self.caps[b.name], self.periods[b.name][0]
        for lab, need in (sorted(parts.items()) if len(parts) > 1 else parts.items()):
            spent = self.spent[b.name] if lab == current else 0
            held = self._held(b, lab)
            if spent + held + need <= cap:
                continue
            detail = f"needs {self.money(need, b.unit)} in {lab}; " + self._state(b, lab, spent, held)
            return (states.BUDGET_RESERVED if spent + need <= cap else states.BUDGET_EXHAUSTED), detail
        return None

    def _state(self, b: Budget, lab: str, spent: int, held: int) -> str:
        """The budget's side of a budget reason's detail: the same for every job judged while its
        spent and committed amounts stay as they are (formatted once, not per job)."""
        key = (b.name, lab, spent, held)
        text = self.texts.get(key)
        if text is None:
            cap = self.caps[b.name]
            text = self.texts[key] = (
                f"budget {b.name}{' ' + lab if lab else ''}: limit {self.money(b.limit, b.unit)} (reserve {b.reserve:.0%}),"
                f" spent {self.money(spent, b.unit)}, committed {self.money(held, b.unit)},"
                f" available {self.money(cap - spent - held, b.unit)}")
        return text

    def blocked(self, commit: Iterable[tuple[str, int]]) -> tuple[str, str] | None:
        """(reason, detail) for the first budget without room for `commit` (a `quote`), else None."""
        parts: dict[str, dict[str, int]] = getattr(commit, "parts", {})
        for name, need in commit:       # a quote lists its budgets in the config's order
            b = self.named[name]
            if name in parts:
                broke = self._blocked_periods(b, parts[name])
                if broke:
                    return broke
                continue
            cap, spent, held = self.caps[name], self.spent[name], self.committed[name]
            if spent + held + need <= cap:
                continue
            detail = f"needs {self.money(need, b.unit)}; " + self._state(b, "", spent, held)
            reason = states.BUDGET_RESERVED if spent + need <= cap else states.BUDGET_EXHAUSTED
            return reason, detail
        return None

    def commit(self, commit: Iterable[tuple[str, int]]) -> None:
        for name, amount in commit:
            self._added[name] = self._added.get(name, 0) + amount
            if self._committed is not None:
                self._committed[name] += amount
        periodic: dict[str, dict[str, int]] = getattr(commit, "parts", {})
        for name, parts in periodic.items():
            b = next(b for b in self.cfg.budgets if b.name == name)
            for lab, amount in parts.items():
                self.held[(name, lab)] = self._held(b, lab) + amount

    def room(self, name: str) -> tuple[int, int, str]:
        """What budget `name` leaves now, after this pass's admissions (which only take more: the
        figures only fall along a pass), for a `Floors` bound: (x, r, reason). A job whose every quote
        needs at least c over its run at a rate of at least `rate` an hour pends for this budget when
        c > x and `rate` > r: its need in the current period is at least min(c, what `rate` accrues to
        the period's end) plus the overhead, and x is the room left for that (r: the largest rate
        that accrues no more than x by the period's end; without periods none: -1). `reason`:
        BudgetExhausted where spending alone leaves no room, else BudgetReserved (the figure that
        tells each job's apart is not computed)."""
        b = self.named[name]
        cap, spent, extra = self.caps[name], self.spent[name], pricing.overhead(b.unit, self.cfg)
        if b.period == "none":
            x = cap - spent - self.committed[name] - extra
            r = -1
        else:
            lab, end = self.periods[name]
            x = cap - spent - self._held(b, lab) - extra
            r = max_rate(x, end - self.now - SLACK)
        return x, r, states.BUDGET_RESERVED if spent + extra <= cap else states.BUDGET_EXHAUSTED


ALL_RATES = 1 << 62


def max_rate(x: int, seconds: float) -> int:
    """The largest rate r with accrue(r, seconds) <= x (-1 where none)."""
    if x < 0:
        return -1
    ms = max(0, int(seconds * 1000))
    return ((x + 1) * MS_PER_HOUR - 1) // ms if ms else ALL_RATES


# The shortest a period can be (a DST change takes an hour away): a job whose time limit covers one
# whole period pays at least this much of its allocation in some period.
SHORTEST = {"week": 7 * 86400 - 3600, "month": 28 * 86400 - 3600, "quarter": 90 * 86400 - 3600}


class Quote(tuple[tuple[str, int], ...]):
    """A job's commitment per budget, (name, amount) pairs, with `parts`: for each periodic budget,
    period label -> the part of the amount that falls in that period."""
    parts: dict[str, dict[str, int]]

    def __new__(cls, pairs: Iterable[tuple[str, int]] = ()) -> "Quote":
        q = super().__new__(cls, pairs)
        q.parts = {}
        return q


def affordable_at_any_length(job: Job, gpu_model: str, cfg: Config) -> bool:
    """Whether `never_affordable` passes the job whatever its time limit or estimate: each of its
    budgets has periods, and a run of one whole (shortest) period fits the cap (what no start can
    avoid paying in one period grows with the run, up to that). A caller with many jobs of one
    request asks this once for all of them."""
    for b in ledger.budgets_for(job, cfg.budgets):
        if b.period == "none":
            return False
        need = accrue(pricing.rate(job, b.unit, gpu_model, cfg), SHORTEST[b.period]) + pricing.overhead(b.unit, cfg)
        if need > ledger.cap(b):
            return False
    return True


def never_affordable(job: Job, gpu_model: str, cfg: Config, spent: dict[str, int] | None = None) -> str | None:
    """The refusal line for a job whose forecast exceeds what a budget could ever allow: its cap, or,
    for a budget without periods (spending never starts again), what is left of it after `spent`.
    What running jobs have committed is not counted: it settles, and the job can then be paid
    (it pends BudgetReserved meanwhile)."""
    money = partial(fmt_money, currency=cfg.rates.currency)
    for b in ledger.budgets_for(job, cfg.budgets):
        need = pricing.forecast(job, b.unit, gpu_model, cfg)
        if b.period != "none":
            # Its cost is spread over the periods it spans: what no start time can avoid is the
            # share of one whole (shortest) period, or all of it when it fits in one period.
            seconds = min(pricing.billed(pricing.planned_seconds(job, cfg), cfg), SHORTEST[b.period])
            need = accrue(pricing.rate(job, b.unit, gpu_model, cfg), seconds) + pricing.overhead(b.unit, cfg)
            if need > ledger.cap(b):
                return (f"budget {b.name}: job would cost {money(need, b.unit)} in one {b.period}, "
                        f"limit {money(b.limit, b.unit)} a {b.period}, available at most "
                        f"{money(ledger.cap(b), b.unit)} (reserve {b.reserve:.0%})")
            continue
        if need > ledger.cap(b):
            return (f"budget {b.name}: job would cost {money(need, b.unit)}, "
                    f"limit {money(b.limit, b.unit)}, available at most {money(ledger.cap(b), b.unit)}"
                    f" (reserve {b.reserve:.0%})")
        used = (spent or {}).get(b.name, 0) if b.period == "none" else 0
        if need > ledger.cap(b) - used:
            return (f"budget {b.name}: job would cost {money(need, b.unit)}, only "
                    f"{money(max(0, ledger.cap(b) - used), b.unit)} is left of its limit "
                    f"{money(b.limit, b.unit)} (spent {money(used, b.unit)}, reserve {b.reserve:.0%}, "
                    f"no period: it is never renewed)")
    return None
