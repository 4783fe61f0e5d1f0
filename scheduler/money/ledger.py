"""Rates, forecasts, accrual and budget balances — pure arithmetic in integer micro-units.

A job's rate is what its allocation costs per hour, in each budget's unit. Allocation is billed:
what is reserved, for as long as the attempt's process ran (`run_span`: its start and end as the
node measured them, at most the time limit + kill_wait; nothing when no process started). The
scheduler commits `pricing.forecast()` when it admits an attempt; the commitment shrinks as the attempt
accrues (from its process's start; from its dispatch until the start is known) and is replaced by
the charge when it ends.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from ..jobs.model import Job
from ..units import accrue
from .balance import effective_terms, override_active
from .periods import field as spent_field
from .pricing import billed, overhead

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: config.py reads this module (Config.budget_caps: cap), not the reverse
    from collections.abc import Iterable, Mapping
    from typing import Any

    from ..settings.config import Config


@dataclass(frozen=True, slots=True)
class Budget:
    """A budget as configured (`[budgets.NAME]`), with what Redis says of its limit and overrides."""
    name: str
    unit: str                  # usd | gpu_hours | cpu_hours
    limit: int                 # micro-units of the unit
    account: str = ""
    project: str = ""
    period: str = "none"
    warn: tuple[float, ...] = (0.7, 0.9)
    reserve: float = 0.0
    on_exhaust: str = "hold"
    timezone: str = "UTC"      # periods are calendar-aligned in this zone
    users: tuple[str, ...] = ()  # who may join it with --budget / --project (scheduler/security/members.py)
    open: bool = False         # anyone may join it
    # Filled in by the scheduler from Redis, not the config: active overrides add `overrides`
    # micro-units to the cap until they expire (`labq budget override`); `labq budget set` replaces `limit`.
    overrides: int = 0

    def applies_to(self, job: Job) -> bool:
        if self.account:
            return job.account == self.account
        if self.project:
            return job.project == self.project
        return job.budget == self.name


def ceiling_seconds(job: Job, cfg: Config) -> float | None:
    """The longest an attempt can be billed for: its time limit plus kill_wait (the runner kills a
    job that ignores SIGTERM at its limit kill_wait later). None when the job has no time limit."""
    return job.time_limit + cfg.kill_wait if job.time_limit > 0 else None


def run_span(started: float | None, ended: float, dispatched: float | None, now: float,
             most_s: float | None) -> tuple[float, float] | None:
    """The (start, end) an attempt is billed for: its process's start and end as the node measured
    them, None when no process ever started (such an attempt costs nothing). Neither clock is
    trusted beyond ours: the start is not before the dispatch, the end not after `now`; and no
    attempt is billed past `most_s` seconds (ceiling_seconds)."""
    if not started:
        return None
    start = max(started, dispatched or started)
    end = max(start, min(ended, now))
    if most_s is not None:
        end = min(end, start + most_s)
    return start, end


def charge(rate_per_hour: int, start: float, end: float, unit: str, cfg: Config) -> int:
    """The settled charge of one attempt: allocation × wall time × rate, plus the per-attempt overhead."""
    return accrue(rate_per_hour, billed(end - start, cfg)) + overhead(unit, cfg)


def budgets_for(job: Job, budgets: Iterable[Budget]) -> tuple[Budget, ...]:
    return tuple(b for b in budgets if b.applies_to(job))


def cap(b: Budget) -> int:
    """The part of the limit that admission may commit: limit × (1 − reserve), plus active overrides."""
    return int(b.limit * (1 - b.reserve)) + b.overrides


def hard_limit(b: Budget) -> int:
    """What spending may reach before the budget is exhausted (on_exhaust acts): limit + overrides."""
    return b.limit + b.overrides


# -- the ledger's other entries: overrides, limits, periods --------------------------------------
@dataclass(frozen=True)
class Override:
    """A time-boxed raise of a budget's cap, approved by someone (`labq budget override`)."""
    id: int
    budget: str
    amount: int                # micro-units of the budget's unit
    approver: str
    reason: str
    by: str                    # the admin who asked for it
    created: float
    expires: float
    state: str = "active"      # active | expired | revoked
    ended: float | None = None

    def active(self, now: float) -> bool:
        return override_active(self, now)

    def dumps(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> "Override":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Entry:
    """One ledger entry other than a charge. `key` is its idempotency key; `data` its other fields."""
    type: str                  # override | override_expired | override_revoked | limit | period | import
    key: str
    budget: str = ""
    amount: int = 0
    data: tuple[tuple[str, str], ...] = ()

    def fields(self, ts: float) -> dict[str, Any]:
        return {"type": self.type, "key": self.key, "budget": self.budget, "amount": self.amount,
                **dict(self.data), "ts": ts}


@dataclass
class Books:
    """What a change writes besides jobs and charges, in the same transaction (store/writes.put_books)."""
    entries: list[Entry] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)     # written whole
    limits: list[tuple[str, str | None]] = field(default_factory=list)  # (budget, JSON record or None: the config's)
    periods: list[tuple[str, str]] = field(default_factory=list)    # (budget, label of its current period)
    fired: list[str] = field(default_factory=list)      # alert keys (alerts.Alert.key): each fires once

    def __bool__(self) -> bool:
        return bool(self.entries or self.overrides or self.limits or self.periods or self.fired)


def effective(budgets: Iterable[Budget], limits: dict[str, int], overrides: Iterable[Override],
              now: float) -> tuple[Budget, ...]:
    """The configured budgets with `labq budget set` limits (budget -> micro) and active overrides."""
    return tuple(replace(b, limit=lim, overrides=extra)
                 for b, lim, extra in effective_terms(budgets, limits, overrides, now))


# -- verification ----------------------------------------------------------------------------
def verify(entries: Iterable[Mapping[str, Any]], spent: Mapping[str, int | str], keys: Iterable[str],
           jobs: Iterable[Job] = ()) -> list[str]:
    """Every problem in the ledger: a cached balance that the entries do not add up to, an entry
    without or with a repeated idempotency key, a key without an entry, an attempt whose recorded
    charges differ from its ledger entries. Empty when the ledger holds."""
    problems: list[str] = []
    seen: set[str] = set()
    sums: dict[str, int] = {}
    by_key: dict[tuple[str, str], int] = {}
    by_attempt: dict[tuple[str, str], int] = {}
    for e in entries:
        k = e.get("key", "")
        if not k:
            problems.append(f"entry {e.get('type', '?')} of {e.get('budget', '?')} has no idempotency key")
        elif k in seen and e.get("type") == "charge" and (k, e.get("budget")) in by_key:
            problems.append(f"attempt {k} is charged twice to {e.get('budget')}")
        elif k in seen and e.get("type") != "charge":
            problems.append(f"idempotency key {k} is used by two entries")
        seen.add(k)
        if e.get("type") == "charge":
            f = spent_field(e["budget"], e.get("period", ""))
            sums[f] = sums.get(f, 0) + int(e["amount"])
            by_key[(k, e["budget"])] = by_key.get((k, e["budget"]), 0) + int(e["amount"])
            # A periodic budget's attempt is charged per period: JOB.ATTEMPT.BUDGET@PERIOD.
            att = (".".join(k.split(".")[:2]), e["budget"])
            by_attempt[att] = by_attempt.get(att, 0) + int(e["amount"])
    for f in sorted(set(sums) | set(spent)):
        want, have = sums.get(f, 0), int(spent.get(f, 0))
        if want != have:
            problems.append(f"balance {f}: cached {have}, the entries add up to {want} (micro-units)")
    keys = set(keys)
    problems += [f"idempotency key {k} has no entry" for k in sorted(keys - seen)]
    problems += [f"entry {k} is missing from the idempotency keys" for k in sorted(seen - keys) if k]
    for j in jobs:
        for a in j.attempts:
            for name, amount in a.charges:
                got = by_attempt.get((f"{j.id}.{a.attempt}", name))
                if got != amount:
                    problems.append(f"job {j.id} attempt {a.attempt}: charged {amount} to {name}, "
                                    f"ledger says {got}")
    return problems
