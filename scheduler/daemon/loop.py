"""The scheduler daemon: the single writer of jobs, allocations and the ledger.

Each `tick(now)` holds the leader lease, then: takes requests from the request list and events from
the agents, declares attempts on dead nodes lost, runs the pure `plan()` over a snapshot, and applies
the plan in one fenced transaction (which also pushes each admitted attempt onto its node's dispatch
list). Every change is written in the same transaction as the acknowledgement of what caused it, so a kill -9 at any instant either loses
nothing (the request or event is redelivered) or has already written everything.
"""
import gc
import logging
import os
import socket
import time
import uuid
from dataclasses import replace

from .. import policy
from ..errors import RefusedError, StalePlanError
from ..jobs import rest, states, transitions as tr
from ..jobs.estimate import Estimator
from ..jobs.model import Job, Snapshot
from ..jobs.plan import Pending
from ..money import fairshare
from ..policy.depend import targets as dependency_targets
from ..policy.kept import Kept
from ..settings.config import Config
from ..store.faults import ERRORS as REDIS_ERRORS, REFUSED as REDIS_REFUSED, is_full
from ..store.keys import Keys
from ..store.reads import Reader
from ..store.state import SchedulerStore
from . import crashguard, sdnotify
from .applier import apply_plan
from .batch import Batch, Tally
from .bookkeeper import Bookkeeper
from .change import Change
from .commit import BIG_COMMIT, Committer, release_memory
from .events import NodeEvents
from .handlers import Handlers
from .hooks import Hooks
from .requests import Inboxes

log = logging.getLogger("labq.scheduler")


def tune_gc() -> None:
    """A pass over 100,000 pending jobs makes millions of short-lived tuples; at the default
    thresholds the collector walks the whole long-lived job table again and again (it was a third
    of plan()'s time). Job records hold no cycles, so collect rarely and leave loaded state frozen."""
    gc.set_threshold(100_000, 50, 100)
    gc.freeze()


REASON_CHUNK = 2000        # jobs per transaction when a pass gives many jobs a new reason


def _sleep_until(deadline: float, stop) -> None:
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def learned_from(ended, cfg: Config) -> Estimator:
    """An estimator that has seen `ended` (the recent ended jobs, oldest end first): their last
    attempts, where they ended on the job's own terms."""
    est = Estimator.from_config(cfg)
    for job in sorted(ended, key=lambda j: (j.end_time or 0, j.id)):
        est.observe_ended(job)
    return est


class Scheduler(Committer, NodeEvents, Inboxes):
    def __init__(self, r, cfg: Config = None, me: str | None = None, clock=time.time, durable=None, metrics=None,
                 archiver=None, history=None):
        self.cfg, self.k, self.clock = cfg, Keys(cfg.prefix), clock
        self.me = me or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store = SchedulerStore(r, self.k, self.me)
        self.down_since: dict[str, float] = {}     # node -> when this scheduler first saw its lease gone
        # When this scheduler could see Redis again after failing to (issue 35): nobody could beat
        # or post while it was away, so a runner's silence counts from then (events.py).
        self.sighted, self.blind = float("-inf"), False
        self.event_streams: set[str] = set()       # the per-node event streams with our consumer group
        self.jobs: dict[int, Job] = {}
        self.rests: dict = {}                # array id -> jobs/rest.Rest: a held array's tasks not yet records
        self.kept = Kept()                   # plan()'s request classes and ordered backlog, kept from pass to pass
        self.seq = self.seq_written = 0      # job ids: the last handed out, the last written to Redis
        self.tally = Tally()                 # pending/active counts per user and account, kept as jobs change
        self.batch: Batch | None = None      # what is staged for the next transaction (group commit)
        self.answered: dict = {}             # rid -> reply, for the requests of the read being handled
        self.leading = False
        self.lease_s = cfg.lease or max(10.0, 3 * cfg.tick)
        self.renewed = float("-inf")       # monotonic time of the last lease renewal
        self.nodes = ()
        self.last_plan = float("-inf")
        self.last_reasons = float("-inf")  # when a pass last wrote every pending job's new reason
        self.freed = False                 # an attempt ended since the last plan (room to refill)
        self.plan_done, self.plan_cost = float("-inf"), 0.0    # monotonic end and length of the last plan
        self.handlers = Handlers(self)
        self.usage: dict[str, tuple[float, float]] = {}   # fair share: account -> (decayed value, as of)
        self.guard = crashguard.CrashGuard.from_config(cfg)
        self.ended: dict[int, str] = {}    # state of ended jobs that pending jobs depend on (never changes)
        self.ended_shown: dict[int, str] = {}   # their display ids, where not the id ("126_7")
        # Budget limits, overrides, periods, alerts and the stop policy. `self.cfg.budgets` follows its
        # effective budgets (`budget set` limits, active overrides: _use_budgets); the file's are in it.
        self.books = Bookkeeper(self.store, cfg)
        self.hooks = Hooks(cfg.alerts)     # delivers each alert once its transaction is written
        self.now = 0.0                     # the time of what is being processed (the injected clock)
        self.file_checkpoints: dict[int, float] = {}   # job -> newest checkpoint file its runner reported
        self.metrics = metrics             # metrics.Metrics when scheduler.metrics is set
        self.durable = durable             # durability.Durability: checked before leading (labq scheduler)
        self._refused = ""                 # the last durability refusal logged (each is logged once)
        self.archiver = archiver           # store/archive.Archiver: ended jobs and old ledger entries out of Redis
        self.history = history             # store/archive.History: what the archiver moved, for reads
        self.acct_backlog: list[int] = []  # ended jobs without a Redis acct row (an older labq's), back-filled
        # Run times learned from ended jobs (estimate.py): stamped on each submit, fed at each attempt end.
        self.estimator = Estimator.from_config(cfg)

    # -- the loop --------------------------------------------------------------------------------
    def tick(self, now: float, woke=()) -> bool:
        """One round. Returns whether this scheduler is the leader. (`woke`, what the wake list held,
        is no longer read: a tick reads every request and event whatever woke it.)"""
        try:
            # Renewed within a third of the lease and still ours: one GET, not the renewal's four
            # round trips and an fsync before every request is read (every write is fenced by the
            # lease anyway). Anything else (not ours, gone, due) takes the full renewal.
            fresh = self.leading and time.monotonic() - self.renewed < self.lease_s / 3
            held = (fresh and self.store.leader() == self.me) or self._renew(self.lease_s)
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
                # Behind replicas, nothing of this master's is the state file's until a commit is acknowledged.
                self.unreplicated = bool(self.replicas_ack())
                # The lease is renewed while the state reloads, however long that takes.
                with self.store.keeping_lease(self.lease_s, self.lease_s / 3) as kept:
                    self._recover(now)
                if kept.lost:
                    raise StalePlanError(kept.lost)
                self.renewed = kept.renewed
            self.nodes = self.store.nodes(now)
            self._intake(now, pending=False)
            self._lost_attempts(now)
            self._unclaimed(now)
            change = self.books.tick(now, self.jobs, self.cfg)
            if change is not None:
                self.commit(change)
            # While requests keep streaming in, answer them first and plan at most once a tick;
            # a lone submit on an idle queue is planned at once.
            # An attempt's end freed room: plan again at once, unless planning would take more than
            # a third of the loop (at most every 2 x the last plan's own time), or a busy node
            # drains at one job per slot per tick.
            refill = self.freed and time.monotonic() - self.plan_done >= 2 * self.plan_cost
            if now - self.last_plan >= self.cfg.tick or refill or not self.store.wakes_waiting():
                # `now` is the tick's only clock: the ends processed in this tick were capped at it
                # (transitions.finished), so an admission at `now` never precedes them.
                began = time.monotonic()
                reasons = now - self.last_reasons >= self.cfg.tick
                self._schedule(now, reasons)
                self.last_plan, self.freed = now, False
                self.last_reasons = now if reasons else self.last_reasons
                self.plan_done = time.monotonic()
                self.plan_cost = self.plan_done - began
            if self.durable is not None and not self.unreplicated:   # figures a failover may yet undo: not kept
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
            self.durable.check(adopt=not self.replicas_ack())
            return True
        except RefusedError as e:
            if str(e) != self._refused:
                log.error("%s", e)
                self._refused = str(e)
            self.store.release_leader()
            return False

    def run(self, stop=lambda: False) -> None:
        if self.durable is not None:
            self.durable.check(adopt=not self.replicas_ack())    # refused at start: one line and exit 3
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
        woke = False
        ready = False
        while not stop():
            try:
                started = time.monotonic()
                leading = self.tick(self.clock(), woke)
                if self.metrics:
                    self.metrics.after_tick(self, time.monotonic() - started)
                if leading and self.archiver:
                    self.archiver.step(self.clock())
                if leading and self.acct_backlog:     # a batch a loop, so that ticks go on meanwhile
                    self._backfill_acct()
                if not ready:
                    ready = sdnotify.notify("READY=1")
                # From the main loop only: a stuck loop must let the watchdog fire.
                sdnotify.notify(f"WATCHDOG=1\nSTATUS={'leader' if leading else 'standby'}: "
                                f"{len(self.jobs)} active jobs, {len(self.nodes)} nodes")
                if self.leading:
                    woke = self.store.wait_wake(self.cfg.tick)
                else:
                    # A standby leaves the wake list to the leader (its wake-ups are the leader's news).
                    woke = False
                    _sleep_until(time.monotonic() + self.lease_s / 3, stop)
            except REDIS_ERRORS as e:
                log.error("Redis: %s; retrying in 1s", e)
                self.leading, self.blind = False, True
                time.sleep(1)
            except REDIS_REFUSED as e:
                if not is_full(e):
                    raise
                # Nothing was written (a transaction is all or nothing): reload and try again once
                # an admin freed memory; requests taken stay taken, clients hear "Redis is full".
                log.error("Redis is full (maxmemory reached): nothing is written until memory is freed; "
                          "retrying in 1s")
                self.leading = False
                time.sleep(1)

    def _backfill_acct(self) -> None:
        try:
            self.acct_backlog = self.store.backfill_acct_rows(self.acct_backlog)
        except StalePlanError as e:     # the lease went since the tick: the next leader's start finds the rest
            log.warning("%s; reloading state", e)
            self.leading = False

    def _recover(self, now: float) -> None:
        """Rebuild the in-memory view from Redis, then finish what a predecessor left unacknowledged."""
        self.jobs = self.store.active_jobs()
        self.store.rebuild_stat_rows(self.jobs.values())
        self.acct_backlog = self.store.acct_rows_missing()
        self.seq = self.seq_written = self.store.job_seq()
        self.tally = Tally(self.jobs.values())
        self.rests = Reader(self.store.r, self.k).rests()
        for r in self.rests.values():
            self.tally.add_alike(r.template, r.left)
        self.store.ensure_group(self.k.events)
        self.leading = True
        if self.blind:
            self.sighted, self.blind = now, False
            self.down_since.clear()
        self.nodes = self.store.nodes(now)
        self.event_streams = set()
        self._node_streams()
        self.books.load(now)
        self._use_budgets()
        self.usage = Reader(self.store.r, self.k, self.history).usage()
        if self.guard.on:   # the failures of the last window, as the previous leader counted them
            mine = [(a.end_time, j.user, a.outcome) for j in self.jobs.values() for a in j.attempts]
            ended = Reader(self.store.r, self.k).attempt_ends(now - self.guard.window, crashguard.REBUILD_JOBS)
            self.guard.rebuild_ends(mine + ended, now)
        self.estimator = learned_from(Reader(self.store.r, self.k).recent_runs(self.cfg.estimate.history), self.cfg)
        self._intake(now, pending=True)
        log.info("leader: %d active jobs, %d nodes", len(self.jobs), len(self.nodes))
        gc.freeze()      # what was just loaded lives long: keep the collector off it

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

    # -- planning ------------------------------------------------------------------------------
    def snapshot(self, now: float) -> Snapshot:
        running = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(self.usage, running, now, self.cfg.priority.fairshare_half_life)
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
        # A task of a held array kept as one rest is pending, and no ended state to keep (jobs/rest.py).
        resting, shown = rest.states_of(self.rests, want) if self.rests else ({}, {})
        want -= resting.keys()
        missing = sorted(want - self.ended.keys())
        if missing:
            found = Reader(self.store.r, self.k, self.history).jobs(missing)
            states_ = {j.id: j.state for j in found}
            self.ended.update((i, states_.get(i, "")) for i in missing)
            self.ended_shown.update((j.id, j.display_id) for j in found if j.array_id is not None)
        self.ended = {i: self.ended[i] for i in want}
        self.ended_shown = {i: s for i, s in self.ended_shown.items() if i in want}
        self.ended_shown.update(shown)
        return tuple(sorted({**self.ended, **resting}.items()))

    def _use_budgets(self) -> None:
        """The bookkeeper's effective budgets into this scheduler's config (admission, refusals)."""
        if self.books.budgets != self.cfg.budgets:
            self.cfg = replace(self.cfg, budgets=self.books.budgets)

    def _schedule(self, now: float, reasons: bool = True) -> None:
        """One policy pass over the snapshot, applied (applier.py) and committed: admissions with
        their dispatch, expiries and preemptions in one transaction; new reasons after. Without
        `reasons` (a pass that refills room freed within the tick) a waiting job's flip between
        Resources and Priority is not written: whether the pass placed anything decides which of
        the two every pending job gets, and writing them all at each job's end was most of the
        scheduler's work per trivial job (issue 12). The next pass with `reasons`, at most a tick
        later, writes them."""
        started = time.monotonic()
        snap = self.snapshot(now)
        p = policy.plan(snap, self.cfg, **self.kept.inputs(snap, self.cfg))
        if self.metrics:
            self.metrics.plan_seconds.observe(time.monotonic() - started)
        if not reasons:     # drop the flips before they are applied (a new record each) only to be discarded
            p = replace(p, pending=tuple(pd for pd in p.pending if not _flip(self.jobs.get(pd.job_id), pd)))
        done = apply_plan(p, self.jobs, self.jobs, self.nodes, now)
        for r in done.rejected:
            log.warning("plan not applied: %s", r.why)
            if self.metrics:
                self.metrics.plan_rejected.labels(type(r.decision).__name__).inc()
        for j in done.stopping:
            log.info("job %s preempted: %s", j.display_id, j.detail)
        pended = list(done.pended)
        change = done.change
        if change.jobs or len(pended) <= REASON_CHUNK:
            if len(pended) <= REASON_CHUNK:
                change.jobs += pended
            self.commit(change)
        if len(pended) > REASON_CHUNK:
            # New reasons alone need no atomicity with anything: written in fenced chunks, so that the
            # first pass over a 100,000-task array never builds one 100 MB transaction.
            for i in range(0, len(pended), REASON_CHUNK):
                self.commit(Change(jobs=pended[i:i + REASON_CHUNK]))
            if len(pended) >= BIG_COMMIT:
                release_memory()
        for j in done.started:
            log.info("job %s -> %s gpus=%s", j.display_id, j.node, ",".join(j.gpu_uuids) or "-")


def _flip(old: Job | None, pd: Pending) -> bool:
    """Only the Resources/Priority flip of a job already waiting for room (see _schedule)."""
    return old is not None and {old.reason, pd.reason} <= {states.RESOURCES, states.PRIORITY} \
        and not (old.earmark or pd.earmark)
