"""Control commands: del, hold, release, requeue (jobs), drain, resume (nodes), checkpoint (from a job)."""
import os

import click

from labq.scheduler.errors import UsageError

from . import hot, spec
from .common import pass_ctx


def _job_command(name: str, op: str, doc: str):
    """A command that sends request `op` about the named jobs; the fast path (fast.py) runs these
    too (spec.COMMANDS), as it runs `del`."""
    @click.command(name, help=doc)
    @click.argument("job_ids", nargs=-1, required=True)
    @pass_ctx
    def command(ctx, job_ids):
        hot.control(ctx.thin, op, job_ids)
    return command


def _node_command(name: str, doc: str):
    """An admin's command about one node (nodeview.node_admin: the fast path's too)."""
    @click.command(name, help=doc)
    @click.argument("node")
    @pass_ctx
    def command(ctx, node):
        from .nodeview import node_admin
        node_admin(ctx.thin, name, node)
    return command


@click.command("del")
@click.argument("job_ids", nargs=-1)
@spec.with_options(spec.DEL)
@pass_ctx
def delete(ctx, job_ids, user):
    """Cancel jobs (your own; admins any), or with -u every job of a user. Running jobs get SIGTERM,
    then SIGKILL after kill_wait."""
    hot.delete(ctx.thin, job_ids, user=user)



hold = _job_command("hold", "hold", "Keep pending jobs from starting (reason Held) until released.")
release = _job_command("release", "release", "Let held jobs start again.")
requeue = _job_command("requeue", "requeue", "Stop running jobs and put them back in the queue with the same id "
                                             "(your own; admins any).")
drain = _node_command("drain", "Take no new jobs on NODE; running ones finish (admins).")
resume = _node_command("resume", "Let NODE take jobs again (admins).")


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
    # The job's $LABQ_REDIS_URL is the address alone (never a daemon's password); redis_url keeps
    # redis.url's login (the client role's, on a lab with ACL roles) where both name one server.
    reply = Client(cfg, url=redis_url(cfg)).checkpoint(int(jid))
    from .query import _ts
    click.echo(f"job {jid}: checkpoint recorded at {_ts(reply['time'])}")
