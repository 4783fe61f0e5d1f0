"""`labq admin`: the lab administrator's commands (Redis ACL roles, …)."""
import os
import socket

import click

from labq.scheduler.errors import RefusedError, UnreachableError, UsageError

from .common import pass_ctx, redis_url

DEFAULT_PASSWORD_FILE = "/etc/labq/redis.secret"


@click.group()
def admin():
    """Administration: Redis ACL roles (`labq admin acl`)."""


@admin.command()
@click.option("--apply", "do_apply", is_flag=True, help="Create the roles in Redis now and switch its default user off.")
@click.option("--aclfile", type=click.Path(dir_okay=False), help="Write them as a Redis aclfile (hashed passwords).")
@click.option("--node", "nodes", multiple=True, help="A node agent's role to include (repeatable); registered "
              "nodes and worker.name are included anyway.")
@click.option("--password-file", type=click.Path(dir_okay=False),
              help=f"ROLE PASSWORD file (default: redis.password_file, else {DEFAULT_PASSWORD_FILE}).")
@pass_ctx
def acl(ctx, do_apply, aclfile, nodes, password_file):
    """Print the Redis ACL roles (default off; labq-client; labq-node-NAME per node; labq-scheduler;
    labq-admin). With --apply or --aclfile, passwords missing from the password file are made and
    written to it (mode 0600): copy each node's line to that node's own file."""
    from labq.scheduler.store import acl as roles_mod, conn
    from labq.scheduler.store.keys import Keys
    from labq.scheduler.store.reads import Reader
    cfg = ctx.cfg
    path = password_file or cfg.redis_password_file or DEFAULT_PASSWORD_FILE
    if not os.path.isabs(path):
        raise UsageError(f"--password-file: expected an absolute path, got {path!r}")
    passwords = roles_mod.read_passwords(path)
    r = None
    if do_apply or not nodes:
        if roles_mod.ADMIN in passwords:
            conn.login_as(roles_mod.ADMIN, path)
        r = conn.connect(redis_url(cfg))
    names = set(nodes) | ({cfg.worker["name"]} if cfg.worker["name"] else set())
    if r is not None:
        try:
            names |= Reader(r, Keys(cfg.prefix)).node_names()
        except conn.ERRORS as e:
            if do_apply:
                raise UnreachableError(f"Redis at {redis_url(cfg)} does not answer: {e}") from None
    rules = roles_mod.roles(Keys(cfg.prefix), sorted(names))
    if do_apply or aclfile:
        for role in rules:
            passwords.setdefault(role, roles_mod.new_password())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        roles_mod.write_passwords(path, passwords)
    text = roles_mod.aclfile(rules, passwords)
    if aclfile:
        fd = os.open(aclfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        click.echo(f"wrote {aclfile} (redis.conf: aclfile {aclfile})")
    if do_apply:
        try:
            roles_mod.apply(r, rules, passwords)
        except conn.REFUSED as e:   # NOPERM, an old Redis without selectors, a bad password
            raise RefusedError(f"Redis at {redis_url(cfg)} refused the ACL roles: {e} (Redis 7 and an admin "
                               f"login are needed: {roles_mod.ADMIN} from {path}, or the default user)") from None
        click.echo(f"applied {len(rules)} roles; the default user is off; passwords in {path} (0600)")
    if do_apply or aclfile:
        host = socket.gethostname()
        click.echo(f"clients (world-readable config): url = \"redis://{roles_mod.CLIENT}:"
                   f"{passwords[roles_mod.CLIENT]}@{host}:6379/0\"")
        click.echo(f"daemons: password_file = \"{path}\" with the line of their role "
                   f"({roles_mod.SCHEDULER}, labq-node-NAME)")
    else:
        click.echo(text, nl=False)
