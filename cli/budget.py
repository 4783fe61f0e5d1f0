"""`labq budget` (the balances) and `labq alerts` without click: from the fast path (fast.py) or
click's (budgetcmd.py, whose group also has `set` and `override`)."""
from functools import partial

from labq.scheduler.cjson import loads  # json.loads without `json` (cjson.py)
from labq.scheduler.errors import UsageError
from labq.scheduler.units import fmt_money, unit_name

from . import render, statview
from .out import bounded_count, echo, echo_json


def budget_alerts(all_alerts, name: str, period: str) -> list[dict]:
    out = []
    for a in all_alerts:
        try:
            data = loads(a.get("data") or "{}")
        except ValueError:
            data = {}
        if a.get("scope") == f"budget:{name}" and data.get("period", period) == period:
            out.append(a)
    return out


def show(ctx, period, as_json) -> None:
    """Budgets: limit, spent, accrued, committed, available, alerts (spec.BUDGET's options)."""
    # The thin client (store/thinreads.py): redis-py's import alone cost ~8x `labq sub`; the budgets from
    # the client settings cache, not the whole config (~20 ms), and neither the job model nor dataclasses
    # (~14 ms) to add them up (ThinClient.budget_balances), issue 39 item 4.
    books, c = ctx.books, ctx.thin
    bals = c.budget_balances(books["budgets"], period=period)
    if period is not None and not bals and books["budgets"]:
        raise UsageError(f"--period: no budget has a period named {period!r} (expected like 2026-11, 2026-Q4, 2026-W47)")
    recent = c.read.alerts(2000)
    cur = books["currency"]
    ds = [render.budget_dict(b, books["budgets"], cur, budget_alerts(recent, b.name, b.period)) for b in bals]
    if as_json:
        return echo_json(ds)
    if not bals:
        return echo(f"no budgets configured ({books['source']})")
    m = partial(fmt_money, currency=cur)
    rows = [[b.name, b.period or "-", unit_name(b.unit, cur), m(b.limit, b.unit),
             m(b.overrides, b.unit) if b.overrides else "-", m(b.spent, b.unit),
             m(b.accrued, b.unit), m(b.committed, b.unit), m(b.available, b.unit),
             ",".join(sorted({a["kind"] for a in d["alerts"]})) or "-"] for b, d in zip(bals, ds)]
    echo(statview.table(rows, ["BUDGET", "PERIOD", "UNIT", "LIMIT", "OVERRIDE", "SPENT", "ACCRUED",
                               "COMMITTED", "AVAILABLE", "ALERTS"]))


def alerts(ctx, name, since, count, as_json) -> None:
    """The newest alerts (spec.ALERTS's options), through the thin client: redis-py's import alone
    cost ~8x `labq sub` (issue 39 item 4)."""
    from .report import _since
    start, count = _since(since, "--since") or 0, bounded_count(count)
    got = [a for a in ctx.thin.read.alerts(100_000 if (name or since) else count)
           if float(a.get("ts") or 0) >= start and (not name or a.get("scope") == f"budget:{name}")][-count:]
    if as_json:
        return echo_json([{**a, "ts": float(a.get("ts") or 0), "data": loads(a.get("data") or "{}")} for a in got])
    if not got:
        return echo("no alerts")
    echo(statview.table([[ts_text(a.get("ts")), a.get("level", ""), a.get("kind", ""), a.get("scope", ""),
                          a.get("message", "")] for a in got], ["TIME", "LEVEL", "KIND", "SCOPE", "MESSAGE"]))


def ts_text(t) -> str:
    """An alert's or an override's time, local, to the second ("-" when none)."""
    import time
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t))) if t else "-"
