"""Read commands: stat, show, logs, wait, nodes (acct is in acct.py, the control commands in control.py)."""
import os
import re
import sys
import time

import click

from labq.scheduler import states
from labq.scheduler.errors import UsageError
from labq.scheduler.units import MICRO, fmt_duration, fmt_money, fmt_size, parse_duration

from . import render, slurmfmt
from .common import echo_json, fail, pass_ctx


@click.command()
@click.option("-u", "--user", help="Only this user's jobs.")
@click.option("-A", "--account", help="Only this account's jobs.")
@click.option("-t", "--state", "--states", "state", help="Only these states: PD,R or PENDING,RUNNING.")
@click.option("-j", "--jobs", "job_ids", help="Only these jobs: 42,43_7,44_[1-3] (42: the job, or all its tasks).")
@click.option("--me", is_flag=True, help="Only my jobs.")
@click.option("--start", is_flag=True, help="Expected start of pending jobs (from running jobs' time limits).")
@click.option("-o", "--format", "fmt", help='squeue fields, like "%.10i %.9T %.8u %.10M %.10l %b %R".')
@click.option("--noheader", is_flag=True, help="No header lines.")
@click.option("-r", "--array", "expand", is_flag=True, help="One line per array task (else pending tasks compact).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def stat(ctx, user, account, state, job_ids, me, start, fmt, noheader, expand, as_json):
    """The queue: pending and running jobs, with a capacity header."""
    c, now = ctx.client, time.time()
    wanted = _states(state)
    picked = _id_filter(job_ids)
    jobs = c.read.active()
    if start:
        return _stat_start(c, jobs, now, user or (c.user if me else None), account, as_json)
    user = c.user if me else user
    shown = [j for j in sorted(jobs, key=lambda j: j.id)
             if (not user or j.user == user) and (not account or j.account == account)
             and (not wanted or j.state in wanted) and picked(j)]
    if as_json:
        return echo_json([render.job_dict(j, now) for j in shown])
    rows = [(j.display_id, j) for j in shown] if expand else render.compact(shown)
    if fmt:
        return click.echo(slurmfmt.squeue(fmt, rows, now, header=not noheader))
    if not noheader:
        click.echo(render.capacity_line(c.nodes(), jobs))
    lines = render.table([render.stat_row(j, now, label) for label, j in rows], render.STAT_HEADERS).splitlines()
    if lines[noheader:]:
        click.echo("\n".join(lines[noheader:]))


def _states(text):
    if not text:
        return None
    try:
        return states.parse_states(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _id_filter(text):
    """`42,43_7,44_[1-3]` → a predicate on jobs (42 names the job or every task of array 42)."""
    if not text:
        return lambda j: True
    from labq.scheduler.jobspec import parse_task_ids
    whole, tasks = set(), {}
    for item in (x.strip() for x in re.split(r",(?![^\[]*\])", text) if x.strip()):
        t = parse_task_ids(item)
        if t:
            tasks.setdefault(t[0], set()).update(t[1])
        elif item.isdigit():
            whole.add(int(item))
        else:
            raise UsageError(f"--jobs: expected ids like 42,43_7,44_[1-3], got {item!r}")
    return lambda j: (j.id in whole or j.array_id in whole
                      or (j.array_id in tasks and j.array_index in tasks[j.array_id]))


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
    """One job in full: request, state and the reason with its numbers, attempts, cost. An array's
    id: a summary of its tasks (name one, like 42_3, for the full view)."""
    found = ctx.client.resolve(job_id)
    if not found:
        raise UsageError(f"no such job: {job_id}")
    if len(found) > 1:
        return _show_array(found, as_json)
    j = found[0]
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


def _show_array(tasks, as_json):
    """An array parent: its request once, and how many tasks are in each state (ids compact)."""
    now, first = time.time(), tasks[0]
    by_state: dict[str, list[str]] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        by_state.setdefault(t.state, []).append(t.display_id)
    cost = sum(t.cost + render.running_cost(t, now) for t in tasks)
    d = {"array_job_id": first.array_id, "name": first.name, "user": first.user, "account": first.account,
         "qos": first.qos, "tasks": len(tasks), "states": {s: len(ids) for s, ids in by_state.items()},
         "task_ids": {s: slurmfmt.compact_ids(ids) for s, ids in by_state.items()}, "cost": cost / MICRO,
         "request": render.job_dict(first, now)["request"]}
    if as_json:
        return echo_json(d)
    lines = [f"Array {first.array_id} ({first.name}) user={first.user} account={first.account} qos={first.qos}: "
             f"{len(tasks)} tasks",
             f"  request per task: {first.gpus} GPU{'s' if first.gpus != 1 else ''}"
             f"{' ' + first.gpu_type if first.gpu_type else ''}, {first.cpus} CPUs, {fmt_size(first.mem)}, "
             f"time limit {fmt_duration(first.time_limit)}"]
    lines += [f"  {states.LONG.get(s, s):<13} {len(ids):>6}  {', '.join(slurmfmt.compact_ids(ids))}"
              for s, ids in by_state.items()]
    lines.append(f"  cost so far: {fmt_money(cost)}")
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
