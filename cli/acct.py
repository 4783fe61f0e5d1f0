"""`labq acct`: ended jobs with their costs, as sacct shows them.

sacct's habits: the window defaults to since midnight today (all time once -j names jobs), -S/-E
take sacct's time forms, `--format=JobID,JobName%30,State` picks fields, -P/--parsable2 separates
them with `|`, exit codes read `code:signal`.
"""
import csv
import io
import time

import click

from labq.scheduler import when
from labq.scheduler.units import MICRO, fmt_duration, fmt_money, parse_duration

from . import render, slurmfmt
from .common import echo_json, pass_ctx

_OUTPUTS = ("table", "csv", "json")


def _since(text, what):
    """--since/--until: a date (YYYY-MM-DD) or how long ago (7d)."""
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        return time.time() - parse_duration(text, what, bare_unit=1)


def window(since, until, start, end, named: bool, now: float) -> tuple[float, float]:
    """The end-time window: -S/-E (sacct's forms) or --since/--until; by default since midnight
    today, or all time when -j names the jobs (as sacct does)."""
    lo = (when.parse(start, now, "--starttime", future=False) if start else _since(since, "--since"))
    hi = (when.parse(end, now, "--endtime", future=False) if end else _since(until, "--until"))
    if lo is None and not named:
        lo = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
    return lo or 0.0, hi if hi is not None else float("inf")


@click.command()
@click.option("-S", "--starttime", "start", help="Ended at or after: 08:00, today, now-2days, 2026-12-01 "
                                                 "(default: midnight today; all time with -j).")
@click.option("-E", "--endtime", "end", help="Ended at or before (the forms of -S).")
@click.option("--since", help="From this date (YYYY-MM-DD) or this long ago (7d).")
@click.option("--until", help="Up to this date or this long ago.")
@click.option("-j", "--jobs", "job_ids", help="Only these jobs: 42,43_7 (42: the job or every task of array 42).")
@click.option("-u", "--user")
@click.option("-A", "--account")
@click.option("-s", "--state", "state", help="Only these states: CD,F or COMPLETED,FAILED.")
@click.option("-o", "--format", "fmt", default="table",
              help="table, csv or json; or sacct fields like JobID,JobName%30,State,ExitCode,Elapsed,Cost.")
@click.option("-P", "--parsable2", is_flag=True, help="Fields separated by |.")
@click.option("-p", "--parsable", is_flag=True, help="Fields separated by |, with a trailing |.")
@click.option("-n", "--noheader", is_flag=True)
@click.option("-X", "--allocations", is_flag=True, hidden=True, help="Accepted for sacct habits (labq has no steps).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def acct(ctx, start, end, since, until, job_ids, user, account, state, fmt, parsable2, parsable, noheader,
         allocations, as_json):
    """History of ended jobs with their costs (sacct-like)."""
    from .query import _id_filter, _states
    now = time.time()
    picked, wanted = _id_filter(job_ids), _states(state)
    lo, hi = window(since, until, start, end, bool(job_ids), now)
    jobs = [j for j in ctx.client.read.ended(lo, hi) if (not user or j.user == user)
            and (not account or j.account == account) and (not wanted or j.state in wanted) and picked(j)]
    jobs.sort(key=lambda j: j.id)
    committed = _committed(ctx, jobs)
    if as_json or fmt == "json":
        return echo_json([{**render.job_dict(j), "committed_cost": committed[j.id] / MICRO,
                           "final_cost": j.cost / MICRO} for j in jobs])
    if fmt not in _OUTPUTS or parsable or parsable2:
        fields = slurmfmt.sacct_fields(slurmfmt.DEFAULT_SACCT if fmt in _OUTPUTS else fmt)
        extra = {j.id: {"cost": fmt_money(j.cost), "committed": fmt_money(committed[j.id])} for j in jobs}
        sep = "|" if parsable or parsable2 else None
        out = slurmfmt.sacct(fields, jobs, extra, header=not noheader, sep=sep, trailing=parsable)
        return click.echo(out) if out else None
    _table(jobs, committed, fmt, noheader)


def _committed(ctx, jobs) -> dict:
    # Committed: what admission encumbered for each attempt (rate × planned time); final: the charges.
    from labq.scheduler.report import committed_cost
    models = {g.uuid: g.model for n in ctx.client.nodes() for g in n.gpus}
    return {j.id: sum(committed_cost(j, models.get(a.gpus[0], j.gpu_type) if a.gpus else "", ctx.cfg)
                      for a in j.attempts) for j in jobs}


def _table(jobs, committed, fmt, noheader) -> None:
    headers = ["JOBID", "NAME", "USER", "ACCOUNT", "STATE", "EXIT", "START", "END", "ELAPSED", "GPUS", "ATTEMPTS",
               "COMMITTED", "COST"]
    money = (lambda m: f"{m / MICRO:.6f}") if fmt == "csv" else fmt_money
    rows = [[j.display_id, j.name, j.user, j.account, j.state, slurmfmt.exit_code(j) if fmt != "csv" else
             (j.exit_code if j.exit_code is not None else ""), _ts(j.start_time), _ts(j.end_time),
             fmt_duration(render.elapsed(j, j.end_time or 0)), j.gpus, len(j.attempts), money(committed[j.id]),
             money(j.cost)] for j in jobs]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out)
        if not noheader:
            w.writerow(headers)
        w.writerows(rows)
        return click.echo(out.getvalue(), nl=False)
    lines = render.table(rows, headers).splitlines()[noheader:]
    if lines:
        click.echo("\n".join(lines))
    if not noheader:
        click.echo(f"{len(jobs)} jobs, total cost {fmt_money(sum(j.cost for j in jobs))}")


def _ts(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


