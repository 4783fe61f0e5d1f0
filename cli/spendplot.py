"""`labq report --plot FILE.png`: each budget's spending in a period against its limit, with the
warn levels and the overrides marked. matplotlib is the optional extra `plot` (pip install 'labq[plot]')."""
import time
from datetime import datetime

import click

from labq.scheduler.money import ledger, periods
from labq.scheduler.money.report import limit_steps, spend_series
from labq.scheduler.units import MICRO

from .out import fail


def plot(ctx, path: str, budget_name: str | None, period: str | None) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("--plot needs matplotlib, the optional extra `plot`: pip install 'labq[plot]'", 2)
    c, now = ctx.client, time.time()
    budgets = [b for b in c.budgets(now) if not budget_name or b.name == budget_name]
    if not budgets:
        fail(f"--budget: no such budget {budget_name!r}" if budget_name else "no budgets configured", 2)
    entries, overrides = c.read.ledger_all(), c.read.overrides()
    bals = {b.name: b for b in c.balances(now)}
    fig, axes = plt.subplots(len(budgets), 1, figsize=(9, 3.2 * len(budgets)), squeeze=False)
    for ax, b in zip(axes[:, 0], budgets):
        label = period or periods.current(b, now)
        try:
            lo, hi = periods.bounds(b.period, label, b.timezone)
        except ValueError as e:
            fail(f"--period: {e}", 2)
        series = spend_series(entries, b.name, label)
        first = series[0][0] if series else now - 86400
        start = max(lo, min(first, min((o.created for o in overrides if o.budget == b.name), default=first)))
        end = max(min(hi, now), series[-1][0] if series else start)
        xs, ys = [start], [0]
        for t, v in series:
            xs += [t, t]
            ys += [ys[-1], v]
        xs.append(end)
        ys.append(ys[-1])
        if label == periods.current(b, now) and b.name in bals:   # what is running, on top
            xs.append(end)
            ys.append(ys[-1] + bals[b.name].accrued)
        dt = [datetime.fromtimestamp(t) for t in xs]
        ax.plot(dt, [y / MICRO for y in ys], color="tab:blue", label="spent (+ accruing)")
        steps = limit_steps(b.limit, overrides, b.name, start, end)
        ax.step([datetime.fromtimestamp(t) for t, _ in steps], [v / MICRO for _, v in steps], where="post",
                color="tab:red", label="limit + overrides")
        for w in b.warn:    # the levels follow the limit + overrides, as the alerts do
            ax.step([datetime.fromtimestamp(t) for t, _ in steps], [w * v / MICRO for _, v in steps], where="post",
                    color="tab:orange", linestyle="--", linewidth=0.8)
            ax.text(dt[0], w * steps[0][1] / MICRO, f" warn {w:.0%}", va="bottom", fontsize=7, color="tab:orange")
        for o in overrides:
            if o.budget == b.name and o.created <= end and (o.ended or o.expires) >= start:
                ax.axvspan(datetime.fromtimestamp(max(o.created, start)),
                           datetime.fromtimestamp(min(o.ended or o.expires, end)), color="tab:green", alpha=0.12)
                ax.text(datetime.fromtimestamp(max(o.created, start)), ledger.hard_limit(b) / MICRO,
                        f" override {o.id} +{o.amount / MICRO:g}", fontsize=7, color="tab:green", va="top")
        ax.set_title(f"{b.name}" + (f" — {label}" if label else ""), fontsize=10)
        ax.set_ylabel(b.unit)
        ax.legend(loc="lower right", fontsize=7)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    click.echo(f"wrote {path}")
