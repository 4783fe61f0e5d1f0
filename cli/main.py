"""`labq`: the click group. Command modules are imported lazily so that `labq sub` starts fast."""
import importlib

import click

from .common import Ctx, run_guarded

# command name -> (module, attribute)
COMMANDS = {
    "sub": ("cli.submit", "sub"),
    "stat": ("cli.query", "stat"), "q": ("cli.query", "stat"),
    "show": ("cli.query", "show"), "logs": ("cli.query", "logs"), "wait": ("cli.query", "wait"),
    "del": ("cli.query", "delete"), "hold": ("cli.query", "hold"), "release": ("cli.query", "release"), "requeue": ("cli.query", "requeue"), "acct": ("cli.query", "acct"),
    "nodes": ("cli.query", "nodes"), "drain": ("cli.query", "drain"), "resume": ("cli.query", "resume"), "budget": ("cli.budgetcmd", "budget"),
    "alerts": ("cli.budgetcmd", "alerts"), "report": ("cli.report", "report"), "ledger": ("cli.ledgercmd", "ledger"),
    "config": ("cli.configcmd", "config"),
    "up": ("cli.daemons", "up"), "scheduler": ("cli.daemons", "scheduler"), "worker": ("cli.daemons", "worker"),
    "demo": ("cli.demo", "demo"), "checkpoint": ("cli.query", "checkpoint"), "plan": ("cli.plan", "plan"),
    "prio": ("cli.prio", "prio"),
    "simulate": ("cli.simulate", "simulate"),
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


if __name__ == "__main__":
    main()
