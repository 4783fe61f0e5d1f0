"""The scheduler daemon: the single writer of jobs, allocations and the ledger.

Each `tick(now)` holds the leader lease, then: reads requests from the users' inboxes and events from
the agents, declares attempts on dead nodes lost, runs the pure `plan()` over a snapshot, and applies
the plan in one fenced transaction (which also enqueues the RQ jobs). Every change is written in the
same transaction as the acknowledgement of what caused it, so a kill -9 at any instant either loses
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
from .bookkeeper import Bookkeeper
from .dispatch import Dispatcher
from .errors import LabqError, RefusedError, StalePlanError, UsageError
from .model import Job, Snapshot
from .handlers import Change, Handlers
from .store import writes
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
MAX_REQUESTS_PER_TICK = 5000
# What a failing entry must not swallow: losing the lease or Redis stops the tick, and the entry
# stays unacknowledged for the next leader (it is not the entry's fault).
POISON_PASSES = (StalePlanError, *REDIS_ERRORS)


class Scheduler:
    def __init__(self, r, rq_conn, cfg: Config, me: str | None = None, clock=time.time, durable=None):
        self.cfg, self.k, self.clock = cfg, Keys(cfg.prefix), clock
        self.me = me or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store = SchedulerStore(r, self.k, self.me)
        self.dispatch = Dispatcher(rq_conn, cfg.kill_wait)
        self.jobs: dict[int, Job] = {}
        self.inboxes: set[str] = set()
        self.leading = False
        self.lease_s = max(10.0, 3 * cfg.tick)
        self.renewed = float("-inf")       # monotonic time of the last lease renewal
        self.nodes = ()
        self.last_plan = float("-inf")
        self.handlers = Handlers(self)
        self.usage: dict[str, tuple[float, float]] = {}   # fair share: account -> (decayed value, as of)
        self.guard = crashguard.CrashGuard.from_config(cfg)
        self.ended: dict[int, str] = {}    # state of ended jobs that pending jobs depend on (never changes)
        # Budget limits, overrides, periods, alerts and the stop policy. It keeps `self.cfg.budgets`
        # the effective budgets (`budget set` limits, active overrides); the config file's are in it.
        self.books = Bookkeeper(self, cfg)
        self.now = 0.0                     # the time of what is being processed (the injected clock)
        self.durable = durable             # durability.Durability: checked before leading (labq scheduler)
        self.metrics = None                # metrics.Metrics when scheduler.metrics is set

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
            self._requests(now, pending=False)
            self._events(now, pending=False)
            self._lost_attempts(now)
            self.books.tick(max(now, self.clock()))
            # While requests keep streaming in, answer them first and plan at most once a tick;
            # a lone submit on an idle queue is planned at once.
            if now - self.last_plan >= self.cfg.tick or not self.store.wakes_waiting():
                # Admission times must not precede the ends just processed in this tick (a GPU is
                # held until then), so the plan reads the clock afresh.
                self._schedule(max(now, self.clock()))
                self.last_plan = now
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
            if str(e) != getattr(self, "_refused", None):
                log.error("%s", e)
                self._refused = str(e)
            self.store.release_leader()
            return False

    def run(self, stop=lambda: False) -> None:
        if self.durable is not None:
            self.durable.check()    # refused at start: one line and exit 3, before anything is read
        log.info("scheduler %s starting (tick %.2fs, lease %.0fs)", self.me, self.cfg.tick, self.lease_s)
        tune_gc()
        woke: list = []
        ready = False
        while not stop():
            try:
                started = time.monotonic()
                leading = self.tick(self.clock(), woke)
                if self.metrics:
                    self.metrics.after_tick(self, time.monotonic() - started)
                if not ready:
                    ready = sdnotify.notify("READY=1")
                # From the main loop only: a stuck loop must let the watchdog fire.
                sdnotify.notify(f"WATCHDOG=1\nSTATUS={'leader' if leading else 'standby'}: "
                                f"{len(self.jobs)} active jobs, {len(self.nodes)} nodes")
                woke = self.store.wait_wake(self.cfg.tick if self.leading else self.lease_s / 3)
            except REDIS_ERRORS as e:
                log.error("Redis: %s; retrying in 1s", e)
                self.leading = False
                time.sleep(1)
        sdnotify.notify("STOPPING=1")
        self.store.release_leader()
        log.info("scheduler %s stopped", self.me)

    def _recover(self, now: float) -> None:
        """Rebuild the in-memory view from Redis, then finish what a predecessor left unacknowledged."""
        self.jobs = self.store.active_jobs()
        self.inboxes = self.store.known_inboxes()
        for s in [self.k.events] + [self.k.inbox(u) for u in self.inboxes]:
            self.store.ensure_group(s)
        self.leading = True
        self.nodes = self.store.nodes(now)
        self.books.load(now)
        self.usage = Reader(self.store.r, self.k).usage()
        if self.guard.on:   # the failures of the last window, as the previous leader counted them
            self.guard.rebuild([*self.jobs.values(), *Reader(self.store.r, self.k).ended(now - self.guard.window)], now)
        self._requests(now, pending=True)
        self._events(now, pending=True)
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

    # -- writing -------------------------------------------------------------------------------
    def commit(self, jobs=(), charges=(), controls=(), dispatch=(), reply=None, ack=None, nodes=(), alerts=(),
               books=None, dead=None) -> None:
        """Write one change atomically, then (and only then) update the in-memory view."""
        now = max(self.now, self.clock())
        charges = [c for c in charges if not self.store.charged(c.key)]
        usage = self._usage_after(jobs, now)

        def build(p):
            writes.put_jobs(p, self.k, jobs, fresh={j.id for j in jobs if j.id not in self.jobs})
            for acct in [a for a in usage if usage[a] != self.usage.get(a)]:
                writes.put_usage(p, self.k, acct, *usage[acct])
            for c in charges:
                writes.put_charge(p, self.k, c, now, self.books.period(c.budget, now))
            for key in {c.key for c in charges}:
                writes.mark_charged(p, self.k, key)
            for jid, value in controls:
                p.set(self.k.control(jid), value, ex=7 * 86400)
            for a in alerts:
                p.xadd(self.k.alerts, a, maxlen=100_000, approximate=True)
            if books:
                writes.put_books(p, self.k, books, now)
            for j in dispatch:
                self.dispatch.enqueue(p, j)
            for name, admin in nodes:
                if admin:
                    p.set(self.k.node_admin(name), admin)
                else:
                    p.delete(self.k.node_admin(name))
            if reply is not None:
                writes.put_reply(p, self.k, *reply)
            if ack is not None:
                self.store.ack(p, *ack)
            if dead is not None:
                writes.put_dead(p, self.k, *dead, now)

        # A big change (a 100,000-task array) takes seconds to build and send; the lease must
        # outlive it, or the commit would be refused and the same request redone forever.
        if len(jobs) >= 1000 or time.monotonic() - self.renewed > self.lease_s / 3:
            if not self._renew(self.lease_s + len(jobs) * 1e-4):
                raise StalePlanError("lost the leader lease while working")
        self.store.txn(build)
        self.usage = usage
        self.books.applied(books, now)
        for a in alerts:
            self.books.hooks.deliver(a)
            if self.metrics:
                self.metrics.alert(a)
        for j in jobs:
            if j.state in states.ACTIVE:
                self.jobs[j.id] = j
            else:
                self.jobs.pop(j.id, None)

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

    def _usage_after(self, ended, now: float) -> dict:
        """Fair-share usage with every attempt that ends in this change added (GPU-equivalent
        seconds, decayed from then on): an attempt counts once, when the record first shows its end."""
        usage = self.usage
        half = self.cfg.priority["fairshare_half_life"]
        for j in ended:
            a, old = j.current, self.jobs.get(j.id)
            was = old.current if old is not None else None
            if a is None or a.end_time is None or was is None or was.attempt != a.attempt or was.end_time:
                continue
            ran = a.end_time - (a.dispatch_time or a.end_time)
            if ran > 0:
                usage = fairshare.add(usage, j.account, fairshare.weight(old) * ran, now, half)
        return usage

    # -- requests ------------------------------------------------------------------------------
    def _requests(self, now: float, pending: bool) -> None:
        streams = [self.k.inbox(u) for u in sorted(self.inboxes)]
        done = 0
        while done < MAX_REQUESTS_PER_TICK:
            entries = self.store.read_group(streams, pending)
            poisoned = self._poisoned(entries) if pending else set()
            for stream, eid, fields in entries:
                self._request(now, stream, eid, fields or {}, (stream, eid) in poisoned)
            done += len(entries)
            if not entries:   # pending mode too: acknowledged entries leave the pending list
                break

    def _poisoned(self, entries) -> set:
        """Entries redelivered after the leader died on them more than once: never handled again."""
        out = set()
        for stream in {s for s, _, _ in entries}:
            counts = self.store.deliveries(stream, [e for s, e, _ in entries if s == stream])
            out |= {(stream, e) for e, n in counts.items() if n >= intake.MAX_DELIVERIES}
        return out

    def _request(self, now: float, stream: str, eid: str, fields: dict, poisoned: bool = False) -> None:
        """Validate → handle → commit, for this one entry. Whatever goes wrong is this entry's
        error reply: a handler decides and writes nothing, so a failed entry leaves no partial
        writes (its Change is dropped, the error reply is committed in its place)."""
        rid = intake.reply_id(fields, eid)
        if poisoned:
            return self._refuse(stream, eid, rid, fields, "this request stopped the scheduler twice; not run again",
                                dead=True, remember=False)
        sec = self.cfg.security
        try:   # who asks: the inbox's name in single-host mode, whom munge vouches for otherwise
            user = auth.identify(fields, stream.rsplit(":", 1)[1], sec, now,
                                 lambda key: self.store.claim_credential(key, f"{stream}/{eid}", sec["credential_ttl"]))
        except RefusedError as e:
            log.warning("inbox %s entry %s: %s", stream, eid, e)
            self.commit(reply=(rid, {"ok": False, "code": e.exit_code, "error": str(e)}, False), ack=(stream, eid))
            return
        except POISON_PASSES:
            raise
        except Exception as e:   # a credential no decoder expected: this entry's error
            log.exception("inbox %s entry %s: identifying the sender failed", stream, eid)
            return self._refuse(stream, eid, rid, fields, f"internal error: {type(e).__name__}: {e}", dead=True,
                                remember=False)
        prior = self.store.r.get(self.k.done(rid))
        if prior is not None:   # a client retry, or a redelivery after a crash: answer, never redo
            self.commit(reply=(rid, json.loads(prior)), ack=(stream, eid))
            return
        try:
            req = intake.request(fields, eid, self.cfg.max_request_bytes)
            late = max(now, self.clock()) - (req.expires or float("inf"))
            if late > 0:   # the client has given up and told its user nothing was done: keep it so
                return self._refuse(stream, eid, rid, fields, f"expired: read {late:.1f}s after the client's "
                                    "deadline; not done", code=4)
            change = self.handlers.handle(user, req.op, req.body, now)
        except LabqError as e:
            change = Change(reply={"ok": False, "code": getattr(e, "exit_code", 2), "error": str(e)})
        except Exception as e:   # a handler bug: this entry's error, never the scheduler's end
            log.exception("request %s (%s) from %s failed", eid, fields.get("op"), user)
            return self._refuse(stream, eid, rid, fields, f"internal error: {type(e).__name__}: {e}", dead=True)
        try:
            self.commit(jobs=change.jobs, controls=change.controls, nodes=change.nodes,
                        reply=(rid, change.reply), ack=(stream, eid), alerts=change.alerts, books=change.books)
        except POISON_PASSES:
            raise
        except Exception as e:   # Redis refused the write itself (a value it cannot hold)
            log.exception("request %s from %s could not be committed", eid, user)
            return self._refuse(stream, eid, rid, fields, f"internal error: {type(e).__name__}: {e}", dead=True)
        if self.metrics:
            self.metrics.requests.inc()
        if change.nodes:
            self.nodes = self.store.nodes(now)

    def _refuse(self, stream: str, eid: str, rid: str, fields: dict, error: str, code: int = 2,
                dead: bool = False, remember: bool = True) -> None:
        """Answer a request with `error` and acknowledge it; `dead` keeps it in the dead letters too;
        `remember` False where the sender is not known yet (the rid must not bind its real owner)."""
        reply = {"ok": False, "code": code, "error": error, "rid": rid}
        self.commit(reply=(rid, reply, remember), ack=(stream, eid),
                    dead=(stream, eid, fields, error) if dead else None)
        if dead:
            log.warning("request %s on %s dead-lettered: %s", eid, stream, error)

    # -- events from agents ----------------------------------------------------------------------
    def _events(self, now: float, pending: bool) -> None:
        while True:
            entries = self.store.read_group([self.k.events], pending)
            poisoned = self._poisoned(entries) if pending else set()
            for stream, eid, fields in entries:
                if (stream, eid) in poisoned:
                    self._dead(stream, eid, fields or {}, "this event stopped the scheduler twice; not run again")
                    continue
                self._event(now, stream, eid, fields or {})
            if not entries:   # pending mode too: acknowledged entries leave the pending list
                break

    def _dead(self, stream: str, eid: str, fields: dict, reason: str) -> None:
        """Move an event no handler could take to the dead letters, acknowledged; logged once."""
        log.warning("event %s on %s dead-lettered: %s", eid, stream, reason)
        self.commit(ack=(stream, eid), dead=(stream, eid, fields, reason))

    def _event(self, now: float, stream: str, eid: str, f: dict) -> None:
        # The tick's `now` was read before this event arrived; billing caps an attempt's end at
        # `now`, so read the clock again or an end could fall before the runner's own start.
        now = self.now = max(now, self.clock())
        try:
            ev = intake.event(f, self.cfg.max_request_bytes)
            write = (self._agent_alert(now, eid, ev) if ev.kind == "alert"
                     else self._attempt_event(now, stream, eid, ev))
        except LabqError as e:
            return self._dead(stream, eid, f, str(e))
        except Exception as e:   # a transition's bug on odd input: this event's end, not the scheduler's
            log.exception("event %s failed", eid)
            return self._dead(stream, eid, f, f"internal error: {type(e).__name__}: {e}")
        try:
            self.commit(ack=(stream, eid), **write)
        except POISON_PASSES:
            raise
        except Exception as e:
            log.exception("event %s could not be committed", eid)
            return self._dead(stream, eid, f, f"internal error: {type(e).__name__}: {e}")
        new = (write.get("jobs") or [None])[0]
        if ev.kind == "finished" and new is not None:
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
        """Attempts whose node lease expired, or whose runner stopped heart-beating: `NF`, requeued."""
        up = {n.name: n for n in self.nodes}
        on_node = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        beats = self.store.attempt_heartbeats([(j.id, j.current.attempt) for j in on_node])
        for job, hb in zip(on_node, beats):
            node = up.get(job.node)
            if node is not None and node.state != "down":
                # A runner that claimed the attempt and went silent (its horse was SIGKILLed) is lost too.
                if hb is None or now - hb <= self.cfg.node_lease:
                    continue
                last = hb
            else:
                last = node.last_heartbeat if node else now
            new, charges = tr.node_failed(job, last, now, self.cfg)
            log.warning("job %s lost on node %s (last heartbeat %.0fs ago)", job.display_id, job.node, now - last)
            self.commit(jobs=[new], charges=charges)

    # -- planning ------------------------------------------------------------------------------
    def snapshot(self, now: float) -> Snapshot:
        running = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(self.usage, running, now, self.cfg.priority["fairshare_half_life"])
        return Snapshot(now=now, nodes=self.nodes, jobs=tuple(self.jobs.values()), usage=tuple(sorted(usage.items())),
                        spent=tuple(sorted(self.books.spent_now(now).items())), ended=self.ended_states())

    def ended_states(self, extra: Job | None = None) -> tuple:
        """(id, state) of each ended job a pending job (and `extra`, a --test-only probe) depends on.
        An ended job never changes, so each is read from Redis once and kept while some pending job
        still depends on it."""
        want = dependency_targets([j for j in self.jobs.values() if j.deps and j.state == states.PENDING]
                                  + ([extra] if extra else []))
        want -= self.jobs.keys()
        missing = sorted(want - self.ended.keys())
        if missing:
            found = {j.id: j.state for j in Reader(self.store.r, self.k).jobs(missing)}
            self.ended.update((i, found.get(i, "")) for i in missing)
        self.ended = {i: self.ended[i] for i in want}
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
        for pd in p.pending:
            j = self.jobs[pd.job_id]
            if (j.reason, j.detail) != (pd.reason, pd.detail):
                changed.append(tr.pend(j, pd.reason, pd.detail))
        if changed:
            self.commit(jobs=changed, dispatch=dispatch, controls=controls)
        for j in dispatch:
            log.info("job %s -> %s gpus=%s", j.display_id, j.node, ",".join(j.gpu_uuids) or "-")
