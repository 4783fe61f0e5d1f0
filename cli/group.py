"""`labq`: the click group. Command modules are imported lazily; the hot commands usually do not come
through here at all (main.py, fast.py)."""
import importlib

import click

from .common import Ctx, run_guarded

# command name -> (module, attribute)
COMMANDS = {
    "sub": ("labq.cli.submit", "sub"),
    "stat": ("labq.cli.query", "stat"), "q": ("labq.cli.query", "stat"),
    "show": ("labq.cli.query", "show"), "logs": ("labq.cli.query", "logs"), "wait": ("labq.cli.query", "wait"),
    "del": ("labq.cli.control", "delete"), "hold": ("labq.cli.control", "hold"), "release": ("labq.cli.control", "release"), "requeue": ("labq.cli.control", "requeue"), "acct": ("labq.cli.acct", "acct"),
    "nodes": ("labq.cli.query", "nodes"), "drain": ("labq.cli.control", "drain"), "resume": ("labq.cli.control", "resume"), "budget": ("labq.cli.budgetcmd", "budget"),
    "alerts": ("labq.cli.budgetcmd", "alerts"), "report": ("labq.cli.report", "report"), "ledger": ("labq.cli.ledgercmd", "ledger"),
    "config": ("labq.cli.configcmd", "config"),
    "up": ("labq.cli.daemons", "up"), "scheduler": ("labq.cli.daemons", "scheduler"), "worker": ("labq.cli.daemons", "worker"),
    "demo": ("labq.cli.demo", "demo"), "checkpoint": ("labq.cli.control", "checkpoint"), "plan": ("labq.cli.whatif", "plan"),
    "prio": ("labq.cli.prio", "prio"), "share": ("labq.cli.share", "share"),
    "simulate": ("labq.cli.simulate", "simulate"),
    "admin": ("labq.cli.admin", "admin"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        mod, attr = COMMANDS[name]
        return getattr(importlib.import_module(mod), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", envvar="LABQ_CONFIG", type=click.Path(dir_okay=False),
              help="Config file (default: $LABQ_CONFIG, /etc/labq/labq.toml, built-in defaults).")
@click.version_option(package_name="labq", message="labq %(version)s")
@click.pass_context
def cli(ctx, config_path):
    """labq — a job queue for GPU machines with quotas and budgets."""
    ctx.obj = Ctx(config_path)


def main():
    run_guarded(lambda: cli.main(standalone_mode=True))
