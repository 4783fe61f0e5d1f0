"""Control commands: del, hold, release, requeue (jobs), drain, resume (nodes), checkpoint (from a job)."""
import os

import click

from labq.scheduler.errors import UsageError

from . import hot
from .common import pass_ctx


def _control(ctx, op, job_ids):
    hot.control(ctx.thin, op, job_ids)    # `del` is a hot command: the fast path (fast.py) runs it too


@click.command("del")
@click.argument("job_ids", nargs=-1, required=True)
@pass_ctx
def delete(ctx, job_ids):
    """Cancel jobs (your own; admins any). Running jobs get SIGTERM, then SIGKILL after kill_wait."""
    _control(ctx, "cancel", job_ids)


@click.command()
@click.argument("job_ids", nargs=-1, required=True)
@pass_ctx
def hold(ctx, job_ids):
    """Keep pending jobs from starting (reason Held) until released."""
    _control(ctx, "hold", job_ids)


@click.command()
@click.argument("job_ids", nargs=-1, required=True)
@pass_ctx
def release(ctx, job_ids):
    """Let held jobs start again."""
    _control(ctx, "release", job_ids)


@click.command()
@click.argument("job_ids", nargs=-1, required=True)
@pass_ctx
def requeue(ctx, job_ids):
    """Stop running jobs and put them back in the queue with the same id (your own; admins any)."""
    _control(ctx, "requeue", job_ids)


@click.command()
@click.argument("node")
@pass_ctx
def drain(ctx, node):
    """Take no new jobs on NODE; running ones finish (admins)."""
    ctx.client.node_admin("drain", node)
    click.echo(f"node {node}: draining (running jobs finish; nothing new starts)")


@click.command()
@click.argument("node")
@pass_ctx
def resume(ctx, node):
    """Let NODE take jobs again (admins)."""
    ctx.client.node_admin("resume", node)
    click.echo(f"node {node}: up")


@click.command()
@pass_ctx
def checkpoint(ctx):
    """From inside a job: record that it has just saved a checkpoint (lost work counts from now)."""
    jid = os.environ.get("LABQ_JOB_ID", "")
    if not jid.isdigit():
        raise UsageError("labq checkpoint runs inside a labq job (LABQ_JOB_ID is not set)")
    # Inside a job the runner's environment names the Redis and key prefix the job came from.
    from dataclasses import replace

    from labq.scheduler.client import Client

    from .common import redis_url
    cfg = replace(ctx.cfg, prefix=os.environ.get("LABQ_PREFIX") or ctx.cfg.prefix)
    # redis.url first: on a lab with ACL roles it carries the client role's login, which the job's
    # $LABQ_REDIS_URL (the address alone, never a daemon's password) does not.
    reply = Client(cfg, url=redis_url(cfg)).checkpoint(int(jid))
    from .query import _ts
    click.echo(f"job {jid}: checkpoint recorded at {_ts(reply['time'])}")
