"""The scheduler daemon, the single writer of jobs, allocations and the ledger: a shell around its state
(state.py), its store and the committer (store/commit.py). `tick(now)` reads top to bottom; every
Change is written in the same transaction as the acknowledgement of what caused it, so a kill -9 at
any instant either loses nothing (the request or event is redelivered) or has written everything."""
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import RefusedError, StalePlanError
from ..jobs.estimate import Estimator
from ..jobs.model import Job, Node, Snapshot
from ..jobs.rest import Rest
from ..settings.config import Config
from ..store import login, writes
from ..store.batch import Ack, Dead, Partial, Reply
from ..store.commit import BIG_COMMIT, Committer, release_memory, tune_gc
from ..store.faults import ERRORS as REDIS_ERRORS, REFUSED as REDIS_REFUSED, is_full
from ..store.keys import Keys
from ..store.state import SchedulerStore
from . import crashguard, sdnotify
from .bookkeeper import Bookkeeper
from .change import Change, Read
from .events import NodeEvents
from .handlers import Handlers
from .hooks import Hooks
from .planning import Planner
from .requests import Inboxes
from .state import OfState, SchedulerState, Tally, learned_from

log = logging.getLogger("labq.scheduler")


def _sleep_until(deadline: float, stop: Callable[[], bool]) -> None:
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


class Scheduler:
    """The shell around the scheduler's state (state.py): it holds the state, the store and the
    committer, and composes the parts that read and decide (the inboxes, requests.py; the node events,
    events.py; the policy pass, planning.py; the bookkeeper); each hands it Changes, which it commits."""

    def __init__(self, r: Any, cfg: Config, me: str | None = None, clock: Callable[[], float] = time.time,
                 durable: Any = None, metrics: Any = None, archiver: Any = None, history: Any = None,
                 store: SchedulerStore | None = None) -> None:
        """Over the connection `r`, or over `store` (store/login.py opens it: `labq scheduler`)."""
        self.k, self.clock = Keys(cfg.prefix), clock
        self.me = store.me if store is not None else me or login.scheduler_name()
        self.state = SchedulerState(cfg=cfg, estimator=Estimator.from_config(cfg),
                                    guard=crashguard.CrashGuard.from_config(cfg))
        self.store = store if store is not None else SchedulerStore(r, self.k, self.me)
        self.committer = Committer()             # the open batch; it writes through self.store
        self.blind = False                         # Redis was out of sight (state.sighted: when it came back)
        self.leading = False
        self.lease_s = cfg.lease or max(10.0, 3 * cfg.tick)
        self.renewed = float("-inf")       # monotonic time of the last lease renewal
        self.written = 0                   # records committed since memory was last handed back
        self.handlers = Handlers(self)
        # Budget limits, overrides, periods, alerts and the stop policy. `self.cfg.budgets` follows its
        # effective budgets (`budget set` limits, active overrides: _use_budgets); the file's are in it.
        self.books = Bookkeeper(cfg)
        self.hooks = Hooks(cfg.alerts)     # delivers each alert once its transaction is written
        self.now = 0.0                     # the time of what is being processed (the injected clock)
        self.metrics = metrics             # metrics.Metrics when scheduler.metrics is set
        self.durable = durable             # durability.Durability: checked before leading (labq scheduler)
        self._refused = ""                 # the last durability refusal logged (each is logged once)
        self.archiver = archiver           # store/archive.Archiver: ended jobs and old ledger entries out of Redis
        self.history = history             # store/archive.History: what the archiver moved, for reads
        self.acct_backlog: list[int] = []  # ended jobs without a Redis acct row (an older labq's), back-filled
        # `labq report`'s totals: folded a batch a loop while a backlog waits, else once a second (a
        # read each tick would be a round trip a batch; readers count what waits, store/totals.read).
        self.fold_at, self.fold_more = 0.0, True
        self.events = NodeEvents(self.state, self.store, self.commit)
        self.planner = Planner(self, self.books)      # the policy pass: when due, what plan() sees, applied
        self.inboxes = Inboxes(self, self.events)     # last: it takes what it uses of this shell now

    # What the handlers (handlers.State), the metrics and the tests read of the state.
    cfg, jobs, nodes = OfState[Config](), OfState[dict[int, Job]](), OfState[tuple[Node, ...]]()
    tally, estimator = OfState[Tally](), OfState[Estimator]()
    rests, ended, read = OfState[dict[int, Rest]](), OfState[dict[int, str]](), OfState[Read]()
    seq = OfState[int]()

    # -- the loop --------------------------------------------------------------------------------
    def tick(self, now: float, woke: object = ()) -> bool:
        """One round, top to bottom: the lease (a new leader reloads the state) → the requests and
        the nodes' events, read, decided and committed round by round (group commit) → attempts lost
        or never claimed → the budgets' duties → a policy pass, applied. Each phase reads through the
        store, asks a pure decider for a Change and commits it (`commit`: the state takes it, the
        committer writes it). Returns whether this scheduler is the leader. (`woke` is not read.)"""
        if not self._hold_lease():
            return False
        try:
            self.now = now
            if not self.leading and not self._lead(now):
                return False
            self.state.see_nodes(self.store.nodes(now))
            self.inboxes.intake(now, pending=False)
            self.events.lost_attempts(now)
            self.events.unclaimed(now)
            if self.books.base.budgets:    # the budgets' duties: read here, decided (bookkeeper.py), committed
                spent, charged = self.store.spent(), self.store.known_keys(self.books.due_periods(now))
                if (change := self.books.tick(now, self.jobs, self.cfg, spent, charged)) is not None:
                    self.commit(change)
            if self.planner.due(now):
                self.planner.plan(now)
            if self.durable is not None and not self.committer.unreplicated:   # figures a failover may yet undo: not kept
                self.durable.seen(self.store)     # the figures as this store's commits left them
        except StalePlanError as e:
            log.warning("%s; reloading state", e)
            self.leading = False
        return self.leading

    def _hold_lease(self) -> bool:
        """Whether this scheduler holds the leader lease (renewed where due)."""
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
        return held

    def _lead(self, now: float) -> bool:
        """Take the lead: the durability checks, then the state reloaded (_recover)."""
        if not self._durable_ok():
            return False
        # Behind replicas, nothing of this master's is the state file's until a commit is acknowledged.
        self.committer.unreplicated = bool(self.replicas_ack())
        # The lease is renewed while the state reloads, however long that takes.
        with self.store.keeping_lease(self.lease_s, self.lease_s / 3) as kept:
            self._recover(now)
        if kept.lost:
            raise StalePlanError(kept.lost)
        self.renewed = kept.renewed
        return True

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

    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
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

    def _loop(self, stop: Callable[[], bool]) -> None:
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
                if leading:     # a batch a loop, so that ticks go on meanwhile
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
        """Acct rows an older labq did not write, and `labq report`'s totals (store/totals.fold)."""
        try:
            if self.acct_backlog:
                self.acct_backlog = self.store.backfill_acct_rows(self.acct_backlog)
            if self.fold_more or time.monotonic() >= self.fold_at:
                self.fold_more, self.fold_at = self.store.fold_report(), time.monotonic() + 1.0
        except StalePlanError as e:     # the lease went since the tick: the next leader's start finds the rest
            log.warning("%s; reloading state", e)
            self.leading = False

    def _recover(self, now: float) -> None:
        """Rebuild the in-memory view from Redis, then finish what a predecessor left unacknowledged."""
        st = self.state
        st.loaded(self.store.active_jobs(), self.store.job_seq(), self.store.reader().rests())
        self.store.rebuild_stat_rows(st.jobs.values(), st.rests.values())
        self.acct_backlog = self.store.acct_rows_missing()
        self.fold_more = True       # rebuild_stat_rows put every ended job to fold again
        self.store.ensure_group(self.k.events)
        self.leading = True
        if self.blind:
            st.sighted, self.blind = now, False
            st.down_since.clear()
        st.nodes = self.store.nodes(now)
        self.events.streams = set()
        self.events.node_streams()
        self.books.load(self.store.books(), now)
        self._use_budgets()
        st.usage = self.store.reader(self.history).usage()
        if st.guard.on:   # the failures of the last window, as the previous leader counted them
            mine = [(a.end_time, j.user, a.outcome) for j in st.jobs.values() for a in j.attempts]
            ended = self.store.reader().attempt_ends(now - st.guard.window, crashguard.REBUILD_JOBS)
            st.guard.rebuild_ends(mine + ended, now)
        st.estimator = learned_from(self.store.reader().recent_runs(st.cfg.estimate.history), st.cfg)
        self.inboxes.intake(now, pending=True)
        log.info("leader: %d active jobs, %d nodes", len(st.jobs), len(st.nodes))
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

    # -- committing: the state takes each Change at once, the committer (store/commit.py) writes it --
    def commit(self, change: Change, ack: Ack | None = None, reply: Reply | None = None, dead: Dead | None = None,
               partial: Partial | None = None) -> None:
        """Stage one change with what caused it (Committer.stage names them). The state takes it now;
        Redis gets it with the open batch (`flush`), or at once when no batch is open."""
        c, st = self.committer, self.state
        solo = c.batch is None
        batch = c.begin(st.usage) if c.batch is None else c.batch
        try:
            if change.last_id:
                self._take_ids(change.last_id)
            charges = c.new_charges(self.store, change)
            tasks = st.fresh_tasks(change.jobs, batch.jobs)
            usage = st.usage if tasks else st.usage_after(change.jobs, self.now)   # new tasks ended nothing
            # Everything that could raise is done: from here on the change is staged whole or not at all.
            c.stage(change, charges, st.jobs, st.rests, tasks, reply, ack, dead, partial)
            st.apply(change, tasks, usage)
        finally:
            if solo:
                self.flush()

    def flush(self) -> None:
        """Write everything staged since the batch began in one fenced transaction."""
        b, st = self.committer.take(), self.state
        if not b:
            return
        if b.expires < self.clock():
            # A client gave up on a request of this batch and told its user nothing was done: commit
            # none of it. The reload hands every request taken back, each then answered on its own.
            raise StalePlanError("a request expired before its commit; reloading, it is answered expired")
        # A big change (a 100,000-task array) takes seconds to build and send; the lease must
        # outlive it, or the commit would be refused and the same request redone forever.
        if b.size() >= 1000 or time.monotonic() - self.renewed > self.lease_s / 3:
            if not self._renew(self.lease_s + b.size() * 1e-4):
                raise StalePlanError("lost the leader lease while working")
        seq = st.seq if st.seq > st.seq_written else None
        durable = self.durable
        self.committer.write(self.store, b, self.now, st.usage, st.jobs, seq, self.books.period, self.replicas_ack(),
                             acknowledged=None if durable is None else lambda: durable.acknowledged(st.seq))
        # Its charges are in the spent hash now (read again where a decider asks); its ids are written.
        st.read.spent, st.seq_written = None, st.seq_written if seq is None else seq
        for books in b.books:      # the books learn what was written, alerts go out
            if self.books.applied(books, self.now):
                self._use_budgets()
        for a in b.alerts:
            self.hooks.deliver(a)
            if self.metrics:
                self.metrics.alert(a)
        self.written += b.size()
        if self.written >= BIG_COMMIT:      # many small commits too: 100,000 single submits held 2.3x the RSS
            self.written = 0
            release_memory()

    def _take_ids(self, last: int) -> None:
        """Hand out the new job ids a change names (state.seq + 1 .. `last`, Change.last_id). The leader
        hands ids out from memory and writes the sequence with the batch (an INCRBY per submit was an
        fsync per submit). A big array's records are written ahead of the transaction
        (writes.put_new_jobs), so its ids are taken from Redis first: a deposed leader that does not
        know it yet then gets ids no one else holds, or finds the sequence moved and stops."""
        st = self.state
        n = last - st.seq
        if n >= writes.PREWRITE_MIN:
            got = self.store.advance_seq(st.seq - st.seq_written + n)
            if got != last:
                raise StalePlanError("the job id sequence moved under this scheduler")
            st.seq_written = got
        st.seq = last

    def replicas_ack(self) -> int:
        """redis.min_replicas_ack, or the `ack` of a sentinel:// URL given by the environment."""
        return max(self.cfg.min_replicas_ack, getattr(getattr(self.store, "r", None), "labq_min_ack", 0))

    # -- planning (planning.py) ------------------------------------------------------------------
    def snapshot(self, now: float) -> Snapshot:
        """What plan() sees at `now` (the shell's: the ended jobs depended on are read and kept)."""
        return self.planner.snapshot(now)

    def ended_jobs(self, ids: list[int]) -> list[Job]:
        """The records of ended jobs `ids` there are, in Redis or moved to the archive (`history`)."""
        return self.store.reader(self.history).jobs(ids)

    def _use_budgets(self) -> None:
        """The bookkeeper's effective budgets into this scheduler's config (admission, refusals)."""
        if self.books.budgets != self.cfg.budgets:
            self.state.cfg = replace(self.cfg, budgets=self.books.budgets)
