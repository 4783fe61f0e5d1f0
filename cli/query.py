"""Read commands: stat, show, logs, wait, acct, nodes (the control commands are in control.py)."""
import csv
import io
import time

import click

from labq.scheduler import states
from labq.scheduler.units import MICRO, fmt_duration, fmt_money, fmt_size, parse_duration

from . import hot, render, spec
from .common import echo_json, pass_ctx
from .spec import with_options


@click.command()
@with_options(spec.STAT)
@pass_ctx
def stat(ctx, user, account, state, me, start, as_json):
    """The queue: pending and running jobs, with a capacity header."""
    if start:
        c, now = ctx.client, time.time()
        return _stat_start(c, c.read.active(), now, user or (c.user if me else None), account, as_json)
    hot.stat(ctx.thin, user=user, account=account, state=state, me=me, as_json=as_json)


def _stat_start(c, jobs, now, user, account, as_json):
    # The scheduler plans over its own snapshot (ended jobs that dependencies name, effective budgets):
    # asking it is the only way to get the start it will really give.
    starts = {int(k): v for k, v in c.expected_starts().items()}
    shown = [j for j in sorted(jobs, key=lambda j: j.id) if j.state == states.PENDING
             and (not user or j.user == user) and (not account or j.account == account)]
    if as_json:
        return echo_json([{"id": j.display_id, "job_id": j.id, "expected_start": starts.get(j.id),
                           "reason": j.reason} for j in shown])
    rows = [(j.display_id, j.name, j.user, j.account, j.qos, _when(starts.get(j.id), now), j.reason) for j in shown]
    click.echo(render.table(rows, ("JOBID", "NAME", "USER", "ACCOUNT", "QOS", "START_TIME", "REASON")))


def _when(t, now):
    if t is None:
        return "N/A"
    if t <= now + 1:
        return "now"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) + f" (in {fmt_duration(t - now)})"


@click.command()
@click.argument("job_id")
@with_options(spec.SHOW)
@pass_ctx
def show(ctx, job_id, as_json):
    """One job in full: request, state and the reason with its numbers, attempts, cost."""
    hot.show(ctx.thin, job_id, as_json=as_json)


_ts = hot.ts


@click.command()
@click.argument("job_id")
@with_options(spec.LOGS)
@pass_ctx
def logs(ctx, job_id, follow, err):
    """A job's output."""
    hot.logs(ctx.thin, job_id, follow=follow, err=err)


exit_status, wait_for_jobs = hot.exit_status, hot.wait_for_jobs


@click.command()
@click.argument("job_ids", nargs=-1, required=True)
@with_options(spec.WAIT)
@pass_ctx
def wait(ctx, job_ids, timeout):
    """Block until the jobs end; exit with the (first failing) job's exit code."""
    hot.wait(ctx.thin, job_ids, timeout=timeout)


def _since(text, what):
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        return time.time() - parse_duration(text, what, bare_unit=1)


@click.command()
@click.option("--since", help="From this date (YYYY-MM-DD) or this long ago (7d).")
@click.option("--until", help="Up to this date or this long ago.")
@click.option("-u", "--user")
@click.option("-A", "--account")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def acct(ctx, since, until, user, account, fmt, as_json):
    """History of ended jobs with their costs (sacct-like)."""
    jobs = ctx.client.read.ended(_since(since, "--since") or 0, _since(until, "--until") or float("inf"))
    jobs = [j for j in jobs if (not user or j.user == user) and (not account or j.account == account)]
    jobs.sort(key=lambda j: j.id)
    # Committed: what admission encumbered for each attempt (rate × planned time); final: the charges.
    from labq.scheduler.report import committed_cost
    models = {g.uuid: g.model for n in ctx.client.nodes() for g in n.gpus}
    committed = {j.id: sum(committed_cost(j, models.get(a.gpus[0], j.gpu_type) if a.gpus else "", ctx.cfg)
                           for a in j.attempts) for j in jobs}
    if as_json or fmt == "json":
        return echo_json([{**render.job_dict(j), "committed_cost": committed[j.id] / MICRO,
                           "final_cost": j.cost / MICRO} for j in jobs])
    headers = ["JOBID", "NAME", "USER", "ACCOUNT", "STATE", "EXIT", "START", "END", "ELAPSED", "GPUS", "ATTEMPTS",
               "COMMITTED", "COST"]
    money = (lambda m: f"{m / MICRO:.6f}") if fmt == "csv" else fmt_money
    rows = [[j.display_id, j.name, j.user, j.account, j.state, j.exit_code if j.exit_code is not None else "",
             _ts(j.start_time), _ts(j.end_time), fmt_duration(render.elapsed(j, j.end_time or 0)), j.gpus,
             len(j.attempts), money(committed[j.id]), money(j.cost)] for j in jobs]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(headers)
        w.writerows(rows)
        return click.echo(out.getvalue(), nl=False)
    click.echo(render.table(rows, headers))
    click.echo(f"{len(jobs)} jobs, total cost {fmt_money(sum(j.cost for j in jobs))}")


@click.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def nodes(ctx, as_json):
    """Nodes with free/total GPUs, CPUs and memory."""
    jobs = ctx.client.read.active()
    ds = [render.node_dict(n, jobs) for n in ctx.client.nodes()]
    if as_json:
        return echo_json(ds)
    rows = [[d["name"], d["state"], f"{d['gpus_free']}/{d['gpus_total']}", ",".join(d["gpu_models"]) or "-",
             f"{d['cpus_free']}/{d['cpus_total']}", f"{fmt_size(max(0, d['mem_free']))}/{fmt_size(d['mem_total'])}",
             len(d["jobs"]), d["slots"]] for d in ds]
    click.echo(render.table(rows, ["NODE", "STATE", "GPUS", "MODEL", "CPUS", "MEM", "JOBS", "SLOTS"]))
