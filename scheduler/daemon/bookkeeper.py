"""The scheduler's budget duties: effective limits, overrides, period rollover, alerts and the stop
policy each tick, and the budget requests from the inbox (set, override, revoke, ledger import).

The decisions are pure (ledger.py, alerts.py, budgetwatch.py, periods.py, applier.py); this module
feeds them the daemon's state and returns what they decided as a `Change` that the daemon commits,
so every override, expiry, revocation, limit change, period start, fired alert and stop is written
in one transaction with its ledger entry. It writes nothing itself. What is kept in Redis
(overrides, limits, period labels, fired alerts) is loaded again by a new leader, so nothing fires
twice across restarts.

`budgets` are the effective budgets — the configured ones with `budget set` limits and active
overrides. The daemon puts them into its config (`Scheduler._use_budgets`), so the admission gate,
submit refusals and --test-only all see them.
"""
import hashlib
import json
import logging
import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from ..errors import RefusedError, UsageError
from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Cancel, Plan
from ..money import alerts, budgetwatch, ledger, periods
from ..money.ledger import Books, Budget, Entry, Override
from ..settings.config import Config
from ..units import fmt_money, to_micro
from . import transitions as tr
from .applier import apply_plan
from .change import Change, Read, Unread

log = logging.getLogger("labq.scheduler")
MAX_OVERRIDE_S = 366 * 86400
MAX_IMPORT_ROWS = 10_000
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
# A budget request's outcome: (the reply's fields, what it writes, the alerts it raises).
Done = tuple[dict[str, Any], Books, list[alerts.Alert]]


class Bookkeeper:
    """Reads nothing itself: what it decides from beyond its books is handed in as the tick read it
    (load, tick, spent_now's `spent`, request's `read`), or asked for (change.Unread)."""

    def __init__(self, cfg: Config) -> None:
        self.base = cfg
        self.budgets = cfg.budgets              # the effective budgets
        self.overrides: dict[int, Override] = {}
        self.limits: dict[str, dict[str, Any]] = {}     # budget -> {limit, by, at, prev}
        self.periods: dict[str, str] = {}       # budget -> label last rolled into
        self.fired: set[str] = set()
        self._seq = 0

    # -- state ---------------------------------------------------------------------------------
    def load(self, st: Mapping[str, Any], now: float) -> None:
        """The books as a new leader read them (store.books: overrides, limits, period labels, fired alerts)."""
        self.overrides = {int(k): Override.loads(v) for k, v in st["overrides"].items()}
        self.limits = {k: json.loads(v) for k, v in st["limits"].items()}
        self.periods, self.fired = dict(st["periods"]), set(st["fired"])
        self.refresh(now)

    def refresh(self, now: float) -> bool:
        """Recompute the effective budgets; whether they changed."""
        budgets = self._effective(self.overrides.values(), now)
        changed = budgets != self.budgets
        self.budgets = budgets
        return changed

    def _effective(self, overrides: Iterable[Override], now: float) -> tuple[Budget, ...]:
        limits = {k: int(v["limit"]) for k, v in self.limits.items()}
        return ledger.effective(self.base.budgets, limits, overrides, now)

    def applied(self, books: Books | None, now: float) -> bool:
        """After a commit: the in-memory view follows what was written. Whether the effective
        budgets changed (the daemon then puts them into its config)."""
        if not books:
            return False
        for o in books.overrides:
            self.overrides[o.id] = o
        for name, record in books.limits:
            if record is None:
                self.limits.pop(name, None)
            else:
                self.limits[name] = json.loads(record)
        self.periods.update(books.periods)
        self.fired.update(books.fired)
        return bool(books.overrides or books.limits) and self.refresh(now)

    def spent_now(self, now: float, spent: Mapping[str, int] | None) -> dict[str, int]:
        """budget -> settled in its current period, from the spent hash as the tick read it (None: not
        read since the last transaction, Unread)."""
        if spent is None:
            raise Unread(spent=True)
        return periods.spent_now(self.budgets, spent, now)

    def period(self, budget: str, now: float) -> str:
        """The period a charge to `budget` settled at `now` belongs to."""
        b = next((b for b in self.base.budgets if b.name == budget), None)
        return periods.current(b, now) if b else ""

    # -- each tick -----------------------------------------------------------------------------
    def due_periods(self, now: float) -> list[str]:
        """The ledger keys of the `period` entries a tick at `now` would write (a rollover not yet in
        this leader's books): the tick reads which of them a predecessor wrote (store.known_keys)."""
        return [f"period:{b.name}:{lab}" for b in self.base.budgets
                if b.period != "none" and self.periods.get(b.name) != (lab := periods.current(b, now))]

    def tick(self, now: float, jobs: Mapping[int, Job], cfg: Config, spent: Mapping[str, int],
             charged: Container[str]) -> Change | None:
        """What this tick writes for the budgets (expired overrides, period rollovers with the running
        attempts' parts booked, fired alerts, the stop policy's preempts and cancels), or None; from
        what the tick read: `spent` (store.spent) and which of `due_periods` are `charged` already."""
        if not self.base.budgets:
            return None
        books = Books()
        raised: list[alerts.Alert] = []
        for o in self.overrides.values():
            if o.state == "active" and o.expires <= now:
                gone = replace(o, state="expired", ended=now)
                books.overrides.append(gone)
                books.entries.append(Entry("override_expired", f"override:{o.id}:expired", o.budget, o.amount,
                                           (("id", str(o.id)),)))
                raised.append(alerts.override_alert(gone, "override_expired", now, self._unit(o.budget),
                                                    currency=cfg.rates.currency))
        live = {**self.overrides, **{o.id: o for o in books.overrides}}
        budgets = self._effective(live.values(), now)
        booked = self._roll_periods(books, budgets, spent, jobs, now, cfg, charged)
        now_spent = periods.spent_now(budgets, spent, now)
        running = [j for j in jobs.values() if j.state in states.ON_NODE]
        statuses = [budgetwatch.status(b, now_spent[b.name], running, now, periods.current(b, now)) for b in budgets]
        raised += alerts.evaluate(statuses, self.fired, now, cfg.rates.currency)
        books.fired += [a.key for a in raised]
        stop = budgetwatch.stop(budgets, now_spent, running, replace(cfg, budgets=budgets), now,
                                lead=cfg.tick + budgetwatch.CONTROL_POLL, protected=self._protected())
        done = apply_plan(Plan(preempts=stop.preempts, cancels=tuple(Cancel(j, d) for j, d in stop.cancels)),
                          jobs, jobs, (), now)
        for j in done.stopping:
            log.info("job %s %s", j.display_id, j.detail)
        for r in done.rejected:
            log.warning("budget stop not applied: %s", r.why)
        if not (books or done.stopping or booked):
            return None
        return replace(done.change, charges=booked, alerts=[a.fields() for a in raised], books=books)

    def _roll_periods(self, books: Books, budgets: Iterable[Budget], spent: Mapping[str, int], jobs: Mapping[int, Job],
                      now: float, cfg: Config, charged: Container[str]) -> list[tr.Charge]:
        """Each periodic budget whose period changed: a `period` entry (into `books`) and the
        charges booking the running attempts' parts of the period that closed (returned)."""
        booked: list[tr.Charge] = []
        for b in budgets:
            lab = periods.current(b, now)
            if b.period != "none" and self.periods.get(b.name) != lab:
                prev = self.periods.get(b.name, "")
                closing = self._close_period(b, prev, jobs, cfg) if prev else []
                booked += closing
                closed = int(spent.get(periods.field(b.name, prev), 0)) if prev else 0
                closed += sum(c.amount for c in closing if c.period == prev)
                books.entries.append(Entry("period", f"period:{b.name}:{lab}", b.name, 0,
                                           (("period", lab), ("prev", prev), ("closed", str(closed)))))
                books.periods.append((b.name, lab))
        books.entries = [e for e in books.entries if e.type != "period" or e.key not in charged]
        return booked

    def _close_period(self, b: Budget, prev: str, jobs: Mapping[int, Job], cfg: Config) -> list[tr.Charge]:
        """Charges booking what each running attempt used of periodic budget `b` up to the end of
        period `prev`, one per period (the parts already booked at earlier edges repeat their
        idempotency keys and are dropped by the commit). The attempt's end books only the rest."""
        end = periods.bounds(b.period, prev, b.timezone)[1]
        out: list[tr.Charge] = []
        for j in jobs.values():
            cur = j.current
            if j.state not in states.ON_NODE or b.name not in dict(j.commit) or cur is None or cur.end_time:
                continue
            # The same span the attempt's end bills (transitions._bill), so the parts booked here
            # repeat its keys with the same amounts; an attempt with no process yet books nothing.
            span = ledger.run_span(cur.start_time, end, cur.dispatch_time, end, ledger.ceiling_seconds(j, cfg))
            if span is not None and span[0] < span[1]:
                out += tr.attempt_charges(j, cur, b, dict(j.rates).get(b.name, 0), *span, cfg)
        if out:
            log.info("budget %s: period %s closed with %d running attempt(s) booked", b.name, prev, len(out))
        return out

    def _protected(self) -> dict[str, float]:
        """budget -> when `budget set` last lowered its limit (jobs running since before are left alone)."""
        return {k: float(v["at"]) for k, v in self.limits.items() if v.get("prev") is not None
                and int(v["limit"]) < int(v["prev"])}

    def _unit(self, budget: str) -> str:
        return next((b.unit for b in self.base.budgets if b.name == budget), "usd")

    # -- requests ------------------------------------------------------------------------------
    def request(self, op: str, user: str, body: dict[str, Any], now: float, read: Read) -> Change:
        """A budget request's Change; `read.charged`: the ledger keys the tick read (a ledger import's)."""
        admins = self.base.security.admins
        if user not in admins:
            raise RefusedError(f"only admins ({', '.join(admins)}) may {op.replace('_', ' ')}")
        done: Done = self._ledger_import(user, body, now, read.charged) if op == "ledger_import" else \
            getattr(self, "_" + op)(user, body, now)
        reply, books, raised = done
        return Change(reply={"ok": True, **reply}, books=books, alerts=[a.fields() for a in raised])

    def _budget(self, body: dict[str, Any]) -> Budget:
        name = body.get("budget")
        b = next((b for b in self.budgets if b.name == name), None)
        if b is None:
            known = ", ".join(b.name for b in self.base.budgets) or "none configured"
            raise UsageError(f"budget: no such budget {name!r} (known: {known})")
        return b

    def _budget_set(self, user: str, body: dict[str, Any], now: float) -> Done:
        b = self._budget(body)
        base = next(x for x in self.base.budgets if x.name == b.name)
        if body.get("reset"):
            new, record = base.limit, None
        else:
            new = _amount(body.get("limit"), "limit", zero=True)
            record = json.dumps({"limit": new, "by": user, "at": now, "prev": b.limit}, separators=(",", ":"))
        self._seq += 1   # unique within this leader; `now` makes it unique across leaders
        key = f"limit:{b.name}:{now:.6f}:{self._seq}"
        entry = Entry("limit", key, b.name, new, (("prev", str(b.limit)), ("by", user)))
        books = Books(entries=[entry], limits=[(b.name, record)])
        m = partial(fmt_money, unit=b.unit, currency=self.base.rates.currency)
        a = alerts.Alert(key, "limit", f"budget:{b.name}", "info", f"budget {b.name}: limit {m(b.limit)} -> {m(new)} by {user}",
                         now, {"budget": b.name, "limit": new / 1e6, "prev": b.limit / 1e6, "by": user})
        books.fired.append(key)
        return {"budget": b.name, "limit": new / 1e6, "prev": b.limit / 1e6, "unit": b.unit}, books, [a]

    def _budget_override(self, user: str, body: dict[str, Any], now: float) -> Done:
        b = self._budget(body)
        amount = _amount(body.get("amount"), "amount")
        secs = body.get("expires")
        if not isinstance(secs, (int, float)) or isinstance(secs, bool) or not 0 < secs <= MAX_OVERRIDE_S:
            raise UsageError(f"expires: expected a duration up to 366 days, got {secs!r}")
        approver, reason = _text(body.get("approver"), "approver", 100), _text(body.get("reason"), "reason", 500)
        oid = max(self.overrides, default=0) + 1
        o = Override(oid, b.name, amount, approver, reason, user, now, now + secs)
        entry = Entry("override", f"override:{oid}", b.name, amount,
                      (("id", str(oid)), ("approver", approver), ("reason", reason), ("by", user),
                       ("expires", str(o.expires))))
        a = alerts.override_alert(o, "override", now, b.unit, currency=self.base.rates.currency)
        return {"override": o.__dict__, "unit": b.unit}, Books(entries=[entry], overrides=[o], fired=[a.key]), [a]

    def _budget_revoke(self, user: str, body: dict[str, Any], now: float) -> Done:
        oid = body.get("id")
        o = self.overrides.get(oid) if isinstance(oid, int) and not isinstance(oid, bool) else None
        if o is None:
            raise UsageError(f"revoke: no such override {oid!r}")
        if o.state != "active":
            raise UsageError(f"revoke: override {oid} is already {o.state}")
        gone = replace(o, state="revoked", ended=now)
        entry = Entry("override_revoked", f"override:{oid}:revoked", o.budget, o.amount,
                      (("id", str(oid)), ("by", user)))
        a = alerts.override_alert(gone, "override_revoked", now, self._unit(o.budget), user,
                                 currency=self.base.rates.currency)
        return {"override": gone.__dict__}, Books(entries=[entry], overrides=[gone], fired=[a.key]), [a]

    def _ledger_import(self, user: str, body: dict[str, Any], now: float, charged: Mapping[str, bool]) -> Done:
        rows, source = body.get("rows"), str(body.get("source") or "")[:200]
        if not isinstance(rows, list) or not rows or len(rows) > MAX_IMPORT_ROWS:
            raise UsageError(f"rows: expected 1 to {MAX_IMPORT_ROWS} rows of [date, scope, amount]")
        entries: list[Entry] = []
        seen: dict[str, int] = {}
        for i, row in enumerate(rows, 1):
            if (not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], str) or not _DATE.match(row[0])
                    or not isinstance(row[1], str) or not row[1]):
                raise UsageError(f"row {i}: expected [YYYY-MM-DD, account or tag:K=V, amount], got {row!r}")
            amount = _amount(row[2], f"row {i}: amount", zero=True, negative=True)
            text = f"{row[0]}|{row[1]}|{amount}"
            seen[text] = seen.get(text, 0) + 1        # identical rows in one file are distinct rows
            key = "import:" + hashlib.sha1(f"{text}|{seen[text]}".encode()).hexdigest()[:20]
            entries.append(Entry("import", key, "", amount,
                                 (("date", row[0]), ("scope", row[1][:200]), ("source", source), ("by", user))))
        unread = [e.key for e in entries if e.key not in charged]
        if unread:      # which rows an earlier import of the same file wrote: the tick reads it
            raise Unread(keys=unread)
        fresh = [e for e in entries if not charged[e.key]]
        return {"imported": len(fresh), "duplicates": len(entries) - len(fresh)}, Books(entries=fresh), []


def _amount(v: object, what: str, zero: bool = False, negative: bool = False) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"{what}: expected a number, got {v!r}")
    m = to_micro(v, what)
    if m < 0 and not negative or m == 0 and not zero:
        raise UsageError(f"{what}: expected a positive amount, got {v!r}")
    return m


def _text(v: object, what: str, most: int) -> str:
    if not isinstance(v, str) or not v.strip():
        raise UsageError(f"{what}: required (a non-empty text)")
    if len(v) > most:
        raise UsageError(f"{what}: at most {most} characters")
    return v.strip()
