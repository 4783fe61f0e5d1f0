"""`labq report` as a click command, for click's path (help at other widths, forms the fast path
leaves to click, LABQ_FAST=0); the work is report.py's, without click (fast.py)."""
import click

from . import report as core
from .common import pass_ctx
from .spec import REPORT, with_options


@click.command()
@with_options(REPORT)
@pass_ctx
def report(ctx, **params):
    """Cost reports: GPU-hours, cost, success rate, cost per success, failed and preempted cost, idle GPUs."""
    core.run(ctx, **params)
