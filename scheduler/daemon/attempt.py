"""What a node's event about an attempt changes — pure: (the job table, the event, the node that
sent it, now) -> Change. `started` stamps the attempt; `finished` ends it with its charges; a
gang's attempt ends when its last part has ended, and a part that failed stops the others at once
(shared fate); an agent's own alert is recorded. `lost`: which
attempts their node or their runner lost. The daemon (events.py) reads the streams, heartbeats
and leases, names the sender, runs the crash guard on what ended and commits."""
import logging
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from ..jobs import states
from ..jobs.model import Attempt, Job, Node
from ..money import alerts as budget_alerts
from ..settings.config import Config
from . import crashguard, transitions as tr
from .change import Change
from .crashguard import CrashGuard
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
    """A gang's part ended. The attempt ends, its GPUs are freed and the job requeued or closed only
    when its last part has ended (each part's usage kept by node, usage["nodes"]), and it is billed to
    that end: a part that completed waits for the others; so does a part of a gang being preempted or
    cancelled (each keeps its grace). A part that failed (an error, a timeout, node_failure) stops the
    others at once (shared fate), but they hold their GPUs until they have ended too: ending the
    attempt at the failure placed another job on GPUs a part still used (the chaos soak's job 567)
    and left the part's last seconds unbilled (job 561). The attempt ends as its first part that did
    not complete."""
    usage, outcome = ev.body.get("usage") or {}, ev.body.get("outcome")
    graced = job.state == states.PREEMPTING or job.cancel_requested
    if outcome != "completed" and isinstance(usage, dict):
        usage = {**usage, **ended_as(ev.body, outcome)}       # for the attempt's close
    kept = tr.part_usage(job, ev.attempt, sender, usage)
    if kept is not None:        # a part that never started its process holds no end (ev.body["ran"], worker)
        kept = _with_end(kept, ev.attempt, sender, ev.body.get("end_time") if ev.body.get("ran", True) else None)
    # A part that ends after its attempt writes its usage; the attempt does not end with it (no `ended`).
    if a.end_time or job.current is not a:
        return Change(jobs=[kept] if kept is not None else [])
    seen = (kept or job).attempts[ev.attempt - 1].usage.get("nodes") or {}
    if set(seen) != parts:
        log.info("job %s attempt %d: part on %s %s, %d of %d done", job.display_id, ev.attempt, sender,
                 outcome, len(seen), len(parts))
        out = Change(jobs=[kept] if kept is not None else [])
        if kept is not None and outcome != "completed" and not graced and not _failed(job.current):
            log.info("job %s attempt %d: part on %s ended (%s); stopping the other parts", job.display_id,
                     ev.attempt, sender, outcome)
            out.controls = [(job.id, gang_stop(ev.attempt))]
        return out
    return _close_gang(kept or job, ev.attempt, ev.body, seen, now, cfg)


def ended_as(body: Mapping[str, Any], outcome: Any) -> dict[str, Any]:
    """What a part's end that was not a completion keeps for its attempt's close."""
    return {"outcome": outcome, "exit_code": body.get("exit_code"), "end_time": body.get("end_time"),
            "message": body.get("message", "")}


def _failed(a: Attempt | None) -> list[dict[str, Any]]:
    """The parts of attempt `a` that ended without completing, in the order they reported."""
    nodes = (a.usage.get("nodes") or {}) if a is not None else {}
    return [u for u in nodes.values() if isinstance(u, dict) and u.get("outcome") not in (None, "completed")]


def _with_end(job: Job, attempt: int, node: str, end: Any) -> Job:
    """Each part's end (None: it never started its process), usage["ends"] until the attempt closes."""
    a = job.attempts[attempt - 1]
    ends = {**(a.usage.get("ends") or {}), node: float(end) if isinstance(end, (int, float)) else None}
    new = replace(a, usage={**a.usage, "ends": ends})
    return replace(job, attempts=job.attempts[:attempt - 1] + (new,) + job.attempts[attempt:])


def _close_gang(job: Job, attempt: int, body: Mapping[str, Any], seen: Mapping[str, Any], now: float,
                cfg: Config) -> Change:
    """The last part has ended: the attempt ends as its first part that did not complete (its exit
    status and message), at the latest end of a part that ran: a part that never started (cancelled
    or fenced before its start) bills nothing past its peers (the soak's jobs 202, 208, 525)."""
    out_body = dict(body)
    a = job.attempts[attempt - 1]
    early = _failed(a)
    if early:
        first = early[0]
        out_body.update(outcome=first["outcome"], exit_code=first.get("exit_code"),
                        message=first.get("message") or body.get("message", ""))
    ran = [e for e in (a.usage.get("ends") or {}).values() if e is not None]
    if ran:
        out_body["end_time"] = max(ran)
    result = tr.finished(job, attempt, out_body, now, cfg)
    if result is None:
        return Change()
    new, charges = result
    for node, u in seen.items():    # the closing part's usage is the attempt's; every part's is by node
        new = tr.part_usage(new, attempt, node, u) or new
    return Change(jobs=[new], charges=list(charges), ended=new)


def part_lost(job: Job, node: str, last: float, now: float, cfg: Config, why: str = "",
              unstarted: bool = False) -> "tuple[Job, Sequence[tr.Charge]]":
    """A gang's part lost with its node or its runner (part_verdict), its last sign of life at
    `last`: recorded as a part that ended `node_failure` there. The other parts are stopped by the
    caller; the attempt ends (NF, requeued) when they have ended too, or at once when none is left."""
    a = job.current
    assert a is not None, "part_lost: the job has no attempt"
    end = max(a.dispatch_time or now, min(last or now, now))
    body = {"outcome": "node_failure", "end_time": end, "message": why or f"part on {node} lost (node lease expired)"}
    kept = tr.part_usage(job, a.attempt, node, ended_as(body, "node_failure")) or job
    kept = _with_end(kept, a.attempt, node, None if unstarted else end)
    seen = kept.attempts[a.attempt - 1].usage.get("nodes") or {}
    if set(seen) != {n for n, _ in a.parts}:
        return kept, ()
    change = _close_gang(kept, a.attempt, body, seen, now, cfg)
    if change.ended is None:
        return kept, ()
    return change.ended, change.charges


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
    is the shell's (`gangs`, part_verdict, after the shell withdrew the dispatch
    entry of a part no runner took): a node name (that part withdrawn), a (record, charges) pair
    (part_lost: a part recorded lost, the attempt closed NF once no part runs), or None. A lost gang's other parts are killed by the stop written with (after) its record.

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
            if isinstance(hit, str) and a.start_time:
                # A part no runner took while another runs: that one holds its GPUs till it has
                # ended, and is billed; the attempt ends as a node failure then.
                out.append(part_lost(job, hit, a.dispatch_time or now, now, cfg,
                                     f"no runner on node {hit} took its part within {cfg.start_timeout:.0f}s",
                                     unstarted=True))
                stops.append((job.id, gang_stop(a.attempt)))
            elif isinstance(hit, str):       # no part started: withdrawn whole, uncounted, uncharged
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


def of_event(jobs: Mapping[int, Job], guard: CrashGuard, eid: str, ev: Event, sender: str, now: float,
             cfg: Config) -> Change:
    """What an agent's event writes: its alert, or what it does to its attempt (`decide`) with the
    crash guard's verdict on an attempt it ends (`guarded`)."""
    if ev.kind == "alert":
        return agent_alert(eid, ev, now)
    return guarded(decide(jobs, eid, ev, sender, now, cfg), jobs, guard, now)


def guarded(change: Change, jobs: Mapping[int, Job], guard: CrashGuard, now: float) -> Change:
    """An attempt's end as the crash guard would count it (the state records it with the change:
    state.apply): when the user's failures trip it, every pending job of theirs (this one too, if it
    was requeued) is held, in the same change, with a crash_cascade alert."""
    new = change.ended
    if new is None:
        return change
    a = new.attempts[-1]
    count = guard.count(new.user, a.outcome, a.end_time or now)
    if not count:
        return change
    pool = [j for j in jobs.values() if j.id != new.id] + [new]
    held = crashguard.hold(pool, new.user, guard.detail(count))
    log.warning("crash guard: user %s had %d failed attempts within %.0fs; %d pending job(s) held",
                new.user, count, guard.window, len(held))
    got = held if any(h.id == new.id for h in held) else [new, *held]
    alert = crashguard.alert(new.user, count, guard.window, [h.id for h in held], now)
    return replace(change, jobs=got, alerts=[*change.alerts, alert],
                   ended=next((j for j in got if j.id == new.id), new))


@dataclass(frozen=True)
class Withdraw:
    """A gang's part no runner claimed, to take back (store: dispatchq.withdraw(job, key)) before its
    verdict is known: won, the part is withdrawn (`part_verdict` returns its node); lost to a runner
    that claimed it meanwhile, `part_verdict` is asked again with `rank` among those `tried`."""
    node: str
    rank: int
    key: int | str         # the attempt's dispatch key: N, or "N.RANK" for a part past the first


PartVerdict = Withdraw | tuple[Job, Sequence[tr.Charge]] | None
Beat = tuple[float | None, float | None, float | None]     # (heartbeat, checkpoint file, claimed at)


def part_verdict(job: Job, beats: Sequence[Beat], up: Mapping[str, Node], down_since: Mapping[str, float],
                 now: float, cfg: Config, tried: Container[int] = ()) -> PartVerdict:
    """A gang's part is lost with its node down past the fence margin, or with its runner silent past
    lease + margin (since its last heartbeat, or since its claim if it never beat: killed before
    `started`): (record, charges) from part_lost; its other parts are killed (gang stop), and the
    attempt ends NF once they have ended too (their GPUs are theirs till then). A part no runner
    claimed whose node is gone or whose start timed out is to be taken back (Withdraw): requeued like
    an attempt no runner claimed, not counted, not charged. `beats`: each part's, by rank."""
    a = job.attempts[-1]
    ended = a.usage.get("nodes") or {}     # parts that reported their end and wait for the others
    for rank, ((name, _), (beat, _, claimed_at)) in enumerate(zip(job.parts, beats)):
        if name in ended or rank in tried:
            continue        # gone, so it beats no more (not lost); or claimed by a runner meanwhile: starting
        node = up.get(name)
        down = node is None or node.state == "down"
        gone = down and now - down_since.get(name, now) >= cfg.fence_margin
        hb = beat or claimed_at     # a runner starts nothing once the lease it saw with its claim is over
        if hb is None:
            # Never started here: its node died (or its lease has yet to run out), or no runner
            # came while another part started (the attempt as a whole, unstarted, is `unclaimed`'s).
            late = a.start_time and 0 < cfg.start_timeout < now - (a.dispatch_time or now)
            if gone or late:
                return Withdraw(name, rank, f"{a.attempt}.{rank}" if rank else a.attempt)
            continue
        if down:
            if not gone:
                continue
            last = node.last_heartbeat if node else now
        elif now - hb <= cfg.node_lease + cfg.fence_margin:
            continue
        else:
            last = hb
        log.warning("job %s lost its part on node %s (last heartbeat %.0fs ago); stopping the other parts",
                    job.display_id, name, now - last)
        return part_lost(job, name, last, now, cfg)
    return None
