"""A job's script and exported environment, which the client role cannot read: their owner and
admins ask the scheduler for them (scheduler/security/private.py)."""
import sys

from labq.scheduler.errors import UnreachableError, UsageError

from .out import echo

SCRIPT_WAIT = 5.0     # the record is Redis': a scheduler down costs `show --json` this, not its timeout


def with_script(c, j):
    """One's own scripted job with its script, which the scheduler reads for its owner (`--json`);
    `script` stays null, said on stderr, when the scheduler does not answer."""
    if not (j.has_script and j.user == getattr(c, "user", None)):
        return j
    from labq.scheduler.store.inbox import request_timeout
    try:
        got = c.private(j, timeout=min(request_timeout(), SCRIPT_WAIT))
    except UnreachableError as e:
        echo(f"labq: job {j.display_id}: its script is not shown ({e}); `labq show --script "
             f"{j.display_id}` asks again", err=True)
        return j
    from labq.scheduler.store.jobview import JobView
    if isinstance(j, JobView):      # `labq show` reads views (hot.show)
        return j.replaced(script=got.get("script"))
    # not at the top: `stat` and `del` import this module, and neither needs dataclasses
    from dataclasses import replace
    return replace(j, script=got.get("script"))


def show(c, j, script: bool, env: bool) -> None:
    """The script as submitted, byte for byte (like `scontrol write batch_script ID -`), and/or the
    variables its submitter exported, NAME=value a line (kept until the job is archived)."""
    if script and not j.has_script:
        raise UsageError(f"job {j.display_id} has no script: it runs {' '.join(j.argv)[:200]!r}")
    got = c.private(j)
    if script and not got.get("script"):
        raise UsageError(f"job {j.display_id}: its script is no longer kept")
    if script:
        sys.stdout.write(got["script"])
    if env:
        # LABQ_SUB_*: what `sub` itself sends with them (an array's step), never given to the job
        sys.stdout.write("".join(f"{n}={v}\n" for n, v in sorted((got.get("env") or {}).items())
                                 if not n.startswith("LABQ_SUB_")))
