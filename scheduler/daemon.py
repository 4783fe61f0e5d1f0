"""The scheduler daemon: the single writer of jobs, allocations and the ledger.

Each `tick(now)` holds the leader lease, then: reads requests from the users' inboxes and events from
the agents, declares attempts on dead nodes lost, runs the pure `plan()` over a snapshot, and applies
the plan in one fenced transaction (which also pushes each admitted attempt onto its node's dispatch
list). Every change is written in the same transaction as the acknowledgement of what caused it, so a kill -9 at any instant either loses
nothing (the request or event is redelivered) or has already written everything.
"""
import gc
import json
import logging
import os
import socket
import time
import uuid

from . import alerts as budget_alerts, auth, crashguard, fairshare, intake, policy, sdnotify, states, transitions as tr
from .config import Config
from .batch import Batch, Tally
from .commit import BIG_COMMIT, Committer, release_memory
from .bookkeeper import Bookkeeper
from . import dispatch as dispatching
from .errors import LabqError, RefusedError, StalePlanError, UsageError
from .model import Job, Snapshot
from .handlers import BUDGET_OPS, Change, Handlers
from .store import dispatchq
from .store.conn import ERRORS as REDIS_ERRORS
from .policy.depend import targets as dependency_targets
from .store.keys import Keys
from .store.reads import Reader
from .store.state import SchedulerStore

log = logging.getLogger("labq.scheduler")


def tune_gc() -> None:
    """A pass over 100,000 pending jobs makes millions of short-lived tuples; at the default
    thresholds the collector walks the whole long-lived job table again and again (it was a third
    of plan()'s time). Job records hold no cycles, so collect rarely and leave loaded state frozen."""
    gc.set_threshold(100_000, 50, 100)
    gc.freeze()


MAX_REQUESTS_PER_TICK = 20_000
# What a failing entry must not swallow: losing the lease or Redis stops the tick, and the entry
# stays unacknowledged for the next leader (it is not the entry's fault).
POISON_PASSES = (StalePlanError, *REDIS_ERRORS)
REASON_CHUNK = 2000        # jobs per transaction when a pass gives many jobs a new reason
SOLO_OPS = frozenset(("drain", "resume", *BUDGET_OPS))


def _sleep_until(deadline: float, stop) -> None:
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


class Scheduler(Committer):
    def __init__(self, r, raw=None, cfg: Config = None, me: str | None = None, clock=time.time, durable=None):
        # `raw` (a bytes connection) was RQ's; dispatch now goes through `r`'s transactions. It stays
        # in the signature so that callers written for the RQ transport keep working.
        self.cfg, self.k, self.clock = cfg, Keys(cfg.prefix), clock
        self.me = me or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store = SchedulerStore(r, self.k, self.me)
        self.down_since: dict[str, float] = {}     # node -> when this scheduler first saw its lease gone
        self.event_streams: set[str] = set()       # the per-node event streams with our consumer group
        self.jobs: dict[int, Job] = {}
        self.seq = self.seq_written = 0      # job ids: the last handed out, the last written to Redis
        self.tally = Tally()                 # pending/active counts per user and account, kept as jobs change
        self.batch: Batch | None = None      # what is staged for the next transaction (group commit)
        self.answered: dict = {}             # rid -> reply, for the requests of the read being handled
        self.inboxes: set[str] = set()
        self.leading = False
        self.lease_s = cfg.lease or max(10.0, 3 * cfg.tick)
        self.renewed = float("-inf")       # monotonic time of the last lease renewal
        self.nodes = ()
        self.last_plan = float("-inf")
        self.freed = False                 # an attempt ended since the last plan (room to refill)
        self.plan_done, self.plan_cost = float("-inf"), 0.0    # monotonic end and length of the last plan
        self.handlers = Handlers(self)
        self.usage: dict[str, tuple[float, float]] = {}   # fair share: account -> (decayed value, as of)
        self.guard = crashguard.CrashGuard.from_config(cfg)
        self.ended: dict[int, str] = {}    # state of ended jobs that pending jobs depend on (never changes)
        self.ended_shown: dict[int, str] = {}   # their display ids, where not the id ("126_7")
        # Budget limits, overrides, periods, alerts and the stop policy. It keeps `self.cfg.budgets`
        # the effective budgets (`budget set` limits, active overrides); the config file's are in it.
        self.books = Bookkeeper(self, cfg)
        self.now = 0.0                     # the time of what is being processed (the injected clock)
        self.file_checkpoints: dict[int, float] = {}   # job -> newest checkpoint file its runner reported
        self.metrics = None                # metrics.Metrics when scheduler.metrics is set
        self.durable = durable             # durability.Durability: checked before leading (labq scheduler)
        self._refused = ""                 # the last durability refusal logged (each is logged once)
        self.archiver = None               # store/archive.Archiver: ended jobs and old ledger entries out of Redis
        self.history = None                # store/archive.History: what the archiver moved, for reads

    # -- the loop --------------------------------------------------------------------------------
    def tick(self, now: float, woke=()) -> bool:
        """One round. Returns whether this scheduler is the leader."""
        try:
            held = self._renew(self.lease_s)
        except StalePlanError as e:
            log.warning("%s; reloading", e)
            held = True
        if not held:
            if self.leading:
                log.warning("lost the leader lease; waiting")
            self.leading = False
            return False
        try:
            self.now = now
            if not self.leading:
                if not self._durable_ok():
                    return False
                self._recover(now)
            self._learn_inboxes(woke)
            self.nodes = self.store.nodes(now)
            self._intake(now, pending=False)
            self._lost_attempts(now)
            self._unclaimed(now)
            self.books.tick(max(now, self.clock()))
            # While requests keep streaming in, answer them first and plan at most once a tick;
            # a lone submit on an idle queue is planned at once.
            # An attempt's end freed room: plan again at once, unless planning would take more than
            # a third of the loop (at most every 2 x the last plan's own time), or a busy node
            # drains at one job per slot per tick.
            refill = self.freed and time.monotonic() - self.plan_done >= 2 * self.plan_cost
            if now - self.last_plan >= self.cfg.tick or refill or not self.store.wakes_waiting():
                # Admission times must not precede the ends just processed in this tick (a GPU is
                # held until then), so the plan reads the clock afresh.
                began = time.monotonic()
                self._schedule(max(now, self.clock()))
                self.last_plan, self.freed = now, False
                self.plan_done = time.monotonic()
                self.plan_cost = self.plan_done - began
            if self.durable is not None:
                self.durable.seen()
        except StalePlanError as e:
            log.warning("%s; reloading state", e)
            self.leading = False
        return self.leading

    def _durable_ok(self) -> bool:
        """Lead only a Redis that keeps what it acknowledged (durability.py); else step aside."""
        if self.durable is None:
            return True
        try:
            self.durable.check()
            return True
        except RefusedError as e:
            if str(e) != self._refused:
                log.error("%s", e)
                self._refused = str(e)
            self.store.release_leader()
            return False

    def run(self, stop=lambda: False) -> None:
        if self.durable is not None:
            self.durable.check()    # refused at start: one line and exit 3, before anything is read
        log.info("scheduler %s starting (tick %.2fs, lease %.0fs)", self.me, self.cfg.tick, self.lease_s)
        tune_gc()
        try:
            self._loop(stop)
        finally:
            # Whatever ends the loop, a lease left behind would stall a restart until it lapsed.
            sdnotify.notify("STOPPING=1")
            try:
                self.store.release_leader()
            except REDIS_ERRORS as e:
                log.warning("could not release the leader lease: %s", e)
            log.info("scheduler %s stopped", self.me)

    def _loop(self, stop) -> None:
        woke: list = []
        ready = False
        while not stop():
            try:
                started = time.monotonic()
                leading = self.tick(self.clock(), woke)
                if self.metrics:
                    self.metrics.after_tick(self, time.monotonic() - started)
                if leading and self.archiver:
                    self.archiver.step(self.clock())
                if not ready:
                    ready = sdnotify.notify("READY=1")
                # From the main loop only: a stuck loop must let the watchdog fire.
                sdnotify.notify(f"WATCHDOG=1\nSTATUS={'leader' if leading else 'standby'}: "
                                f"{len(self.jobs)} active jobs, {len(self.nodes)} nodes")
                if self.leading:
                    woke = self.store.wait_wake(self.cfg.tick)
                else:
                    # A standby must not pop the wake list: a wake-up is the leader's only news of a
                    # new user's inbox, and one taken here would leave that user unanswered.
                    woke = []
                    _sleep_until(time.monotonic() + self.lease_s / 3, stop)
            except REDIS_ERRORS as e:
                log.error("Redis: %s; retrying in 1s", e)
                self.leading = False
                time.sleep(1)

    def _recover(self, now: float) -> None:
        """Rebuild the in-memory view from Redis, then finish what a predecessor left unacknowledged."""
        self.jobs = self.store.active_jobs()
        self.store.rebuild_stat_rows(self.jobs.values())
        self.seq = self.seq_written = self.store.job_seq()
        self.tally = Tally(self.jobs.values())
        self.inboxes = self.store.known_inboxes()
        for s in [self.k.events] + [self.k.inbox(u) for u in self.inboxes]:
            self.store.ensure_group(s)
        self.leading = True
        self.nodes = self.store.nodes(now)
        self.event_streams = set()
        self._node_streams()
        self.books.load(now)
        self.usage = Reader(self.store.r, self.k, self.history).usage()
        if self.guard.on:   # the failures of the last window, as the previous leader counted them
            self.guard.rebuild([*self.jobs.values(), *Reader(self.store.r, self.k, self.history).ended(now - self.guard.window)], now)
        self._intake(now, pending=True)
        log.info("leader: %d active jobs, %d nodes, %d inboxes", len(self.jobs), len(self.nodes), len(self.inboxes))
        gc.freeze()      # what was just loaded lives long: keep the collector off it

    def _learn_inboxes(self, woke) -> None:
        new = {w.split(":", 1)[1] for w in woke if w.startswith("user:")} - self.inboxes
        for user in sorted(new):
            if not user or ":" in user:
                continue
            self.store.ensure_group(self.k.inbox(user))
            self.store.txn(lambda p, u=user: p.sadd(self.k.inboxes, u))
            self.inboxes.add(user)

    def _renew(self, ttl: float) -> bool:
        """Keep the lease. A lease that lapsed and was taken afresh means another scheduler may have
        led meanwhile: what this one holds in memory is then stale, so it must reload (StalePlanError)."""
        got = self.store.acquire_leader(ttl)
        if not got:
            return False
        self.renewed = time.monotonic()
        if got == "taken" and self.leading:
            self.leading = False
            raise StalePlanError("the leader lease lapsed")
        return True

    # -- requests and events: read in batches, each batch one transaction ----------------------
    def _intake(self, now: float, pending: bool) -> None:
        """Read the inboxes and the event stream, handle what was read, commit it as one batch; again
        until both are empty (pending mode too: acknowledged entries leave the pending list)."""
        streams = [self.k.inbox(u) for u in sorted(self.inboxes)]
        done = 0
        while done < MAX_REQUESTS_PER_TICK:
            requests = self.store.read_group(streams, pending)
            events = self.store.read_group(self._node_streams(), pending)
            if not requests and not events:
                break
            self.batch, self.answered = Batch(usage=self.usage), {}
            poisoned = self._poisoned(requests + events) if pending else set()
            try:
                prior = self.store.replies_done([intake.reply_id(f or {}, eid) for _, eid, f in requests])
                who = self._all_senders(requests, now)
                for (stream, eid, fields), old, sender in zip(requests, prior, who):
                    self._isolated(self._request, now, stream, eid, fields or {}, old, sender,
                                   (stream, eid) in poisoned)
                for stream, eid, fields in events:
                    if (stream, eid) in poisoned:
                        self._dead(stream, eid, fields or {}, "this event stopped the scheduler twice; not run again")
                        continue
                    self._isolated(self._event, now, stream, eid, fields or {})
            finally:
                self.flush()
            done += len(requests)

    def _poisoned(self, entries) -> set:
        """Entries redelivered after the leader died on them more than once: never handled again."""
        out = set()
        for stream in {s for s, _, _ in entries}:
            counts = self.store.deliveries(stream, [e for s, e, _ in entries if s == stream])
            out |= {(stream, e) for e, n in counts.items() if n >= intake.MAX_DELIVERIES}
        return out

    def _isolated(self, handle, now, stream, eid, fields, *extra) -> None:
        """Handle one entry; one that raises stages nothing (a handler decides, commit() stages a
        change whole or not at all) and is answered (a request) and dead-lettered on its own, so
        that the rest of its batch still commits, whatever the commit granularity."""
        try:
            handle(now, stream, eid, fields, *extra)
        except POISON_PASSES:
            raise
        except Exception as e:   # noqa: BLE001 - a poison entry must not take its batch down
            log.exception("entry %s of %s failed; answered with an error and acknowledged", eid, stream)
            why = f"internal error: {type(e).__name__}: {str(e)[:300]}"
            if stream == self.k.events or stream.startswith(self.k.events + ":"):
                self._dead(stream, eid, fields, why)
            else:
                self._refuse(stream, eid, intake.reply_id(fields, eid), fields, why, dead=True)

    def _refuse(self, stream: str, eid: str, rid: str, fields: dict, error: str, code: int = 2,
                dead: bool = False, remember: bool = True) -> None:
        """Answer a request with `error` and acknowledge it; `dead` keeps it in the dead letters too;
        `remember` False where the sender is not known yet (the rid must not bind its real owner)."""
        reply = {"ok": False, "code": code, "error": error, "rid": rid}
        self.commit(reply=(rid, reply, remember), ack=(stream, eid),
                    dead=(stream, eid, fields, error) if dead else None)
        if dead:
            log.warning("request %s on %s dead-lettered: %s", eid, stream, error)

    def _dead(self, stream: str, eid: str, fields: dict, reason: str) -> None:
        """Move an event no handler could take to the dead letters, acknowledged; logged once."""
        log.warning("event %s on %s dead-lettered: %s", eid, stream, reason)
        self.commit(ack=(stream, eid), dead=(stream, eid, fields, reason))

    def _all_senders(self, requests, now: float) -> list:
        """The batch's senders at once; if one entry breaks that, each is identified on its own
        inside its isolation (_request with user None), so a poison credential harms only itself."""
        try:
            return self._senders(requests, now)
        except POISON_PASSES:
            raise
        except Exception:   # noqa: BLE001
            log.exception("identifying a batch of %d requests failed; one by one instead", len(requests))
            return [None] * len(requests)

    def _senders(self, requests, now: float) -> list:
        """Who sent each request: the inbox's name in single-host mode, whom munge vouches for
        otherwise (decoded concurrently, claimed in one round trip); a RefusedError where refused."""
        sec = self.cfg.security
        entries = [(stream.rsplit(":", 1)[1], fields or {}, f"{stream}/{eid}") for stream, eid, fields in requests]

        def claim_many(claims):
            return self.store.claim_credentials(claims, sec["credential_ttl"])
        return auth.identify_many(entries, sec, now, claim_many)

    def _request(self, now: float, stream: str, eid: str, fields: dict, prior=None, user=None,
                 poisoned=False) -> None:
        """Identify → answer a retry → validate (intake.py) → handle, for this one entry; whatever a
        handler raises becomes this entry's error reply (in _isolated)."""
        rid = intake.reply_id(fields, eid)
        if poisoned:
            return self._refuse(stream, eid, rid, fields, "this request stopped the scheduler twice; not run again",
                                dead=True, remember=False)
        if user is None:
            user = self._senders([(stream, eid, fields)], now)[0]
        if isinstance(user, RefusedError):
            e = user
            log.warning("inbox %s entry %s: %s", stream, eid, e)
            self.commit(reply=(rid, {"ok": False, "code": e.exit_code, "error": str(e)}, False), ack=(stream, eid))
            return
        if prior is None and rid in self.answered:
            prior = self.answered[rid]
        elif prior is not None:
            prior = json.loads(prior)
        if prior is not None:   # a client retry, or a redelivery after a crash: answer, never redo
            self.commit(reply=(rid, prior), ack=(stream, eid))
            return
        try:
            req = intake.request(fields, eid, self.cfg.max_request_bytes)
        except LabqError as e:
            return self._refuse(stream, eid, rid, fields, str(e), code=e.exit_code)
        late = max(now, self.clock()) - (req.expires or float("inf"))
        if late > 0:   # the client has given up and told its user nothing was done: keep it so
            return self._refuse(stream, eid, rid, fields, f"expired: read {late:.1f}s after the client's "
                                "deadline; not done", code=4)
        solo = req.op in SOLO_OPS     # budget and node changes: later requests must see them applied
        if solo:
            self.flush()
            self.batch = Batch(usage=self.usage)
        try:
            change = self.handlers.handle(user, req.op, req.body, now)
        except LabqError as e:
            change = Change(reply={"ok": False, "code": e.exit_code, "error": str(e)})
        self.commit(jobs=change.jobs, controls=change.controls, nodes=change.nodes, reply=(rid, change.reply),
                    ack=(stream, eid), alerts=change.alerts, books=change.books)
        self.answered[rid] = change.reply
        if self.metrics:
            self.metrics.requests.inc()
        if solo:
            self.flush()
            self.batch = Batch(usage=self.usage)
        if change.nodes:
            self.nodes = self.store.nodes(now)

    # -- events from agents ----------------------------------------------------------------------
    def _node_streams(self) -> list[str]:
        """The events streams to read: the shared one (older agents, tools) and each node's own,
        whose writer (the node's Redis user) proves the node an event comes from."""
        for n in self.nodes:
            s = self.k.node_events(n.name)
            if s not in self.event_streams:
                self.store.ensure_group(s)
                self.event_streams.add(s)
        return [self.k.events, *sorted(self.event_streams)]

    def _event(self, now: float, stream: str, eid: str, f: dict) -> None:
        # The tick's `now` was read before this event arrived; billing caps an attempt's end at
        # `now`, so read the clock again or an end could fall before the runner's own start.
        now = self.now = max(now, self.clock())
        try:
            ev = intake.event(f, self.cfg.max_request_bytes)
        except LabqError as e:
            return self._dead(stream, eid, f, str(e))
        write = (self._agent_alert(now, eid, ev) if ev.kind == "alert"
                 else self._attempt_event(now, stream, eid, ev))
        self.commit(ack=(stream, eid), **write)
        new = (write.get("jobs") or [None])[0]
        if ev.kind == "finished" and new is not None:
            self.freed = True
            log.info("job %s attempt %d %s -> %s", new.display_id, ev.attempt, ev.body.get("outcome"), new.state)

    def _attempt_event(self, now: float, stream: str, eid: str, ev) -> dict:
        """What a started/finished event writes (commit's keyword arguments), decided, not written."""
        job = self.jobs.get(ev.job)
        # Only the node the attempt was placed on speaks for it. On a per-node stream
        # (labq:events:<node>, writable by that node's ACL role alone) the stream names the node.
        sender = stream[len(self.k.events) + 1:] if stream.startswith(self.k.events + ":") else ev.node
        if job is not None and (job.node is None or sender != job.node):
            log.warning("event %s about job %s from node %r dropped: the attempt runs on %r",
                        eid, job.display_id, sender, job.node)
            job = None
        result = None
        if job is not None and ev.kind == "started":
            new = tr.started(job, ev.attempt, ev.body)
            result = (new, ()) if new else None
        elif job is not None and ev.kind == "finished":
            result = tr.finished(job, ev.attempt, ev.body, now, self.cfg)
        if result is None:
            return {}
        new, charges = result
        jobs, alerts = self._crash_guard(new, now) if ev.kind == "finished" else ([new], ())
        return {"jobs": jobs, "charges": charges, "alerts": alerts}

    def _crash_guard(self, new: Job, now: float):
        """(jobs to write, alerts) for an attempt's end: when the user's failures trip the guard,
        every pending job of theirs (this one too, if it was requeued) is held, in the same
        transaction as the event, with a crash_cascade alert."""
        a = new.attempts[-1]
        count = self.guard.record(new.user, a.outcome, a.end_time or now)
        if not count:
            return [new], ()
        pool = [j for j in self.jobs.values() if j.id != new.id] + [new]
        held = crashguard.hold(pool, new.user, self.guard.detail(count))
        log.warning("crash guard: user %s had %d failed attempts within %.0fs; %d pending job(s) held",
                    new.user, count, self.guard.window, len(held))
        jobs = held if any(h.id == new.id for h in held) else [new, *held]
        return jobs, (crashguard.alert(new.user, count, self.guard.window, [h.id for h in held], now),)

    def _agent_alert(self, now: float, eid: str, ev) -> dict:
        """An agent's own alert (idle GPUs, …): recorded and delivered like ours."""
        a = budget_alerts.from_event(eid, ev.node, ev.body, now)
        if a is None:
            raise UsageError("alert: expected {kind, scope, level, message, data}")
        return {"alerts": [a.fields()]}

    def _lost_attempts(self, now: float) -> None:
        """Attempts whose node lease expired, or whose runner stopped heart-beating: `NF`, requeued.

        Fencing: a node's runners kill their jobs by the time its lease expires (worker/runner.py),
        so an attempt is declared lost only `fence_margin` after this scheduler first saw the
        lease gone; until then the job may still be running there and must not start elsewhere."""
        up = {n.name: n for n in self.nodes}
        for n in self.nodes:
            if n.state == "down":
                self.down_since.setdefault(n.name, now)
            else:
                self.down_since.pop(n.name, None)
        on_node = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        beats = self.store.attempt_heartbeats([(j.id, j.current.attempt) for j in on_node])
        # The runner's view of $LABQ_CHECKPOINT_DIR, for the victim choice (snapshot()).
        self.file_checkpoints = {j.id: ck for j, (_, ck) in zip(on_node, beats) if ck}
        lost = []
        for job, (hb, _) in zip(on_node, beats):
            node = up.get(job.node)
            if node is not None and node.state != "down":
                # A runner that claimed the attempt and went silent is lost too; its agent, alive,
                # kills a runner that stops heart-beating (worker/agent.py) well within this.
                if hb is None or now - hb <= self.cfg.node_lease + self.cfg.fence_margin:
                    continue
                last = hb
            else:
                if now - self.down_since.get(job.node, now) < self.cfg.fence_margin:
                    continue
                last = node.last_heartbeat if node else now
            new, charges = tr.node_failed(job, last, now, self.cfg)
            log.warning("job %s lost on node %s (last heartbeat %.0fs ago)", job.display_id, job.node, now - last)
            lost.append((new, charges))
        if lost:
            self.commit(jobs=[j for j, _ in lost], charges=[c for _, cs in lost for c in cs])

    def _unclaimed(self, now: float) -> None:
        """Take back attempts no runner claimed: cancelled ones at once, others after
        scheduler.start_timeout (a runner that never came, a dispatch entry lost with Redis)."""
        waiting = [j for j in self.jobs.values()
                   if j.state in states.ON_NODE and j.current and not j.current.start_time]
        if not waiting:
            return
        claims = dispatchq.claims(self.store.r, self.k, [(j.id, j.current.attempt) for j in waiting])
        managed = dispatchq.with_runners(self.store.r, self.k, [j.node for j in waiting])
        for u in dispatching.unclaimed(waiting, claims, now, self.cfg.start_timeout, managed):
            if not dispatchq.withdraw(self.store.r, self.k, u.job.id, u.job.current.attempt):
                continue      # a runner claimed it meanwhile: it runs, and its events will tell
            log.warning("job %s attempt %d on node %s withdrawn (%s): no runner took it", u.job.display_id,
                        u.job.current.attempt, u.job.node, "cancelled" if u.why == "cancel" else "start timeout")
            self.commit(jobs=[tr.withdrawn(u.job, u.why, now, self.cfg.start_timeout)])

    # -- planning ------------------------------------------------------------------------------
    def snapshot(self, now: float) -> Snapshot:
        running = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(self.usage, running, now, self.cfg.priority["fairshare_half_life"])
        jobs = self.jobs
        if self.file_checkpoints:
            # A checkpoint file counts like `labq checkpoint`: work lost is measured from the latest.
            jobs = dict(jobs)
            for jid, at in self.file_checkpoints.items():
                j = jobs.get(jid)
                if j is not None and j.current and at > (j.current.last_checkpoint or 0):
                    jobs[jid] = tr.checkpointed(j, at) or j
        return Snapshot(now=now, nodes=self.nodes, jobs=tuple(jobs.values()), usage=tuple(sorted(usage.items())),
                        spent=tuple(sorted(self.books.spent_now(now).items())), ended=self.ended_states(),
                        shown=tuple(sorted(self.ended_shown.items())))

    def ended_states(self, extra: Job | None = None) -> tuple:
        """(id, state) of each ended job a pending job (and `extra`, a --test-only probe) depends on.
        An ended job never changes, so each is read from Redis once and kept while some pending job
        still depends on it."""
        want = dependency_targets([j for j in self.jobs.values() if j.deps and j.state == states.PENDING]
                                  + ([extra] if extra else []))
        want -= self.jobs.keys()
        missing = sorted(want - self.ended.keys())
        if missing:
            found = Reader(self.store.r, self.k, self.history).jobs(missing)
            states_ = {j.id: j.state for j in found}
            self.ended.update((i, states_.get(i, "")) for i in missing)
            self.ended_shown.update((j.id, j.display_id) for j in found if j.array_id is not None)
        self.ended = {i: self.ended[i] for i in want}
        self.ended_shown = {i: s for i, s in self.ended_shown.items() if i in want}
        return tuple(sorted(self.ended.items()))

    def _schedule(self, now: float) -> None:
        started = time.monotonic()
        p = policy.plan(self.snapshot(now), self.cfg)
        if self.metrics:
            self.metrics.plan_seconds.observe(time.monotonic() - started)
        changed, dispatch = [], []
        for place in p.places:
            j = tr.admit(self.jobs[place.job_id], place, now)
            changed.append(j)
            dispatch.append(j)
        for e in p.expires:
            changed.append(tr.end_pending(self.jobs[e.job_id], e.state, e.detail, now))
        controls = []
        for pr in p.preempts:
            changed.append(tr.preempting(self.jobs[pr.job_id], pr.for_job, pr.detail, now))
            controls.append((pr.job_id, f"preempt:{pr.grace}"))
            log.info("job %s preempted: %s", self.jobs[pr.job_id].display_id, pr.detail)
        pended = []
        for pd in p.pending:
            j = self.jobs[pd.job_id]
            if (j.reason, j.detail, j.earmark, j.earmark_gpus) != (pd.reason, pd.detail, pd.earmark, pd.earmark_gpus):
                pended.append(tr.pend(j, pd.reason, pd.detail, pd.earmark, pd.earmark_gpus))
        if changed or len(pended) <= REASON_CHUNK:
            self.commit(jobs=changed + (pended if len(pended) <= REASON_CHUNK else []), dispatch=dispatch,
                        controls=controls)
        if len(pended) > REASON_CHUNK:
            # New reasons alone need no atomicity with anything: written in fenced chunks, so that the
            # first pass over a 100,000-task array never builds one 100 MB transaction.
            for i in range(0, len(pended), REASON_CHUNK):
                self.commit(jobs=pended[i:i + REASON_CHUNK])
            if len(pended) >= BIG_COMMIT:
                release_memory()
        for j in dispatch:
            log.info("job %s -> %s gpus=%s", j.display_id, j.node, ",".join(j.gpu_uuids) or "-")
