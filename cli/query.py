"""Read commands: stat, show, logs, wait, nodes (acct is in acct.py, the control commands in control.py)."""
import time

import click

from labq.scheduler.jobs import states
from labq.scheduler.units import fmt_duration

from . import hot, spec, statview
from .common import pass_ctx
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
@with_options(spec.NODES)
@pass_ctx
def nodes(ctx, as_json):
    """Nodes with free/total GPUs, CPUs and memory."""
    from .nodeview import nodes as show_nodes
    show_nodes(ctx.thin, as_json)
