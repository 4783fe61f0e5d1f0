"""`labq admin`: operators' commands. A plain click group: other modules add subcommands to it."""
import time

import click

from labq.scheduler.errors import LabqError

from .common import echo_json, pass_ctx


@click.group()
def admin():
    """Operators' commands (dead letters, …)."""


@admin.command()
@click.option("-n", "--count", default=100, show_default=True, help="The newest N dead letters.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@pass_ctx
def dead(ctx, count, as_json):
    """Inbox entries and events the scheduler could not take, with the reason (labq:dead)."""
    c = ctx.client
    rows = [{"id": i, **f} for i, f in reversed(c.r.xrevrange(c.k.dead, count=max(1, count)))]
    if as_json:
        return echo_json(rows)
    if not rows:
        return click.echo("no dead letters")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(row.get("ts") or 0)))
        entry = row.get("entry", "")
        click.echo(f"{when}  {row.get('source', '?')} {row.get('id', '?')}: {row.get('reason', '')}")
        click.echo(f"    {entry if len(entry) <= 200 else entry[:200] + '…'}")


@admin.command("accept-loss")
@pass_ctx
def accept_loss(ctx):
    """Accept what Redis holds now as the truth, after the scheduler refused a Redis that went
    backwards (the jobs and ledger entries it lost stay lost). Run it as the scheduler's user."""
    from labq.scheduler.durability import StateFile, default_path
    from labq.scheduler.store.state import SchedulerStore
    from .common import redis_url
    c, cfg = ctx.client, ctx.cfg
    f = StateFile(cfg.state_file or default_path(cfg.prefix, redis_url(cfg)))
    try:
        before = f.load()
    except LabqError:
        before = None
    now = SchedulerStore(c.r, c.k, "accept-loss").figures()
    f.save(now)
    if f.saved != now:
        raise LabqError(f"could not write {f.path}")
    click.echo(f"{f.path}: {before.describe() if before else 'no figures'} -> {now.describe()} (Redis's, accepted)")
