"""`labq acct`: ended jobs with their costs, as sacct shows them.

sacct's habits: the window defaults to since midnight today (all time once -j names jobs), -S/-E
take sacct's time forms, `--format=JobID,JobName%30,State` picks fields, -P/--parsable2 separates
them with `|`, exit codes read `code:signal`.
"""
import csv
import io
import time
from collections import namedtuple

import click

from labq.scheduler import when
from labq.scheduler.model import Job
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
    read = ctx.client.read
    # Archived jobs come as compact rows (store/acctrows.py), the recent ones as records.
    table = fmt in ("table", "csv") and not (as_json or parsable or parsable2)
    from labq.scheduler.store.acctrows import TABLE
    jobs = [j for j in read.acct_rows(lo, hi, user, account, TABLE if table else None)
            if (not wanted or j.state in wanted) and picked(j)]
    jobs.sort(key=lambda j: j.id)
    committed = _committed(ctx, jobs)
    if as_json or fmt == "json":
        # --json shows every field of each job (DESIGN §8's shape): the records, of the chosen jobs only.
        full = {j.id: j for j in read.jobs([j.id for j in jobs if not isinstance(j, Job)])}
        jobs = [j if isinstance(j, Job) else full[j.id] for j in jobs if isinstance(j, Job) or j.id in full]
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
    # An archived row carries it, computed when it was archived.
    from labq.scheduler.report import committed_by_job
    records = [j for j in jobs if isinstance(j, Job)]
    out = {j.id: j.committed for j in jobs if not isinstance(j, Job)}
    if records:
        models = {g.uuid: g.model for n in ctx.client.nodes() for g in n.gpus}
        out.update(committed_by_job(records, models, ctx.cfg))
    return out


def _table(jobs, committed, fmt, noheader) -> None:
    headers = ["JOBID", "NAME", "USER", "ACCOUNT", "STATE", "EXIT", "START", "END", "ELAPSED", "GPUS", "ATTEMPTS",
               "COMMITTED", "COST"]
    # A month of a busy lab is ~100k rows: amounts, durations and times repeat, so each is formatted once.
    money = _memo((lambda m: f"{m / MICRO:.6f}") if fmt == "csv" else fmt_money)
    dur, ts = _memo(fmt_duration), _Stamps()
    code = _memo(lambda v: slurmfmt.exit_code(_Ended(*v)))
    rows = [[j.display_id, j.name, j.user, j.account, j.state, code((j.exit_code, j.state)) if fmt != "csv" else
             (j.exit_code if j.exit_code is not None else ""), ts(j.start_time), ts(j.end_time),
             dur(int(render.elapsed(j, j.end_time or 0))), j.gpus, _attempts(j), money(committed[j.id]),
             money(j.cost)] for j in jobs]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out)
        if not noheader:
            w.writerow(headers)
        w.writerows(rows)
        return click.echo(out.getvalue(), nl=False)
    text = render.table(rows, headers)
    if noheader:
        text = text.partition("\n")[2]
    if text:
        click.echo(text)
    if not noheader:
        click.echo(f"{len(jobs)} jobs, total cost {fmt_money(sum(j.cost for j in jobs))}")


def _memo(fn):
    seen: dict = {}

    def get(v):
        out = seen.get(v)
        if out is None:
            out = seen[v] = fn(v)
        return out
    return get


_Ended = namedtuple("_Ended", "exit_code state")      # what slurmfmt.exit_code reads of a job


class _Stamps:
    """Local `YYYY-MM-DD HH:MM:SS`, formatted once per minute (every zone's offset is whole minutes)."""

    def __init__(self):
        self.minutes: dict[int, str] = {}

    def __call__(self, t) -> str:
        if not t:
            return "-"
        s = int(t)
        head = self.minutes.get(s // 60)
        if head is None:
            head = self.minutes[s // 60] = time.strftime("%Y-%m-%d %H:%M:", time.localtime(s - s % 60))
        return f"{head}{s % 60:02d}"


def _attempts(j) -> int:
    return len(j.attempts) if isinstance(j, Job) else j.n_attempts
