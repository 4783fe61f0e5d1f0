"""What the agents tell the scheduler: started/finished events and alerts from the nodes' streams,
attempts lost with their node or their runner, attempts no runner claimed, nodes whose runners
proved alive. The scheduler (daemon/loop.py) holds a NodeEvents over its state and store; each of
its steps reads through the store (taking back, where it decides so, a dispatch entry no runner
claimed: store/nodeside.withdraw, a claim the runners race for), asks a pure decider (attempt.py,
dispatch.py) for a Change over the state and what it read, and commits that Change through the
`commit` it was given, with the event's ack. It decides nothing itself and changes the state only
through what it commits (state.apply)."""
import logging
from collections.abc import Sequence
from typing import Any

from ..errors import LabqError
from ..jobs.model import Job, Node
from ..store.state import SchedulerStore
from . import attempt, decode, dispatch as dispatching, transitions as tr
from .change import Change
from .journal import end_level
from .shell import Commit
from .state import SchedulerState

log = logging.getLogger("labq.scheduler")


class NodeEvents:
    """The nodes' side of a tick: read (the store), decided (attempt.py, dispatch.py), committed (`commit`)."""

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
        """Decoded, decided (attempt.of_event: its alert, or what it does to its attempt with the crash
        guard's verdict), committed with its ack. `now` is the tick's only clock. An end the node reports
        after it (the event came in during the tick) is billed up to `now` (transitions.finished), and
        this tick's plan may give the freed room to another job from `now` on: the allocation is billed
        to one job at a time."""
        try:
            ev = decode.event(f, self.state.cfg.max_request_bytes)
        except LabqError as e:
            return self.dead(stream, eid, f, str(e))
        # Only the node the attempt was placed on speaks for it. On a per-node stream
        # (labq:events:<node>, writable by that node's ACL role alone) the stream names the node.
        sender = stream[len(self.k.events) + 1:] if stream.startswith(self.k.events + ":") else ev.node
        st = self.state
        change = attempt.of_event(st.jobs, st.guard, eid, ev, sender, now, st.cfg)
        self.commit(change, ack=(stream, eid))       # the state learns its end (state.apply)
        ended = change.ended
        if ended is not None:
            # The attempt's outcome, not this event's: a gang's closing part may report `cancelled`
            # after its peer's failure, which is what ended the attempt.
            closed = ended.attempts[ev.attempt - 1] if 0 < ev.attempt <= len(ended.attempts) else None
            outcome = str(closed.outcome if closed is not None else ev.body.get("outcome"))
            log.log(end_level(outcome), "job %s attempt %d %s -> %s", ended.display_id, ev.attempt, outcome,
                    ended.state)

    def lost_attempts(self, now: float) -> None:
        """Attempts whose node lease expired, or whose runner stopped heart-beating: read here (health
        marks, leases, heartbeats, a gang's parts; a part no runner took withdrawn), decided by
        dispatch.healthy_again, attempt.part_verdict and attempt.lost (pure), committed."""
        st = self.state
        sick = [n.name for n in st.nodes if n.state == "unhealthy"]
        if sick:
            well = dispatching.healthy_again(sick, *self.store.nodeside.health_signs(sick), now)
            for n in well:
                log.warning("node %s: a runner proved alive; healthy again", n)
            if well:
                self.commit(Change(health=[(n, None) for n in well]))
        st.see_down(now)
        up = {n.name: n for n in st.nodes}
        on_node = st.on_node()
        beats = self.store.attempt_heartbeats([(j.id, j.attempts[-1].attempt) for j in on_node])
        # The runner's view of $LABQ_CHECKPOINT_DIR, for the victim choice (snapshot()).
        st.file_checkpoints = {j.id: ck for j, (_, ck, _) in zip(on_node, beats) if ck}
        if now - st.sighted <= st.cfg.node_lease + st.cfg.fence_margin:
            # Redis came back lately: no runner could beat or post a result while it was away (it
            # kept its result, worker/results.py). Each gets what a heartbeat gives before it is lost.
            on_node = []
        gangs = {j.id: self._part(j, up, now) for j in on_node if j.parts}
        health: list[tuple[str, str | None]] = []
        alerts: list[dict[str, Any]] = []
        for job in on_node:
            hit = gangs.get(job.id)
            if isinstance(hit, str):
                att, limit = job.attempts[-1].attempt, st.cfg.start_timeout
                log.warning("job %s attempt %d: no runner on node %s took its part within %.0fs; withdrawn",
                            job.display_id, att, hit, limit)
                marks, said = dispatching.unhealthy(st.nodes, hit, now, f"no runner took part of job "
                                                    f"{job.display_id} attempt {att} within {limit:.0f}s",
                                                    {n for n, _ in health})
                health, alerts = health + marks, alerts + said
        change = attempt.lost(on_node, beats, gangs, up, st.down_since, now, st.cfg)
        change.alerts += alerts       # in the transaction that takes the parts back
        change.health += health
        if change.jobs or change.alerts or change.health:
            self.commit(change)

    def _part(self, job: Job, up: dict[str, Node], now: float) -> str | tuple[Job, Sequence[tr.Charge]] | None:
        """A gang's verdict (attempt.part_verdict) on its parts' heartbeats, read here; a part it would
        take back is withdrawn here first (its node's name is the verdict), or, claimed by a runner
        meanwhile, left to start."""
        a, st = job.attempts[-1], self.state
        beats = self.store.attempt_heartbeats([(job.id, f"{a.attempt}.{r}" if r else a.attempt)
                                               for r in range(len(job.parts))])
        tried: set[int] = set()
        while isinstance(v := attempt.part_verdict(job, beats, up, st.down_since, now, st.cfg, tried),
                         attempt.Withdraw):
            if self.store.nodeside.withdraw(job.id, v.key):
                return v.node
            tried.add(v.rank)
        return v

    def unclaimed(self, now: float) -> None:
        """Take back attempts no runner claimed: cancelled ones at once, others after
        scheduler.start_timeout (a runner that never came, a dispatch entry lost with Redis). Read
        (claims, runners), decided (dispatch.unclaimed), withdrawn here, decided (dispatch.withdrawn)."""
        st = self.state
        waiting = [j for j in st.on_node() if j.current and not j.current.start_time]
        if not waiting:
            return
        claims = self.store.nodeside.claims([(j.id, j.attempts[-1].attempt) for j in waiting])
        managed = self.store.nodeside.with_runners([j.node for j in waiting])
        for u in dispatching.unclaimed(waiting, claims, now, st.cfg.start_timeout, managed):
            n = u.job.attempts[-1].attempt
            if not self.store.nodeside.withdraw(u.job.id, n):
                continue      # a runner claimed it meanwhile: it runs, and its events will tell
            log.warning("job %s attempt %d on node %s withdrawn (%s): no runner took it", u.job.display_id,
                        n, u.job.node, "cancelled" if u.why == "cancel" else "start timeout")
            # Each withdrawn attempt is committed at once: its dispatch entry is gone already.
            self.commit(dispatching.withdrawn(u, now, st.nodes, st.cfg))

    def dead(self, stream: str, eid: str, fields: Any, reason: str) -> None:
        """Move an event no handler could take to the dead letters, acknowledged; logged once."""
        log.warning("event %s on %s dead-lettered: %s", eid, stream, reason)
        self.commit(Change(), ack=(stream, eid), dead=(stream, eid, fields, reason))
