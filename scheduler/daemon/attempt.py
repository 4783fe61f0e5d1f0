"""What a node's event about an attempt changes — pure: (the job table, the event, the node that
sent it, now) -> Change. `started` stamps the attempt; `finished` ends it with its charges; a
gang's part that completed waits for the others, any other end of a part ends the whole attempt
and stops the parts still running (shared fate); an agent's own alert is recorded. `lost`: which
attempts their node or their runner lost. The daemon (events.py) reads the streams, heartbeats
and leases, names the sender, runs the crash guard on what ended and commits."""
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UsageError
from ..jobs import states
from ..jobs.model import Attempt, Job, Node
from ..money import alerts as budget_alerts
from ..settings.config import Config
from . import transitions as tr
from .change import Change
from .decode import Event

log = logging.getLogger("labq.scheduler")


def gang_stop(attempt: int) -> str:
    """The control that kills the remaining parts of gang attempt `attempt` at once (worker/runner.py);
    naming the attempt, it never stops a later one."""
    return f"stop:{attempt}"


def decide(jobs: Mapping[int, Job], eid: str, ev: Event, sender: str, now: float, cfg: Config) -> Change:
    """What a started/finished event (decode.Event) from node `sender` writes. Only the node the
    attempt was placed on speaks for it; `ended` is set when the event ends the attempt."""
    job = jobs.get(ev.job)
    # A gang's attempt: each of its parts' nodes speaks for its own part, also once it has ended.
    a = job.attempts[ev.attempt - 1] if job is not None and 0 < ev.attempt <= len(job.attempts) else None
    parts = {n for n, _ in a.parts} if a is not None and a.parts else set()
    if job is None:
        return Change()
    if sender not in parts and (not job.node or sender not in {n for n, _ in job.on_nodes}):
        log.warning("event %s about job %s from node %r dropped: the attempt runs on %r",
                    eid, job.display_id, sender, ",".join(n for n, _ in job.on_nodes))
        return Change()
    if ev.kind == "started":
        new = tr.started(job, ev.attempt, ev.body)
        return Change(jobs=[new]) if new else Change()
    if ev.kind != "finished":
        return Change()
    if a is not None and parts:
        return _part_finished(job, a, ev, sender, parts, now, cfg)
    result = tr.finished(job, ev.attempt, ev.body, now, cfg)
    if result is None:
        return Change()
    new, charges = result
    return Change(jobs=[new], charges=list(charges), ended=new)


def _part_finished(job: Job, a: Attempt, ev: Event, sender: str, parts: set[str], now: float, cfg: Config) -> Change:
    """A gang's part ended. A part that completed waits for the others: the attempt completes
    when the last one has; so does a part of a gang being preempted or cancelled (each part keeps its
    grace: the job is requeued, or its GPUs freed, only once none runs, and billed to that end). Any
    other end (a failure, a timeout, a part's own cancel) ends the attempt for the whole job at once,
    and the parts still running are killed (shared fate). Each part's usage is kept on the attempt by
    node (usage["nodes"]), also when it reports after the end."""
    usage, outcome = ev.body.get("usage") or {}, ev.body.get("outcome")
    graced = job.state == states.PREEMPTING or job.cancel_requested
    if graced and outcome != "completed" and isinstance(usage, dict):
        usage = {**usage, "outcome": outcome}       # what this part's end was, for the attempt's close
    kept = tr.part_usage(job, ev.attempt, sender, usage)
    # A part that ends after its attempt (or before the others) writes its usage; the attempt
    # does not end with it (no `ended`).
    if a.end_time or job.current is not a:
        return Change(jobs=[kept] if kept is not None else [])
    seen = (kept or job).attempts[ev.attempt - 1].usage.get("nodes") or {}
    if (outcome == "completed" or graced) and set(seen) != parts:
        # A gang being preempted or cancelled: every part had the signal and keeps its grace (each
        # rank saves its checkpoint), so the attempt holds its nodes until the last part has ended; ending
        # it at the first would requeue the job beside its own parts (the chaos soak's job 191), or
        # place another job on GPUs a part still uses.
        log.info("job %s attempt %d: part on %s %s, %d of %d done", job.display_id, ev.attempt, sender,
                 outcome, len(seen), len(parts))
        return Change(jobs=[kept] if kept is not None else [])
    body = ev.body
    early = [u["outcome"] for u in seen.values() if isinstance(u, dict) and u.get("outcome") not in (None, "completed")]
    if early and outcome == "completed":        # the attempt ends as its first part that did not complete
        body = {**body, "outcome": early[0]}
    result = tr.finished(kept or job, ev.attempt, body, now, cfg)
    if result is None:
        return Change()
    new, charges = result
    for node, u in seen.items():    # the closing part's usage is the attempt's; every part's is by node
        new = tr.part_usage(new, ev.attempt, node, u) or new
    out = Change(jobs=[new], charges=list(charges), ended=new)
    if job.state == states.RUNNING and not job.cancel_requested and ev.body.get("outcome") != "completed":
        # A gang being preempted or cancelled is not stopped: each part had the signal and keeps its grace.
        log.info("job %s attempt %d: part on %s ended (%s); stopping the other parts", job.display_id,
                 ev.attempt, sender, ev.body.get("outcome"))
        out.controls = [(job.id, gang_stop(ev.attempt))]
    return out


def agent_alert(eid: str, ev: Event, now: float) -> Change:
    """An agent's own alert (idle GPUs, …): recorded and delivered like ours."""
    a = budget_alerts.from_event(eid, ev.node, ev.body, now)
    if a is None:
        raise UsageError("alert: expected {kind, scope, level, message, data}")
    return Change(alerts=[a.fields()])


def lost(on_node: list[Job], beats: list[tuple[float | None, float | None, float | None]],
         gangs: Mapping[int, "str | tuple[Job, Sequence[tr.Charge]] | None"], up: Mapping[str, Node],
         down_since: Mapping[str, float], now: float, cfg: Config) -> Change:
    """Attempts lost with their node or their runner: `NF`, charged to the last sign of life, requeued.
    `on_node` the jobs holding a node, `beats` each one's (heartbeat, checkpoint, claimed at), `up`
    the nodes by name, `down_since` when this scheduler first saw each lease gone. A gang's verdict
    is the shell's (`gangs`, events._lost_part: it reads each part's beats and withdraws the dispatch
    entry of a part no runner took): a node name (that part withdrawn), an (NF record, charges)
    pair, or None. A lost gang's other parts are killed by the stop written with (after) its record.

    Fencing: a node's runners kill their jobs by the time its lease expires (worker/runner.py), so
    an attempt is declared lost only `fence_margin` after the lease was first seen gone; until then
    the job may still be running there and must not start elsewhere."""
    out: list[tuple[Job, Any]] = []
    stops: list[tuple[int, str]] = []
    for job, (hb, _, claimed_at) in zip(on_node, beats):
        a = job.current
        if a is None:
            continue
        if job.parts:
            hit = gangs.get(job.id)
            if isinstance(hit, str):       # a part no runner took: withdrawn, uncounted, uncharged
                out.append((tr.withdrawn(job, "timeout", now, cfg.start_timeout, hit), ()))
                stops.append((job.id, gang_stop(a.attempt)))
            elif hit:
                out.append(hit)
                stops.append((job.id, gang_stop(a.attempt)))
            continue
        node = up.get(job.node)
        if node is not None and node.state != "down":
            # A runner that claimed the attempt and went silent is lost too; its agent, alive,
            # kills a runner that stops heart-beating (worker/agent.py) well within this. One
            # that claimed it and never beat is silent from its claim: it starts nothing once
            # the lease it saw with the claim is over (worker/runner.py).
            last = hb or claimed_at
            if last is None or now - last <= cfg.node_lease + cfg.fence_margin:
                continue
        else:
            if now - down_since.get(job.node, now) < cfg.fence_margin:
                continue
            last = node.last_heartbeat if node else now
        new, charges = tr.node_failed(job, last, now, cfg)
        log.warning("job %s lost on node %s (last heartbeat %.0fs ago)", job.display_id, job.node, now - last)
        out.append((new, charges))
    return Change(jobs=[j for j, _ in out], charges=[c for _, cs in out for c in cs], controls=stops)
