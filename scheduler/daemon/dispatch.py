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
import logging
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..jobs import states
from ..jobs.model import Job, Node
from ..money import alerts as budget_alerts
from ..settings.config import Config
from . import transitions as tr
from .attempt import gang_stop
from .change import Change

log = logging.getLogger("labq.scheduler")


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


def withdrawn(u: Unclaimed, now: float, nodes: Iterable[Node], cfg: Config) -> Change:
    """An unclaimed attempt the scheduler won back (store: dispatchq.withdraw): the job requeued (or
    ended, where cancelled), a gang's other parts stopped before they start; after a start timeout,
    its node marked unhealthy (`unhealthy`)."""
    n = u.job.attempts[-1].attempt
    health, alerts = ([], []) if u.why != "timeout" else unhealthy(
        nodes, u.job.node, now, f"no runner took job {u.job.display_id} attempt {n} within {cfg.start_timeout:.0f}s")
    stop = [(u.job.id, gang_stop(n))] if u.job.parts else []
    return Change(jobs=[tr.withdrawn(u.job, u.why, now, cfg.start_timeout)], controls=stop, alerts=alerts,
                  health=health)


def unhealthy(nodes: Iterable[Node], node: str, now: float, reason: str,
              marked: Container[str] = ()) -> tuple[list[tuple[str, str | None]], list[dict[str, Any]]]:
    """Its runners took no work within start_timeout: no more work there (this tick's plan included)
    until one of them proves alive (`healthy_again`). The mark and the alert that says so, for the
    change that takes the work back; none where the node was marked already (its `reason`, or
    `marked` by the same change): the first mark's time and reason stay."""
    if not node or node in marked or any(n.name == node and n.reason for n in nodes):
        return [], []
    log.error("node %s is unhealthy: %s; nothing is dispatched there until a runner proves alive", node, reason)
    a = budget_alerts.Alert(f"node:{node}|unhealthy|{now}", "node_unhealthy", f"node:{node}", "error",
                            f"node {node} is unhealthy: {reason}; it gets no work until a runner proves alive",
                            now, {"node": node, "reason": reason})
    return [(node, reason)], [a.fields()]


def healthy_again(sick: Iterable[str], marked: Mapping[str, float], beats: Mapping[str, float],
                  now: float) -> list[str]:
    """The unhealthy nodes one of whose runners wrote its state after the mark (store/nodehealth.signs)."""
    return sorted(n for n in sick if beats.get(n, 0.0) > marked.get(n, now))
