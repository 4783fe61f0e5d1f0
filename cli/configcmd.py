"""`labq config check FILE`."""
import click

from labq.scheduler.settings import config as config_mod


@click.group()
def config():
    """Configuration."""


@config.command()
@click.argument("path", type=click.Path(dir_okay=False))
def check(path):
    """Validate a config file: exit 0 and a summary, or exit 2 naming the bad key."""
    cfg = config_mod.load(path)
    shown = "private (labq up)" if not cfg.redis_url else _without_password(cfg.redis_url)
    click.echo(f"{path}: ok — {len(cfg.qos)} QoS, {len(cfg.accounts)} accounts, {len(cfg.budgets)} budgets, "
               f"budget_mode={cfg.budget_mode}, redis={shown}, auth={cfg.security['auth']}")
    for w in warnings(cfg):
        click.echo(f"{path}: warning: {w}", err=True)


def warnings(cfg) -> list[str]:
    """What is valid but unsafe."""
    out = []
    if cfg.redis_url.startswith(("redis://", "rediss://", "sentinel://")) and cfg.security["auth"] != "munge":
        out.append(f"redis.url is TCP ({_without_password(cfg.redis_url)}) but security.auth is "
                   f"\"{cfg.security['auth']}\": whoever reaches Redis can act as any user, root included; "
                   "set security.auth = \"munge\" and apply `labq admin acl` (systemd/README.md)")
    # Membership (scheduler/security/members.py) is closed by default: say which tables no user may charge.
    for a in cfg.accounts:
        if not a.users and not a.open:
            out.append(f"accounts.{a.name} lists no users and is not open: only admins may charge it "
                       f"(-A {a.name}); list its users, or set open = true")
    for b in cfg.budgets:
        if not b.account and not b.users and not b.open:
            how = f"--project {b.project}" if b.project else f"--budget {b.name}"
            out.append(f"budget {b.name} lists no users and is not open: only admins may join it ({how}); "
                       "list its users, or set open = true")
    return out


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user, host = parts.netloc.rsplit("@", 1)
    return url.replace(parts.netloc, f"{user.split(':', 1)[0]}:***@{host}" if ":" in user else parts.netloc, 1)
