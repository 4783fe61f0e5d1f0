"""What the agents tell the scheduler: started/finished events and alerts from the nodes' streams,
attempts lost with their node or their runner (both decided by attempt.py, pure), attempts no
runner claimed. The scheduler (daemon/loop.py) holds a NodeEvents over its state and store; each
Change goes through the `commit` it was given, with the event's ack."""
import logging
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any

from ..errors import LabqError
from ..jobs.model import Job, Node
from ..money import alerts as budget_alerts
from ..store import dispatchq, nodehealth
from ..store.state import SchedulerStore
from . import attempt, crashguard, decode, dispatch as dispatching, transitions as tr
from .attempt import gang_stop
from .change import Change
from .journal import end_level
from .shell import Commit
from .state import SchedulerState

_ID = attrgetter("id")
log = logging.getLogger("labq.scheduler")


class NodeEvents:
    """The nodes' side of a tick: read (the store), decided (attempt.py), committed (`commit`)."""

    def __init__(self, state: SchedulerState, store: SchedulerStore, commit: Commit) -> None:
        self.state, self.store, self.commit = state, store, commit
        self.k = store.k
        self.streams: set[str] = set()       # the per-node event streams with our consumer group

    def node_streams(self) -> list[str]:
        """The events streams to read: the shared one (older agents, tools) and each node's own,
        whose writer (the node's Redis user) proves the node an event comes from."""
        for n in self.state.nodes:
            s = self.k.node_events(n.name)
            if s not in self.streams:
                self.store.ensure_group(s)
                self.streams.add(s)
        return [self.k.events, *sorted(self.streams)]

    def event(self, now: float, stream: str, eid: str, f: dict[str, Any]) -> None:
        # `now` is the tick's only clock. An end the node reports after it (the event came in during
        # the tick) is billed up to `now` (transitions.finished), and this tick's plan may give
        # the freed room to another job from `now` on: the allocation is billed to one job at a time.
        try:
            ev = decode.event(f, self.state.cfg.max_request_bytes)
        except LabqError as e:
            return self.dead(stream, eid, f, str(e))
        if ev.kind == "alert":
            change = attempt.agent_alert(eid, ev, now)
        else:
            # Only the node the attempt was placed on speaks for it. On a per-node stream
            # (labq:events:<node>, writable by that node's ACL role alone) the stream names the node.
            sender = stream[len(self.k.events) + 1:] if stream.startswith(self.k.events + ":") else ev.node
            change = self._crash_guard(attempt.decide(self.state.jobs, eid, ev, sender, now, self.state.cfg), now)
        self.commit(change, ack=(stream, eid))
        ended = change.ended
        if ended is not None:
            # Learned once it is written: a redelivered event finds the attempt closed (no result).
            self.state.estimator.observe_ended(ended)
            self.state.freed = True
            # The attempt's outcome, not this event's: a gang's closing part may report `cancelled`
            # after its peer's failure, which is what ended the attempt.
            closed = ended.attempts[ev.attempt - 1] if 0 < ev.attempt <= len(ended.attempts) else None
            outcome = str(closed.outcome if closed is not None else ev.body.get("outcome"))
            log.log(end_level(outcome), "job %s attempt %d %s -> %s", ended.display_id, ev.attempt, outcome,
                    ended.state)

    def _crash_guard(self, change: Change, now: float) -> Change:
        """An attempt's end counted by the crash guard: when the user's failures trip it, every
        pending job of theirs (this one too, if it was requeued) is held, in the same transaction
        as the event, with a crash_cascade alert."""
        new = change.ended
        if new is None:
            return change
        a = new.attempts[-1]
        count = self.state.guard.record(new.user, a.outcome, a.end_time or now)
        if not count:
            return change
        pool = [j for j in self.state.jobs.values() if j.id != new.id] + [new]
        held = crashguard.hold(pool, new.user, self.state.guard.detail(count))
        log.warning("crash guard: user %s had %d failed attempts within %.0fs; %d pending job(s) held",
                    new.user, count, self.state.guard.window, len(held))
        jobs = held if any(h.id == new.id for h in held) else [new, *held]
        alert = crashguard.alert(new.user, count, self.state.guard.window, [h.id for h in held], now)
        return replace(change, jobs=jobs, alerts=[*change.alerts, alert],
                       ended=next((j for j in jobs if j.id == new.id), new))

    def lost_attempts(self, now: float) -> None:
        """Attempts whose node lease expired, or whose runner stopped heart-beating: read here (leases,
        heartbeats, a gang's parts), decided by attempt.lost (pure), committed in one change."""
        self._check_health(now)
        up = {n.name: n for n in self.state.nodes}
        for n in self.state.nodes:
            if n.state == "down":
                self.state.down_since.setdefault(n.name, now)
            else:
                self.state.down_since.pop(n.name, None)
        on_node = self._on_node()
        beats = self.store.attempt_heartbeats([(j.id, j.attempts[-1].attempt) for j in on_node])
        # The runner's view of $LABQ_CHECKPOINT_DIR, for the victim choice (snapshot()).
        self.state.file_checkpoints = {j.id: ck for j, (_, ck, _) in zip(on_node, beats) if ck}
        if now - self.state.sighted <= self.state.cfg.node_lease + self.state.cfg.fence_margin:
            # Redis came back lately: no runner could beat or post a result while it was away (it
            # kept its result, worker/results.py). Each gets what a heartbeat gives before it is lost.
            on_node = []
        gangs = {j.id: self._lost_part(j, up, now) for j in on_node if j.parts}
        alerts = []
        for job in on_node:
            hit = gangs.get(job.id)
            if isinstance(hit, str):
                att, limit = job.attempts[-1].attempt, self.state.cfg.start_timeout
                log.warning("job %s attempt %d: no runner on node %s took its part within %.0fs; withdrawn",
                            job.display_id, att, hit, limit)
                alerts += self._unhealthy(hit, now, f"no runner took part of job {job.display_id} attempt "
                                                    f"{att} within {limit:.0f}s")
        change = attempt.lost(on_node, beats, gangs, up, self.state.down_since, now, self.state.cfg)
        change.alerts += alerts       # in the transaction that takes the parts back
        if change.jobs or change.alerts:
            self.commit(change)

    def _on_node(self) -> list[Job]:
        """The jobs holding a node, by id, as the tally keeps them: a walk of the whole table was
        ~1.4 ms of every tick at 10,000 pending (issue 39), for the few that run."""
        return sorted(self.state.tally.on_node.values(), key=_ID)

    def _lost_part(self, job: Job, up: dict[str, Node], now: float) -> str | tuple[Job, Sequence[tr.Charge]] | None:
        """A gang's part is lost with its node down past the fence margin, or with its runner silent
        past lease + margin (since its last heartbeat, or since its claim if it never beat: killed
        before `started`): (record, charges) from attempt.part_lost; its other parts are killed (gang
        stop), and the attempt ends NF once they have ended too (their GPUs are theirs till then). A part no runner claimed is taken back instead (the node's name is
        returned): requeued like an attempt no runner claimed, not counted, not charged."""
        a = job.attempts[-1]
        beats = self.store.attempt_heartbeats([(job.id, f"{a.attempt}.{r}" if r else a.attempt)
                                               for r in range(len(job.parts))])
        ended = a.usage.get("nodes") or {}     # parts that reported their end and wait for the others
        for rank, ((name, _), (beat, _, claimed_at)) in enumerate(zip(job.parts, beats)):
            if name in ended:
                continue        # its runner is gone, so it beats no more: not lost (nor its node's to fence)
            node = up.get(name)
            down = node is None or node.state == "down"
            gone = down and now - self.state.down_since.get(name, now) >= self.state.cfg.fence_margin
            hb = beat or claimed_at     # a runner starts nothing once the lease it saw with its claim is over
            if hb is None:
                # Never started here: its node died (or its lease has yet to run out), or no runner
                # came while another part started (the attempt as a whole, unstarted, is _unclaimed's).
                late = a.start_time and 0 < self.state.cfg.start_timeout < now - (a.dispatch_time or now)
                if (gone or late) and dispatchq.withdraw(self.store.r, self.k, job.id,
                                                         f"{a.attempt}.{rank}" if rank else a.attempt):
                    return name
                continue        # claimed meanwhile: it is starting
            if down:
                if not gone:
                    continue
                last = node.last_heartbeat if node else now
            elif now - hb <= self.state.cfg.node_lease + self.state.cfg.fence_margin:
                continue
            else:
                last = hb
            log.warning("job %s lost its part on node %s (last heartbeat %.0fs ago); stopping the other parts",
                        job.display_id, name, now - last)
            return attempt.part_lost(job, name, last, now, self.state.cfg)
        return None

    def unclaimed(self, now: float) -> None:
        """Take back attempts no runner claimed: cancelled ones at once, others after
        scheduler.start_timeout (a runner that never came, a dispatch entry lost with Redis)."""
        waiting = [j for j in self._on_node() if j.current and not j.current.start_time]
        if not waiting:
            return
        claims = dispatchq.claims(self.store.r, self.k, [(j.id, j.attempts[-1].attempt) for j in waiting])
        managed = dispatchq.with_runners(self.store.r, self.k, [j.node for j in waiting])
        for u in dispatching.unclaimed(waiting, claims, now, self.state.cfg.start_timeout, managed):
            n = u.job.attempts[-1].attempt
            if not dispatchq.withdraw(self.store.r, self.k, u.job.id, n):
                continue      # a runner claimed it meanwhile: it runs, and its events will tell
            log.warning("job %s attempt %d on node %s withdrawn (%s): no runner took it", u.job.display_id,
                        n, u.job.node, "cancelled" if u.why == "cancel" else "start timeout")
            alerts = [] if u.why != "timeout" else self._unhealthy(
                u.job.node, now, f"no runner took job {u.job.display_id} attempt {n} "
                                 f"within {self.state.cfg.start_timeout:.0f}s")
            # A gang's other parts may have claimed theirs: they are stopped before they start. Each
            # withdrawn attempt is committed at once: its dispatch entry is gone already.
            stop = [(u.job.id, gang_stop(n))] if u.job.parts else []
            self.commit(Change(jobs=[tr.withdrawn(u.job, u.why, now, self.state.cfg.start_timeout)], controls=stop,
                               alerts=alerts))

    def dead(self, stream: str, eid: str, fields: Any, reason: str) -> None:
        """Move an event no handler could take to the dead letters, acknowledged; logged once."""
        log.warning("event %s on %s dead-lettered: %s", eid, stream, reason)
        self.commit(Change(), ack=(stream, eid), dead=(stream, eid, fields, reason))

    def _unhealthy(self, node: str, now: float, reason: str) -> list[dict[str, Any]]:
        """Its runners took no work within start_timeout: no more work there (this tick's plan
        included) until one of them proves alive (_check_health); the alert that says so (none
        where the node was marked already), for the change that takes the work back."""
        if not node or not nodehealth.mark(self.store.r, self.k, node, reason, now):
            return []
        log.error("node %s is unhealthy: %s; nothing is dispatched there until a runner proves alive", node, reason)
        self.state.nodes = tuple(replace(n, state="unhealthy", reason=reason) if n.name == node and n.state == "up"
                                 else n for n in self.state.nodes)
        a = budget_alerts.Alert(f"node:{node}|unhealthy|{now}", "node_unhealthy", f"node:{node}", "error",
                                f"node {node} is unhealthy: {reason}; it gets no work until a runner proves alive",
                                now, {"node": node, "reason": reason})
        return [a.fields()]

    def _check_health(self, now: float) -> None:
        """An unhealthy node is healthy again once a runner of it wrote its state after the mark."""
        sick = [n.name for n in self.state.nodes if n.state == "unhealthy"]
        if not sick:
            return
        marked = nodehealth.since(self.store.r, self.k, sick)
        beats = nodehealth.runner_beats(self.store.r, self.k, sick)
        well = {n for n in sick if beats.get(n, 0.0) > marked.get(n, now)}
        for n in sorted(well):
            nodehealth.clear(self.store.r, self.k, n)
            log.warning("node %s: a runner proved alive; healthy again", n)
        if well:
            self.state.nodes = tuple(replace(n, state="up", reason="") if n.name in well else n
                                     for n in self.state.nodes)
            self.state.news = True
