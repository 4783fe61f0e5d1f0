"""Read commands: stat, show, logs, wait, nodes (acct is in acct.py, the control commands in control.py)."""
import time

import click

from labq.scheduler.jobs import states
from labq.scheduler.units import fmt_duration, fmt_size

from . import hot, render, spec, statview
from .common import pass_ctx, volatile_header
from .out import echo_json
from .spec import with_options


@click.command(context_settings={"help_option_names": ["--help"]})     # -h: squeue's --noheader
@with_options(spec.STAT)
@pass_ctx
def stat(ctx, user, account, state, job_ids, me, start, fmt, noheader, expand, rid, as_json):
    """The queue: pending and running jobs, with a capacity header."""
    if rid:
        return hot.request_status(ctx.thin, rid, as_json)
    if start:
        c, now = ctx.client, time.time()
        hot._states(state)
        return _stat_start(c, [j for j in c.read.active() if hot._id_filter(job_ids)(j)], now,
                           user or (c.user if me else None), account, as_json)
    hot.stat(ctx.thin, user=user, account=account, state=state, job_ids=job_ids, me=me, fmt=fmt,
             noheader=noheader, expand=expand, as_json=as_json)


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
    click.echo(statview.table(rows, ("JOBID", "NAME", "USER", "ACCOUNT", "QOS", "START_TIME", "REASON")))


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
def show(ctx, job_id, script, env, as_json):
    """One job in full: request, state and the reason with its numbers, attempts, cost. An array's
    id: a summary of its tasks (name one, like 42_3, for the full view)."""
    hot.show(ctx.thin, job_id, script=script, env=env, as_json=as_json)


_ts = hot.ts
_states, _id_filter = hot._states, hot._id_filter   # acct.py filters the same way


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


@click.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def nodes(ctx, as_json):
    """Nodes with free/total GPUs, CPUs and memory."""
    jobs = ctx.client.read.active()
    ns = ctx.client.nodes()
    runners = ctx.client.read.runners([n.name for n in ns])
    ds = [{**render.node_dict(n, jobs), "runners": runners.get(n.name, {})} for n in ns]
    if as_json:
        return echo_json(ds)
    rows = [[d["name"], d["state"], f"{d['gpus_free']}/{d['gpus_total']}", ",".join(d["gpu_models"]) or "-",
             f"{d['cpus_free']}/{d['cpus_total']}", f"{fmt_size(max(0, d['mem_free']))}/{fmt_size(d['mem_total'])}",
             len(d["jobs"]), d["slots"], _runners_text(d["runners"])] for d in ds]
    volatile_header(ctx)
    click.echo(statview.table(rows, ["NODE", "STATE", "GPUS", "MODEL", "CPUS", "MEM", "JOBS", "SLOTS", "RUNNERS"]))
    for d in ds:
        if d["reason"]:
            click.echo(f"{d['name']}: {d['state']}: {d['reason']}")


def _runners_text(runners: dict) -> str:
    """"3 idle, 1 running" from each runner's state ("idle pid=… <time>", "running 12.1 pid=…")."""
    counts: dict[str, int] = {}
    for v in runners.values():
        word = v.split(" ", 1)[0]
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "-"
