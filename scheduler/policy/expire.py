"""The pending jobs a pass ends before it orders the rest: waited past --max-wait (`EX`), could no
longer finish before --deadline (`DL`), or depend on a job that can never satisfy them, with
--kill-on-invalid-dep (`CA`)."""
from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Expire
from .depend import Dependencies


def expire(pending: list[Job], now: float, deps: Dependencies) -> tuple[list[Expire], list[Job]]:
    """(the expiries, the jobs left waiting, in `pending`'s order)."""
    # Most jobs have nothing that can end them: only the others are looked at one by one.
    maybe = [j for j in pending if j.max_wait is not None or j.deadline is not None or j.deps]
    expires: list[Expire] = []
    for j in maybe:
        dep = deps.verdict(j)
        # A requeued job (preempted, retried, node failure) waits again from its last attempt's end.
        queued = j.attempts[-1].end_time or j.submit_time if j.attempts else j.submit_time
        if j.max_wait is not None and now - queued >= j.max_wait:
            expires.append(Expire(j.id, f"waited {now - queued:.0f}s, over --max-wait {j.max_wait}s"))
        elif j.deadline is not None and now + j.time_limit > j.deadline:
            expires.append(Expire(j.id, f"a start now could not finish its {j.time_limit}s before --deadline "
                                        f"({j.deadline - now:.0f}s from now)", states.DEADLINE))
        elif dep and dep[0] == states.DEPENDENCY_NEVER and j.kill_on_invalid_dep:
            expires.append(Expire(j.id, f"cancelled: {dep[1]} (--kill-on-invalid-dep)", states.CANCELLED))
    if not expires:
        return [], pending
    gone = {e.job_id for e in expires}
    return sorted(expires, key=lambda e: e.job_id), [j for j in pending if j.id not in gone]
