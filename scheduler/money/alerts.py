"""Budget alerts — pure: which alerts a budget's status raises, each exactly once per period.

Rules, for a budget in its current period, with `limit` its hard limit (limit + active overrides):
- `warn` (one per threshold in `budgets.warn`, default 0.7 and 0.9): spent + accrued ≥ threshold × limit;
- `forecast`: spent + accrued + what running jobs are still committed to > limit, before it is
  exhausted — it would be overrun if they all used their time (in `forecast` mode, or after
  `budget set` lowered the limit);
- `exhausted`: spent + accrued ≥ limit (the stop policy, on_exhaust, acts; see budgetwatch.py).

An alert's `key` ("BUDGET|PERIOD|KIND") goes into a set in Redis in the same transaction as its
stream entry, so it fires once per budget and period, also across scheduler restarts. Overrides,
limit changes and the agents' own alerts (idle GPUs, …) are alerts too, keyed by what caused them.
"""
import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..units import fmt_money
from .ledger import Override

LEVELS = ("info", "warn", "error", "critical")   # the agents use "error" for a lost GPU


@dataclass(frozen=True)
class Status:
    """One budget in one period, as the rules see it (micro-units of `unit`)."""
    budget: str
    unit: str
    period: str           # label, "" for a budget without a period
    limit: int            # hard limit: limit + active overrides
    spent: int
    accrued: int          # what running attempts have cost so far
    committed: int        # what running attempts may still spend on top (commitment − accrued)
    warn: tuple[float, ...] = (0.7, 0.9)

    @property
    def used(self) -> int:
        return self.spent + self.accrued

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit and (self.limit > 0 or self.used > 0)


@dataclass(frozen=True)
class Alert:
    key: str              # what makes it unique: fired once
    kind: str
    scope: str            # "budget:NAME", "node:NAME", "job:ID", "user:NAME"
    level: str
    message: str
    ts: float
    data: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def fields(self) -> dict[str, Any]:
        """The entry for the alerts stream (Keys.alerts)."""
        return {"kind": self.kind, "scope": self.scope, "level": self.level, "message": self.message,
                "ts": self.ts, "key": self.key, "data": json.dumps(self.data, separators=(",", ":"), sort_keys=True)}


def key(budget: str, period: str, kind: str) -> str:
    return f"{budget}|{period}|{kind}"


def evaluate(statuses: Iterable[Status], fired: Collection[str], now: float, currency: str) -> list[Alert]:
    """The alerts that `statuses` raise and that are not in `fired` yet, in a stable order."""
    out: list[Alert] = []
    for st in statuses:
        for kind, level, text in _raised(st, currency):
            k = key(st.budget, st.period, kind)
            if k in fired:
                continue
            data: dict[str, Any] = {"budget": st.budget, "period": st.period, "unit": st.unit, "limit": st.limit / 1e6,
                    "spent": st.spent / 1e6, "accrued": st.accrued / 1e6, "committed": st.committed / 1e6}
            if kind.startswith("warn:"):
                data["threshold"] = float(kind.split(":", 1)[1])
            when = f" in {st.period}" if st.period else ""
            out.append(Alert(k, kind.split(":", 1)[0], f"budget:{st.budget}", level,
                             f"budget {st.budget}{when}: {text}", now, data))
    return out


def _raised(st: Status, currency: str) -> Iterator[tuple[str, str, str]]:
    def m(v: int) -> str:
        return fmt_money(v, st.unit, currency=currency)

    if st.limit <= 0 and st.used <= 0:
        return
    used = f"{m(st.spent)} spent + {m(st.accrued)} accruing of {m(st.limit)}"
    for w in sorted(st.warn):
        if st.used >= w * st.limit:
            yield f"warn:{w:g}", "warn", f"{w:.0%} reached ({used})"
    if st.used + st.committed > st.limit and not st.exhausted:   # a warning ahead of time, not after
        yield "forecast", "warn", (f"running jobs may take it to {m(st.used + st.committed)}, "
                                   f"over its limit of {m(st.limit)}")
    if st.exhausted:
        yield "exhausted", "critical", f"exhausted ({used}); on_exhaust applies"


def override_alert(o: Override, kind: str, now: float, unit: str = "usd", who: str = "", *, currency: str) -> Alert:
    """`override` (granted), `override_expired` or `override_revoked`: one alert each, keyed by the override."""
    amount = fmt_money(o.amount, unit, currency=currency)
    verb = {"override": f"raised by {amount} until expiry", "override_expired": f"override of {amount} expired",
            "override_revoked": f"override of {amount} revoked by {who or '?'}"}[kind]
    return Alert(f"override:{o.id}:{kind}", kind, f"budget:{o.budget}", "info",
                 f"budget {o.budget}: {verb} (override {o.id}, approved by {o.approver}: {o.reason})", now,
                 {"budget": o.budget, "override": o.id, "amount": o.amount / 1e6, "approver": o.approver,
                  "reason": o.reason, "expires": o.expires, "by": o.by})


def from_event(eid: str, node: str, body: dict[str, Any], now: float) -> Alert | None:
    """An alert an agent posted on the events stream (kind "alert"), or None when it is malformed.
    Keyed by the event id: a redelivered event is the same alert."""
    kind, message = body.get("kind"), body.get("message")
    if not isinstance(kind, str) or not kind or not isinstance(message, str):
        return None
    level, scope, data = body.get("level"), body.get("scope"), body.get("data")
    level = level if level in LEVELS else "warn"
    scope = scope if isinstance(scope, str) and scope else f"node:{node}"
    data = data if isinstance(data, dict) else {}
    return Alert(f"event:{eid}", kind[:64], scope[:200], level, message[:2000], now, {**data, "node": node})
