"""`labq budget` as a click group (balances: budget.py, also the fast path's; `set`, `override` for admins)
and `labq alerts`."""
import time

import click

from labq.scheduler.errors import UsageError
from labq.scheduler.units import fmt_money, parse_duration

from . import budget as core, statview
from .common import pass_ctx
from .out import echo_json
from .spec import ALERTS, BUDGET, with_options


@click.group(invoke_without_command=True)
@with_options(BUDGET)
@click.pass_context
def budget(cctx, period, as_json):
    """Budgets: limit, spent, accrued, committed (what running jobs may still spend), available, alerts."""
    if cctx.invoked_subcommand:
        return
    core.show(cctx.obj, period, as_json)


def _amount(text, what) -> float:
    try:
        return float(str(text).lstrip("$€£¥"))
    except ValueError:
        raise UsageError(f"{what}: expected a number in the budget's unit, got {text!r}") from None


@budget.command("set")
@click.argument("name")
@click.option("--limit", help="The new limit, in the budget's unit (takes effect at the next tick).")
@click.option("--reset", is_flag=True, help="Back to the config file's limit.")
@pass_ctx
def budget_set(ctx, name, limit, reset):
    """Change a budget's limit (admins). Lowering it below what running jobs were admitted under
    stops new starts only; running jobs finish."""
    if (limit is None) == (not reset):
        raise UsageError("budget set: give --limit AMOUNT or --reset")
    body = {"budget": name, "reset": True} if reset else {"budget": name, "limit": _amount(limit, "--limit")}
    r = ctx.client.books("budget_set", body)
    click.echo(f"budget {name}: limit {_money(ctx, round(r['prev'] * 1e6), r['unit'])} -> "
               f"{_money(ctx, round(r['limit'] * 1e6), r['unit'])}")


@budget.command("override")
@click.argument("name", required=False)
@click.option("--amount", help="How much to raise the cap by, in the budget's unit.")
@click.option("--approver", help="Who approved it (recorded in the ledger).")
@click.option("--expires", help="How long it lasts: 2h, 3d, 1w.")
@click.option("--reason", help="Why (recorded in the ledger).")
@click.option("--list", "listing", is_flag=True, help="List overrides (active and past).")
@click.option("--revoke", "revoke", type=int, help="End override ID now.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def budget_override(ctx, name, amount, approver, expires, reason, listing, revoke, as_json):
    """A time-boxed raise of a budget's cap (admins): --amount, --approver, --expires, --reason."""
    c = ctx.client
    if listing:
        os_ = [o for o in c.read.overrides() if not name or o.budget == name]
        now = time.time()
        if as_json:
            return echo_json([{**o.__dict__, "amount": o.amount / 1e6, "active": o.active(now)} for o in os_])
        units = {b.name: b.unit for b in ctx.cfg.budgets}
        rows = [[o.id, o.budget, _money(ctx, o.amount, units.get(o.budget, "usd")),
                 o.state if o.state != "active" or o.active(now) else "expiring", o.approver, o.by, core.ts_text(o.created),
                 core.ts_text(o.ended or o.expires), o.reason] for o in os_]
        return click.echo(statview.table(rows, ["ID", "BUDGET", "AMOUNT", "STATE", "APPROVER", "BY", "CREATED",
                                              "ENDS", "REASON"]))
    if revoke is not None:
        r = c.books("budget_revoke", {"id": revoke})
        return click.echo(f"override {revoke} on budget {r['override']['budget']}: revoked")
    missing = [f for f, v in (("NAME", name), ("--amount", amount), ("--approver", approver), ("--expires", expires),
                              ("--reason", reason)) if not v]
    if missing:
        raise UsageError(f"budget override: missing {', '.join(missing)} (or use --list, --revoke ID)")
    secs = parse_duration(expires, "--expires", bare_unit=60)
    r = c.books("budget_override", {"budget": name, "amount": _amount(amount, "--amount"), "approver": approver,
                                    "expires": secs, "reason": reason})
    o = r["override"]
    if as_json:
        return echo_json(o)
    click.echo(f"override {o['id']} on budget {name}: +{_money(ctx, o['amount'], r['unit'])} until {core.ts_text(o['expires'])}")


@click.command()
@with_options(ALERTS)
@pass_ctx
def alerts(ctx, name, since, count, as_json):
    """Alerts: budget warnings, forecast overruns, exhaustion, overrides, and the agents' (idle GPUs, …)."""
    core.alerts(ctx, name, since, count, as_json)


def _money(ctx, micro: int, unit: str) -> str:
    """Money as the scheduler's books are kept, in the config's currency."""
    return fmt_money(micro, unit, currency=ctx.cfg.rates.currency)
