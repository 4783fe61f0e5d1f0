"""Dispatch: how an admitted attempt reaches its node, and when an undelivered one is taken back.

Each node has one labq-owned list, `labq:dispatch:<node>`. Admitting an attempt LPUSHes
"<job>:<attempt>" in the scheduler's own transaction (admitted and dispatched together or not at
all); the node's persistent runners BLMOVE from it into a list of their own, so a claim survives a
runner's crash (worker/slot.py). The entry carries nothing but (job id, attempt): the spec stays in
the job record, so a stale or forged entry can at most make a runner read a record that says no.

The entry's format (`entry`, `parse`) and the lists are store/dispatchq.py's.

An attempt is *claimed* when a runner wins HSETNX `claimed` on the attempt's hash. The scheduler
withdraws an attempt by winning that same HSETNX first, so exactly one of them happens: a runner
never starts an attempt the scheduler took back, and the scheduler never requeues one that started.
"""
from collections.abc import Iterable
from dataclasses import dataclass

from ..jobs import states
from ..jobs.model import Job


@dataclass(frozen=True)
class Unclaimed:
    """An attempt no runner has claimed, to take back: `why` is "cancel" or "timeout"."""
    job: Job
    why: str


def unclaimed(jobs: Iterable[Job], claims: dict[tuple[int, int], str | None], now: float, start_timeout: float,
              managed: set[str]) -> list[Unclaimed]:
    """The running attempts to withdraw: unclaimed (no runner took them) and either cancelled (labq
    del ends such a job at once) or dispatched longer than `start_timeout` ago. `claims` maps
    (job, attempt) to the attempt's `claimed` field (None: nobody yet). Only on `managed` nodes,
    whose agents report their runners: elsewhere nothing tells a lost entry from a slow node."""
    out = []
    for j in jobs:
        a = j.current
        if j.state not in states.ON_NODE or a is None or a.start_time or a.end_time or j.node not in managed:
            continue
        if claims.get((j.id, a.attempt)) is not None:
            continue
        if j.cancel_requested:
            out.append(Unclaimed(j, "cancel"))
        elif start_timeout > 0 and now - (a.dispatch_time or now) > start_timeout:
            out.append(Unclaimed(j, "timeout"))
    return out
