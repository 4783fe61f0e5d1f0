"""`labq admin`: the lab administrator's commands (Redis ACL roles, dead letters, accepting a
Redis loss, …). A plain click group: other modules add subcommands to it."""
import os
import re
import time

import click

from labq.scheduler.errors import LabqError, RefusedError, UnreachableError, UsageError

from .common import pass_ctx, redis_url
from .out import bounded_count, echo_json

DEFAULT_PASSWORD_FILE = "/etc/labq/secrets"      # a directory: one file per role
_SIZE = re.compile(r"<\d+ bytes>")


@click.group()
def admin():
    """Administration: Redis ACL roles (`labq admin acl`), dead letters, accept-loss."""


@admin.command()
@click.option("--apply", "do_apply", is_flag=True, help="Create the roles in Redis now and switch its default user off.")
@click.option("--aclfile", type=click.Path(dir_okay=False), help="Write them as a Redis aclfile (hashed passwords).")
@click.option("--node", "nodes", multiple=True, help="A node agent's role to include (repeatable); registered "
              "nodes and worker.name are included anyway.")
@click.option("--password-file", help=f"Where the passwords live: a directory of one file per role (default: "
              f"redis.password_file, else {DEFAULT_PASSWORD_FILE}) or an older single file.")
@click.option("--scheduler-user", help="Who owns the labq-scheduler password file it makes (default: labq where "
              "that user exists, else you).")
@pass_ctx
def acl(ctx, do_apply, aclfile, nodes, password_file, scheduler_user):
    """Print the Redis ACL roles (default off; labq-client; labq-node-NAME per node; labq-scheduler;
    labq-admin). With --apply or --aclfile, a password is made for each role that has none, in a
    file of its own (PATH/ROLE, mode 0600, owned by the daemon that reads it); the files of roles
    that have one are never touched: copy each node's file to that node."""
    from labq.scheduler.store import acl as roles_mod, faults, login, passwords as pw_files
    from labq.scheduler.store.keys import Keys
    cfg = ctx.cfg
    path = password_file or cfg.redis_password_file or DEFAULT_PASSWORD_FILE
    if not os.path.isabs(path):
        raise UsageError(f"--password-file: expected an absolute path, got {path!r}")
    owners = _owners(scheduler_user) if do_apply or aclfile else {}
    passwords = roles_mod.read_passwords(path)
    link = None
    if do_apply or not nodes:
        if roles_mod.ADMIN in passwords:
            login.as_admin(path)
        link = login.AdminLink(redis_url(cfg), cfg.prefix)
    names = set(nodes) | ({cfg.worker["name"]} if cfg.worker["name"] else set())
    if link is not None:
        try:
            names |= link.node_names()
        except faults.ERRORS as e:
            if do_apply:
                raise UnreachableError(f"Redis at {faults.without_credentials(redis_url(cfg))} does not answer: "
                                       f"{e}") from None
    rules = roles_mod.roles(Keys(cfg.prefix), sorted(names))
    made: list[str] = []
    if do_apply or aclfile:
        for role in rules:
            passwords.setdefault(role, roles_mod.new_password())
        made = pw_files.add(path, {r: passwords[r] for r in rules}, owners)
    text = roles_mod.aclfile(rules, passwords)
    if aclfile:
        fd = os.open(aclfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        click.echo(f"wrote {aclfile} (redis.conf: aclfile {aclfile})")
    if do_apply:
        try:
            link.apply_roles(rules, passwords)
        except faults.REFUSED as e:   # NOPERM, an old Redis without selectors, a bad password
            raise RefusedError(f"Redis at {faults.without_credentials(redis_url(cfg))} refused the ACL roles: {e} "
                               f"(Redis 7 and an admin login are needed: {roles_mod.ADMIN} from {path}, or the "
                               "default user)") from None
        click.echo(f"applied {len(rules)} roles; the default user is off")
    if do_apply or aclfile:
        _say_where(path, made, roles_mod.client_url(redis_url(cfg), passwords[roles_mod.CLIENT]))
    else:
        click.echo(text, nl=False)


def _owners(scheduler_user: str | None) -> dict:
    """Role -> (uid, gid) of the password files `acl` makes: the scheduler's user for its own (the
    daemon runs as labq under systemd), whoever runs the command for the rest."""
    import pwd
    try:
        pw = pwd.getpwnam(scheduler_user or "labq")
    except KeyError:
        if scheduler_user:
            raise UsageError(f"--scheduler-user: no user {scheduler_user!r} on this host") from None
        return {}
    from labq.scheduler.store.acl import SCHEDULER
    return {SCHEDULER: (pw.pw_uid, pw.pw_gid)}


def _say_where(path: str, made: list[str], url: str) -> None:
    if os.path.isdir(path):
        click.echo(f"passwords: {path}/ROLE, one file per role (0600); new: {', '.join(made) or 'none'}")
        click.echo(f"daemons: password_file = \"{path}\" (each reads its own role's file; copy "
                   f"{path}/labq-node-NAME to that node's {path})")
    else:
        click.echo(f"passwords: {path} (one file for every role, owner and mode kept; new: {', '.join(made) or 'none'})")
        click.echo(f"daemons: password_file = \"{path}\" with the line of their role (labq-scheduler, labq-node-NAME)")
    click.echo(f"clients (world-readable config): url = \"{url}\"")


@admin.command()
@click.option("-n", "--count", default=100, show_default=True, help="The newest N dead letters.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@pass_ctx
def dead(ctx, count, as_json):
    """Inbox entries and events the scheduler could not take, with the reason (labq:dead; admins).
    Values are shown as their sizes: a request holds scripts, exported variables, credentials."""
    bounded_count(count)
    admins_only(ctx, "dead")
    rows = [{**row, "entry": _redacted(row.get("entry", ""))} for row in ctx.client.read.dead(count)]
    if as_json:
        return echo_json(rows)
    if not rows:
        return click.echo("no dead letters")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(row.get("ts") or 0)))
        entry = row["entry"]
        click.echo(f"{when}  {row.get('source', '?')} {row.get('id', '?')}: {row.get('reason', '')}")
        click.echo(f"    {entry if len(entry) <= 200 else entry[:200] + '…'}")


def _redacted(entry: str) -> str:
    """A dead letter's entry with its values as sizes (store/writes.redacted), also for letters
    written before the scheduler redacted them."""
    import json

    from labq.scheduler.store.writes import redacted
    try:
        fields = json.loads(entry)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        return f"<{len(entry.encode('utf-8', 'surrogatepass'))} bytes>"
    out = redacted(fields)
    # a size the scheduler already wrote in place of a value stays that size
    out.update({k: v for k, v in fields.items() if k in out and isinstance(v, str) and _SIZE.fullmatch(v)})
    return json.dumps(out)


def admins_only(ctx, what: str) -> None:
    """Refuse (exit 3) a user security.admins does not name. Under the Redis ACL roles the client
    role cannot read what these commands read: an admin's command logs in as labq-admin where its
    password file is readable here."""
    from labq.scheduler.client import current_user
    from labq.scheduler.store import acl as roles_mod, login
    admins, me = ctx.cfg.security.admins, current_user()
    if me not in admins:
        raise RefusedError(f"labq admin {what} is for admins (security.admins: {', '.join(admins) or 'none'}); "
                           f"you are {me}")
    path = ctx.cfg.redis_password_file or DEFAULT_PASSWORD_FILE
    if os.access(path, os.R_OK) and roles_mod.ADMIN in roles_mod.read_passwords(path):
        login.as_admin(path)


@admin.command("accept-loss")
@click.option("--state-file", "state_file", type=click.Path(dir_okay=False),
              help="The scheduler's state file (default: scheduler.state_file, else the one the leader "
                   "named in Redis, else the state directory's).")
@pass_ctx
def accept_loss(ctx, state_file):
    """Accept what Redis holds now as the truth, after the scheduler refused a Redis that went
    backwards (the jobs and ledger entries it lost stay lost). Run it as the scheduler's user (as
    root, the file is given to the owner of its directory)."""
    from labq.scheduler.daemon.durability import StateFile, default_path
    cfg = ctx.cfg
    store = ctx.client.store.scheduler_store("accept-loss")
    f = StateFile(state_file or cfg.state_file or store.recorded_state_file() or default_path(cfg.prefix,
                                                                                               redis_url(cfg)))
    try:
        before = f.load()
    except LabqError:
        before = None
    now = store.figures()
    f.save(now, strict=True)
    _give_to_directory_owner(f.path)
    click.echo(f"{f.path}: {before.describe() if before else 'no figures'} -> {now.describe()} (Redis's, accepted)")


def _give_to_directory_owner(path: str) -> None:
    """root writing the scheduler's file: the scheduler (the directory's owner) must read it next."""
    if os.geteuid() == 0:
        st = os.stat(os.path.dirname(os.path.abspath(path)))
        os.chown(path, st.st_uid, st.st_gid)


def _archive_commands():
    from .archivecmd import archive, export, history
    admin.add_command(archive)
    admin.add_command(export)
    admin.add_command(history)


_archive_commands()
