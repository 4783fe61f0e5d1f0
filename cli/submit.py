"""`labq sub` as a click command: the flags (spec.SUB) and the #LABQ directives through click; the
work is subcore.run's, which the fast path (fast.py) calls too."""
import click

from labq.scheduler.errors import UsageError

from . import spec
from .common import pass_ctx
from .subcore import run


class SubCommand(click.Command):
    """Remembers whether `--` was given: after it, the arguments are a command, not a script."""

    def parse_args(self, ctx, args):
        ctx.meta["dashdash"] = "--" in args
        return super().parse_args(ctx, spec.sbatch_forms(args))


@click.command(cls=SubCommand, context_settings={"ignore_unknown_options": False})
@spec.with_options(spec.SUB)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
@click.pass_context
def sub(cctx, ctx, args, **opts):
    """Submit a job: `labq sub [opts] -- CMD…`, `labq sub SCRIPT [ARGS]`, or a script on stdin."""
    run(ctx.thin, opts, args, bool(cctx.meta.get("dashdash")),
        lambda o, dirs, what: _merge_directives(cctx, o, dirs, what))


def _merge_directives(cctx, opts, dirs, what: str = "#LABQ"):
    if not dirs:
        return
    try:
        sub_ctx = sub.make_context("sub", dirs + ["--", "true"], parent=cctx.parent)
    except click.UsageError as e:
        raise UsageError(f"{what} directive: {e.format_message()}") from None
    for k, v in sub_ctx.params.items():
        if k != "args" and opts.get(k) in (None, ()) and v not in (None, ()):
            opts[k] = v


