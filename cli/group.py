"""`labq`: the click group. Command modules are imported lazily; the hot commands usually do not come
through here at all (main.py, fast.py)."""
import importlib

import click

from .commands import COMMANDS, SHORT, short_help


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def format_commands(self, ctx, formatter):
        """click's listing, from SHORT: a command without a line there is imported for its own."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            short = SHORT.get(name)
            if short is None:
                short = self.get_command(ctx, name).get_short_help_str(limit)
            rows.append((name, short_help(short, limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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
    from .common import Ctx
    ctx.obj = Ctx(config_path)


def main():
    import os
    import sys

    from .common import run_guarded
    argv = sys.argv[1:]
    from .spec import asks_help
    if asks_help(argv) and os.path.basename(sys.argv[0]) == "labq" and os.environ.get("LABQ_FAST") != "0":
        # A command's help the fast path had no page for (helppage.py): made by click as its own
        # --help makes it, printed and kept; anything odd is left to click's own path.
        from . import helppage
        try:
            page = helppage.made(argv[0], cli)
        except Exception:    # noqa: BLE001 - click, on its own path, says what is wrong
            page = None
        if page is not None:
            os.write(1, page.encode())
            return
    run_guarded(lambda: cli.main(standalone_mode=True))


if __name__ == "__main__":      # make helppages: cli/helppages.txt made again (helppage.py)
    from . import helppage
    helppage.write_shipped(cli, COMMANDS)
