"""Budget balances — what `labq budget` shows and the scheduler's budget checks hold — as pure
arithmetic in integer micro-units, over any objects with the fields read here.

Apart from ledger.py so that the thin CLI (`labq budget`) computes them without the job model and
dataclasses (~14 ms of CPU, issue 39 item 4): a budget is anything with ledger.Budget's fields (the
config's, or the client settings cache's), a running job anything with model.Job's commit, rates and
current (.start_time, .dispatch_time), an override anything with ledger.Override's fields.
"""
from __future__ import annotations

from collections import namedtuple

from ..units import accrue
from . import periods

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: the thin CLI (`labq budget`) imports this module without typing
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Protocol

    class Started(Protocol):
        """What a balance reads of an attempt: model.Attempt's times."""
        @property
        def start_time(self) -> float | None: ...
        @property
        def dispatch_time(self) -> float | None: ...

    class Running(Protocol):
        """What a balance reads of a running job: model.Job's commit, rates and current attempt."""
        @property
        def commit(self) -> Sequence[tuple[str, int]]: ...
        @property
        def rates(self) -> Sequence[tuple[str, int]]: ...
        @property
        def current(self) -> Started | None: ...

    class Budgeted(Protocol):
        """What a balance reads of a budget: ledger.Budget's fields (the config's, or the client
        settings cache's record of one)."""
        @property
        def name(self) -> str: ...
        @property
        def unit(self) -> str: ...
        @property
        def limit(self) -> int: ...
        @property
        def overrides(self) -> int: ...
        @property
        def period(self) -> str: ...
        @property
        def timezone(self) -> str: ...

    class Raise(Protocol):
        """What a balance reads of an override: ledger.Override's fields."""
        @property
        def budget(self) -> str: ...
        @property
        def amount(self) -> int: ...
        @property
        def state(self) -> str: ...
        @property
        def expires(self) -> float: ...


def amount_of(pairs: Iterable[tuple[str, int]], budget: str) -> int:
    """The amount for `budget` in a job's (budget, amount) pairs (its commit or rates), else 0: a
    job pays one budget or two, and a scheduler pass asks about every running job."""
    for name, amount in pairs:
        if name == budget:
            return amount
    return 0


def outstanding(job: Running, budget: str, now: float) -> int:
    """A running job's commitment to `budget` minus what it has accrued so far (never below 0)."""
    committed = amount_of(job.commit, budget)
    return max(0, committed - accrued(job, budget, now)) if committed else 0


def accrued(job: Running, budget: str, now: float) -> int:
    """What the running attempt has cost `budget` so far: since its process started (as it will be
    charged, ledger.run_span), since its admission while the start is not known yet."""
    return accrue(amount_of(job.rates, budget), now - _began(job, now))


def _began(job: Running, now: float) -> float:
    cur = job.current
    if cur is None:
        return now
    return max(cur.start_time or 0, cur.dispatch_time or 0) or now


def in_span(job: Running, budget: str, now: float, span: tuple[float, float]) -> tuple[int, int]:
    """(accrued, outstanding) of a running job's commitment to `budget` inside one period
    `span` = [from, to): what it has cost there so far, and what its commitment still holds there.

    The commitment covers [start, start + commit / rate) (the process's start, its dispatch until
    that is known); a periodic budget is held, and
    spends, in each period only the part of it that falls in that period."""
    rate = amount_of(job.rates, budget)
    d = _began(job, now)
    lo, hi = max(d, span[0]), span[1]
    acc = accrue(rate, min(now, hi) - lo) if now > lo else 0
    committed = amount_of(job.commit, budget)
    if not committed or not rate:
        return acc, 0
    part = accrue(rate, min(d + committed * 3600 / rate, hi) - lo)
    return acc, max(0, part - acc)


class Balance(namedtuple("Balance", "name unit limit spent committed accrued overrides period", defaults=(0, ""))):
    """A budget's balance in micro-units of its unit: `overrides` what active overrides add to the
    limit, `period` the label of the period `spent` belongs to ("" = no period). (A named tuple, not
    a dataclass: see above.)"""
    __slots__ = ()

    @property
    def available(self) -> int:
        left: int = self.limit + self.overrides - self.spent - self.committed - self.accrued
        return left


def balance(b: Budgeted, spent: int, running: Iterable[Running], now: float, period: str = "",
            span: tuple[float, float] | None = None) -> Balance:
    """The budget as `labq budget` shows it. `committed` is what running jobs may still spend;
    with `span` (a periodic budget's current period), only what they spend and hold inside it."""
    mine = [j for j in running if b.name in dict(j.commit)]
    if span is not None:
        parts = [in_span(j, b.name, now, span) for j in mine]
        return Balance(b.name, b.unit, b.limit, spent, committed=sum(o for _, o in parts),
                       accrued=sum(a for a, _ in parts), overrides=b.overrides, period=period)
    return Balance(b.name, b.unit, b.limit, spent,
                   committed=sum(outstanding(j, b.name, now) for j in mine),
                   # Not capped at the commitment: an attempt that outruns it (forecast mode) really
                   # costs that much, and the stop policy must see it. Its charge stops at the ceiling.
                   accrued=sum(accrued(j, b.name, now) for j in mine),
                   overrides=b.overrides, period=period)


def balances(budgets: Iterable[Budgeted], spent: Mapping[str, int], running: Sequence[Running], now: float,
             period: str | None = None) -> list[Balance]:
    """Each of `budgets` (ledger.effective()'s) as `labq budget` shows it: in its current period, or in
    `period` (a label like 2026-11: settled spending only, for the budgets whose periods are named
    that way). `spent`: the spent hash (periods.field -> micro); `running`: jobs holding commitments."""
    out = []
    for b in budgets:
        label = periods.current(b, now)
        if period is not None and period != label:
            if b.period == "none":
                continue
            try:
                periods.bounds(b.period, period, b.timezone)
            except ValueError:
                continue
            # a past period: settled spending only (no commitment, no override held there)
            out.append(Balance(b.name, b.unit, b.limit, spent.get(periods.field(b.name, period), 0), 0, 0, 0, period))
            continue
        out.append(balance(b, spent.get(periods.field(b.name, label), 0), running, now, label,
                           periods.span_at(b, now, label)))
    return out


def override_active(o: Raise, now: float) -> bool:
    return o.state == "active" and now < o.expires


def effective_terms(budgets: Iterable[Any], limits: Mapping[str, int], overrides: Iterable[Raise],
                    now: float) -> list[tuple[Any, int, int]]:
    """(budget, its limit, what its active overrides add) of each of `budgets`: the limit `labq
    budget set` gave it (`limits`: budget -> micro), else the configured one (ledger.effective)."""
    extra: dict[str, int] = {}
    for o in overrides:
        if override_active(o, now):
            extra[o.budget] = extra.get(o.budget, 0) + o.amount
    return [(b, limits.get(b.name, b.limit), extra.get(b.name, 0)) for b in budgets]
