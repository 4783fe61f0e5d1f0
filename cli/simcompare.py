"""`labq simulate TRACE --compare fifo,backfill,...`: the same trace and cluster replayed under each
policy, one row per policy, and with --plot the policies' wait distributions side by side."""
import time

import click

from labq.scheduler.errors import UsageError
from labq.scheduler.units import fmt_duration, fmt_money

from .out import echo_json

HEADER = ("policy", "makespan", "util", "mean wait", "p50 wait", "p95 wait", "mean JCT", "bsld", "cost", "replay")


def policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if len(names) < 2:
        raise UsageError(f"--compare: expected two or more policies, comma-separated (e.g. fifo,backfill), got {text!r}")
    if len(set(names)) != len(names):
        raise UsageError(f"--compare: a policy is named twice in {text!r}")
    return names


def run(ctx, names, jobs, cluster_nodes, depth, progress, queue_limits, groups=None):
    """[(name, report, waits)] in the order given; every policy is checked before the first replay."""
    from labq.scheduler.sim import groups as simgroups
    from labq.scheduler.sim.engine import simulate
    from labq.scheduler.sim.metrics import report, waits
    from labq.scheduler.sim.policies import describe, resolve
    resolved = [(name, *resolve(ctx.cfg, name, depth)) for name in names]
    out = []
    for name, cfg, hooks in resolved:
        t0 = time.monotonic()
        if groups:
            res = simgroups.replay(jobs, groups, cfg, lambda n=name: resolve(ctx.cfg, n, depth)[1],
                                   progress=progress(f"{name:>10}"), queue_limits=queue_limits)
        else:
            res = simulate(jobs, cluster_nodes, cfg, progress=progress(f"{name:>10}"), queue_limits=queue_limits,
                               hooks=hooks)
        rep = {"policy": name, "config": describe(cfg) + (f" — {hooks.label}" if hooks and hooks.label else ""),
               **report(res), "wall_s": round(time.monotonic() - t0, 2)}
        out.append((name, rep, waits(res)))
    return out


def row(rep: dict) -> tuple:
    w, util = rep["wait_s"], rep["utilisation"]
    return (rep["policy"], fmt_duration(rep["makespan_s"]), "n/a" if util is None else f"{util:.1%}",
            fmt_duration(w["mean"]), fmt_duration(w["p50"]), fmt_duration(w["p95"]),
            fmt_duration(rep["completion_time_s"]["mean"]), f"{rep['bounded_slowdown']['mean']:,.2f}",
            fmt_money(round(rep["cost"] * 1e6), currency=rep["currency"]), f"{rep['wall_s']:.1f} s")


def show(trace_name: str, rows, as_json: bool, plot_path: str | None) -> None:
    if as_json:
        return echo_json({"trace": trace_name, "compare": [rep for _, rep, _ in rows]})
    first = rows[0][1]
    c = first["cluster"]
    click.echo(f"{trace_name}: {first['jobs']['trace']:,} jobs on {c['nodes']:,} node{'s' * (c['nodes'] != 1)} "
               f"({c['gpus']:,} GPUs, {c['cpus']:,} CPUs)")
    table = [HEADER] + [row(rep) for _, rep, _ in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    for r in table:
        click.echo("  ".join(v.ljust(widths[0]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r)))
    click.echo("bsld: mean bounded slowdown (10 s); JCT: submit to end")
    for _, rep, _ in rows:
        click.echo(f"  {rep['policy']}: {rep['config']}")
    if plot_path:
        click.echo(f"plot: {plot_path}")
