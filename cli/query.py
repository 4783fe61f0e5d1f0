"""Read commands: stat, show, logs, wait, acct, nodes (the control commands are in control.py)."""
import csv
import io
import os
import sys
import time

import click

from labq.scheduler import states
from labq.scheduler.errors import UsageError
from labq.scheduler.units import MICRO, fmt_duration, fmt_money, fmt_size, parse_duration

from . import render
from .common import echo_json, fail, pass_ctx, volatile_header


@click.command()
@click.option("-u", "--user", help="Only this user's jobs.")
@click.option("-A", "--account", help="Only this account's jobs.")
@click.option("-t", "--state", "state", help="Only these states, comma-separated (PD,R).")
@click.option("--me", is_flag=True, help="Only my jobs.")
@click.option("--start", is_flag=True, help="Expected start of pending jobs (from running jobs' time limits).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def stat(ctx, user, account, state, me, start, as_json):
    """The queue: pending and running jobs, with a capacity header."""
    c, now = ctx.client, time.time()
    jobs = c.read.active()
    if start:
        return _stat_start(c, jobs, now, user or (c.user if me else None), account, as_json)
    user = c.user if me else user
    wanted = {s.strip().upper() for s in state.split(",")} if state else None
    shown = [j for j in sorted(jobs, key=lambda j: j.id)
             if (not user or j.user == user) and (not account or j.account == account)
             and (not wanted or j.state in wanted)]
    if as_json:
        return echo_json([render.job_dict(j, now) for j in shown])
    volatile_header(ctx)
    click.echo(render.capacity_line(c.nodes(), jobs))
    rows = [render.stat_row(j, now, label) for label, j in render.compact(shown)]
    click.echo(render.table(rows, render.STAT_HEADERS))


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
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def show(ctx, job_id, as_json):
    """One job in full: request, state and the reason with its numbers, attempts, cost."""
    j = ctx.client.job(job_id)
    d = render.job_dict(j)
    if as_json:
        return echo_json(d)
    from labq.scheduler.logpath import out_path
    lines = [f"Job {j.display_id} ({j.name}) user={j.user} account={j.account} qos={j.qos}",
             f"  state: {j.state}" + (f"  reason: {j.reason} — {j.detail}" if j.state == states.PENDING else
                                      f"  {j.detail}" if j.detail else ""),
             f"  request: {j.gpus} GPU{'s' if j.gpus != 1 else ''}{' ' + j.gpu_type if j.gpu_type else ''}, "
             f"{j.cpus} CPUs, {fmt_size(j.mem)}, time limit {fmt_duration(j.time_limit)}"
             + (f", max wait {fmt_duration(j.max_wait)}" if j.max_wait is not None else ""),
             f"  command: {' '.join(d['command'])}", f"  workdir: {j.workdir}", f"  output: {out_path(j)}",
             f"  submitted {_ts(j.submit_time)}, started {_ts(j.start_time)}, ended {_ts(j.end_time)}",
             f"  restarts: {j.restart_count}  exit code: {j.exit_code}  cost: {fmt_money(round(d['cost'] * MICRO))}"]
    if j.deps:
        lines.append(f"  dependency: {d['dependency']}" + (" (--kill-on-invalid-dep)" if j.kill_on_invalid_dep else ""))
    if j.deadline:
        lines.append(f"  deadline: {_ts(j.deadline)}")
    if j.preempt_count or j.borrowed or j.state == states.PREEMPTING:
        lines.append(f"  preempted {j.preempt_count} time(s)" + ("; runs on borrowed GPUs (may be reclaimed)"
                                                                  if j.borrowed else "")
                     + (f"; draining for job {j.preempted_for}" if j.preempted_for else ""))
    if j.retries:
        lines.append(f"  retries: {j.retries_used}/{j.retries} used"
                     + (f", on exit codes {','.join(map(str, j.retry_on))}" if j.retry_on else "")
                     + (f"; eligible again {_ts(j.eligible_time)}" if j.state == states.PENDING and j.eligible_time
                        else ""))
    if j.commit:
        lines.append("  committed: " + ", ".join(f"{b} {fmt_money(m)}" for b, m in j.commit))
    for a in j.attempts:
        lines.append(f"  attempt {a.attempt}: node {a.node} gpus {','.join(a.gpus) or '-'} "
                     f"{_ts(a.start_time or a.dispatch_time)} → {_ts(a.end_time)} {a.outcome or 'running'}"
                     f" exit {a.exit_code} cost {fmt_money(a.cost)}"
                     + (f" cpu {a.usage.get('cpu_s', 0):.1f}s" if a.usage else "")
                     + (f" last checkpoint {_ts(a.last_checkpoint)}" if a.last_checkpoint else "")
                     + (f" lost work {a.lost_work_s:.0f}s" if a.lost_work_s else ""))
        if render.usage_text(a.usage):
            lines.append(f"    usage: {render.usage_text(a.usage)}")
    click.echo("\n".join(lines))


def _ts(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


@click.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the job writes, until it ends.")
@click.option("--err", is_flag=True, help="Show the stderr file (when -e gave one).")
@pass_ctx
def logs(ctx, job_id, follow, err):
    """A job's output."""
    from labq.scheduler.client import current_user
    from labq.scheduler.logpath import err_path, out_path
    j = ctx.client.job(job_id)
    path = err_path(j) if err else out_path(j)
    me = current_user()
    # Another user's output is theirs: shown only where its mode lets the caller read it (the
    # submitter's umask decided), or to an admin.
    if j.user != me and me not in ctx.cfg.security["admins"] and os.path.exists(path) \
            and not os.access(path, os.R_OK):
        fail(f"job {j.display_id} belongs to {j.user}: its output {path} is not readable by {me}", 3)
    pos = 0
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        except FileNotFoundError:
            if not follow and j.state != states.PENDING:
                fail(f"no output yet at {path}", 2)
        except PermissionError:
            fail(f"cannot read {path}: permission denied", 2)
        if not follow or j.state in states.TERMINAL:
            return
        time.sleep(0.5)
        j = ctx.client.job(job_id)


def exit_status(j) -> int:
    if j.state == states.COMPLETED:
        return 0
    if j.exit_code is not None and j.exit_code > 0:
        return min(j.exit_code, 255)
    if j.exit_code is not None and j.exit_code < 0:
        return 128 + (-j.exit_code)
    return 1


def wait_for_jobs(client, ids, quiet=False, timeout=None) -> int:
    jobs = [j for i in ids for j in (client.resolve(i) or _missing(i))]
    end = time.monotonic() + timeout if timeout else None
    code = 0
    for job in jobs:
        while job.state not in states.TERMINAL:
            if end and time.monotonic() > end:
                fail(f"timed out waiting for job {job.display_id}", 1)
            time.sleep(0.2)
            job = client.read.job(job.id)
        if not quiet:
            click.echo(f"{job.display_id} {job.state} exit={job.exit_code}")
        code = code or exit_status(job)
    return code


def _missing(i):
    raise UsageError(f"no such job: {i}")


@click.command()
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", help="Give up after this long (exit 1).")
@pass_ctx
def wait(ctx, job_ids, timeout):
    """Block until the jobs end; exit with the (first failing) job's exit code."""
    secs = parse_duration(timeout, "--timeout", bare_unit=1) if timeout else None
    sys.exit(wait_for_jobs(ctx.client, list(job_ids), timeout=secs))


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
    volatile_header(ctx)
    click.echo(render.table(rows, ["NODE", "STATE", "GPUS", "MODEL", "CPUS", "MEM", "JOBS", "SLOTS"]))
