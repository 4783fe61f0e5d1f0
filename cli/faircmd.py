"""`labq prio` and `labq share` as click commands: their options from spec.PRIO and spec.SHARE,
their work in prio.py and share.py (the fast path's too, fast.py)."""
import click

from . import prio as prio_view, share as share_view
from .common import pass_ctx
from .spec import PRIO, SHARE, with_options


@click.command()
@with_options(PRIO)
@pass_ctx
def prio(ctx, user, account, expand, as_json):
    """Pending jobs in the order the scheduler considers them, with each factor's weighted part.

    priority = qos_weight × QoS + age_weight × age (0..1 over age_max) + fairshare_weight × fair share
    (0..1, 2^(−usage share ÷ account share)) − burst_penalty × burst (0 or 1)
    + short_job_weight × short (0..1, fading with the wait; off by default)."""
    prio_view.run(ctx, user, account, expand, as_json)


@click.command()
@with_options(SHARE)
@pass_ctx
def share(ctx, account, noheader, parsable2, as_json):
    """Accounts' shares, decayed usage and fair-share factors (sshare-like)."""
    share_view.run(ctx, account, noheader, parsable2, as_json)
