"""`labq config check FILE`."""
import click

from labq.scheduler import config as config_mod


@click.group()
def config():
    """Configuration."""


@config.command()
@click.argument("path", type=click.Path(dir_okay=False))
def check(path):
    """Validate a config file: exit 0 and a summary, or exit 2 naming the bad key."""
    cfg = config_mod.load(path)
    click.echo(f"{path}: ok — {len(cfg.qos)} QoS, {len(cfg.accounts)} accounts, {len(cfg.budgets)} budgets, "
               f"budget_mode={cfg.budget_mode}, redis={'private (labq up)' if not cfg.redis_url else cfg.redis_url}")
