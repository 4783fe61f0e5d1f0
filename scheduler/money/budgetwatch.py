"""The stop policy — pure: what a budget's `on_exhaust` does once spent + accrued reaches its limit.

- `hold`: nothing here; the admission gate starts nothing new (no forecast fits any more) and
  running jobs finish.
- `preempt`: every running preemptible job charged to the budget (its --preemptible, else its
  QoS; fewer than max_preemptions preemptions) gets the preempt control with its QoS grace, lowest
  priority first; it checkpoints, is requeued, and pends BudgetExhausted. Others finish.
- `cancel`: every running job charged to it is cancelled (SIGTERM, SIGKILL after kill_wait).

The daemon evaluates this each tick, projecting accrual `lead` seconds ahead (one tick plus
CONTROL_POLL, how long a runner may take to see its control key): the controls take effect when
the limit is reached, not a tick and a poll after, so the overshoot is bounded by grace (or
kill_wait) × the budget's running rate, not by the scheduler's lag.

A job that was running when an admin lowered the limit (`labq budget set`) is never stopped by
it: lowering a limit below what running jobs were admitted under stops new starts only.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Preempt
from ..units import fmt_money
from . import balance, ledger, periods
from .alerts import Status

if TYPE_CHECKING:     # annotations only: settings/ reads money/ (Budget, cap), never the reverse
    from collections.abc import Iterable, Mapping

    from ..settings.config import Config

CONTROL_POLL = 1.0     # seconds: the runner reads labq:job:<id>:control once a second (worker/runner.py)


@dataclass(frozen=True)
class Stop:
    preempts: tuple[Preempt, ...] = ()
    cancels: tuple[tuple[int, str], ...] = ()      # (job id, detail)


def status(b: ledger.Budget, spent: int, running: Iterable[Job], now: float, period: str = "") -> Status:
    bal = balance.balance(b, spent, running, now, period, periods.span_at(b, now, period))
    return Status(b.name, b.unit, period, ledger.hard_limit(b), spent, bal.accrued, bal.committed, b.warn)


def preemptible(job: Job, cfg: Config) -> bool:
    q = cfg.qos_named(job.qos)
    able = job.preemptible if job.preemptible is not None else bool(q and q.preemptible)
    return able and job.preempt_count < (q.max_preemptions if q else 0)


def stop(budgets: Iterable[ledger.Budget], spent: Mapping[str, int], running: Iterable[Job], cfg: Config, now: float,
         lead: float = 0.0, protected: Mapping[str, float] | None = None) -> Stop:
    """The stop actions for every exhausted budget whose on_exhaust is preempt or cancel.

    `spent`: budget -> settled in its current period; `protected`: budget -> time its limit was
    last lowered (jobs dispatched before it are left alone)."""
    protected = protected or {}
    live = [j for j in running if j.state == states.RUNNING and not j.cancel_requested]
    cancels: dict[int, str] = {}
    preempts: dict[int, Preempt] = {}
    for b in sorted(budgets, key=lambda b: (b.on_exhaust != "cancel", b.name)):
        if b.on_exhaust not in ("preempt", "cancel"):
            continue
        mine = [j for j in live if b.name in dict(j.commit) and j.id not in cancels and j.id not in preempts
                and ((j.current.dispatch_time if j.current else 0) or 0) >= protected.get(b.name, float("-inf"))]
        if not mine:
            continue
        st = status(b, spent.get(b.name, 0), live, now + lead)
        if not st.exhausted:
            continue
        m = partial(fmt_money, unit=b.unit, currency=cfg.rates.currency)
        why = f"budget {b.name} exhausted: {m(st.spent)} spent + {m(st.accrued)} accruing of {m(st.limit)}"
        if b.on_exhaust == "cancel":
            for j in sorted(mine, key=lambda j: j.id):
                cancels[j.id] = f"cancelled: {why} (on_exhaust = cancel)"
            continue
        for j in sorted((j for j in mine if preemptible(j, cfg)), key=lambda j: _lowest_first(j, cfg)):
            q = cfg.qos_named(j.qos)
            preempts[j.id] = Preempt(j.id, None, q.grace if q else cfg.kill_wait, f"preempted: {why} (on_exhaust = preempt)")
    return Stop(tuple(preempts.values()), tuple(sorted(cancels.items())))


def _lowest_first(j: Job, cfg: Config) -> tuple[int, float, int]:
    q = cfg.qos_named(j.qos)
    # Lowest QoS priority first; among equals the most recently started (the least work to lose).
    return (q.priority if q else 0, -((j.current.dispatch_time if j.current else 0) or 0), j.id)
