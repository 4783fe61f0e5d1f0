"""`labq acct` as a click command, for click's path (help at other widths, forms the fast path leaves
to click, LABQ_FAST=0); the work and the plain forms are acct.py's, without click (fast.py)."""
import click

from . import acct as core
from .common import pass_ctx
from .spec import ACCT, with_options


@click.command()
@with_options(ACCT)
@pass_ctx
def acct(ctx, **params):
    """History of ended jobs with their costs (sacct-like): your own, or every user's for admins."""
    core.run(ctx, **params)
