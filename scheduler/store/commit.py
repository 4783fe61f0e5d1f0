"""The one committer: writes a Change. Each change is staged into the open batch with what caused it
(group commit, batch.py), and the batch is written as one fenced transaction. It decides nothing and
holds no state but the open batch: the scheduler's state (daemon/state.py) takes each change into
memory as it is staged, and the shell (daemon/loop.py) says when to write."""
import ctypes
import gc
import logging

from ..errors import StalePlanError
from ..jobs import states
from . import codec, dispatchq, envs, faults, nodehealth, rests, writes
from .batch import Batch
from .replies import put_replies

log = logging.getLogger("labq.scheduler")

BIG_COMMIT = 5000


def tune_gc() -> None:
    """A pass over 100,000 pending jobs makes millions of short-lived tuples; at the default
    thresholds the collector walks the whole long-lived job table again and again (it was a third
    of plan()'s time). Job records hold no cycles, so collect rarely and leave loaded state frozen."""
    gc.set_threshold(100_000, 50, 100)
    gc.freeze()


def release_memory() -> None:
    """After a big commit, hand the freed arenas back to the system (glibc keeps them otherwise).
    What a commit frees goes by reference counts (records hold no cycles); the young generations
    are collected for the rest. A full collection walked every job in the table (tune_gc freezes only
    what was loaded at start): 3 → 15 ms per 10,000-task submit as the queue grew."""
    gc.collect(1)
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass    # not glibc: memory is returned only when the allocator chooses


class Committer:
    """Holds the open batch; writes it through the store it is given (store/state.SchedulerStore: its
    fenced transaction)."""

    def __init__(self) -> None:
        self.batch: Batch | None = None         # what is staged for the next transaction
        self.unreplicated = False     # the last commit reached fewer replicas than redis.min_replicas_ack

    def begin(self, usage: dict) -> Batch:
        """Open a batch (fair-share usage as it begins: what changed is written with it)."""
        self.batch = Batch(usage=usage)
        return self.batch

    def take(self) -> Batch | None:
        """The open batch, closed."""
        b, self.batch = self.batch, None
        return b

    def new_charges(self, store, change) -> list:
        """The change's charges not in the ledger yet (a redelivered event charges nothing twice)."""
        b = self.batch
        return [c for c in change.charges if c.key not in b.charged and not store.charged(c.key)]

    def stage(self, change, charges: list, known, known_rests, tasks: bool, reply=None, ack=None, dead=None,
              partial=None) -> None:
        """Stage `change` (its `charges` as new_charges found them; `known`, `known_rests`: the active
        table and the held arrays' rests before it; `tasks`: its jobs are a new array's tasks,
        state.fresh_tasks) with `ack` (stream, entry
        id) acknowledged, `reply` (rid, answer[, remember]) given, `dead` (stream, entry id, fields,
        reason) kept as a dead letter, `partial` (rid, runs) a mass cancel's progress. Raises nothing."""
        b = self.batch
        jobs = change.jobs
        if tasks:
            ids = range(jobs[0].id, jobs[0].id + len(jobs))
            b.new.update(ids)
            b.jobs.update(zip(ids, jobs))
            b.tasks[jobs[0].array_id] = jobs
        else:
            for j in jobs:
                if j.id not in known and j.id not in b.jobs:
                    b.new.add(j.id)
                b.jobs[j.id] = j
        for a, r in change.rests.items():
            if r is not None and a not in known_rests:
                b.rests_new.add(a)          # a rest this batch makes: its script is written
            b.rests[a] = r
        b.charges += charges
        b.charged.update(c.key for c in charges)
        b.controls += change.controls
        b.dispatch += change.dispatch
        b.nodes += change.nodes
        b.health += change.health
        b.alerts += change.alerts
        if change.books:
            b.books.append(change.books)
        if reply is not None:
            b.replies.append(reply)
        if ack is not None:
            b.acks.append(ack)
        if dead is not None:
            b.dead.append(dead)
        if partial is not None:
            b.partials.append(partial)
        if change.blocker is not None:
            b.blocker = change.blocker

    def write(self, store, b: Batch, now: float, usage: dict, active, seq: int | None, period, replicas: int,
              acknowledged=None) -> None:
        """Write batch `b` in one fenced transaction, stamped `now`: `usage` the fair-share usage
        after it, `active` the job table (a control's job not in the batch), `seq` the job id
        sequence to write (None: written already), `period(budget, now)` a charge's period;
        `acknowledged()` is told when `replicas` acknowledged it (redis.min_replicas_ack)."""
        new = [b.jobs[i] for i in sorted(b.new) if b.jobs[i].state in states.ACTIVE]
        fresh = store.put_new_jobs(new, b.tasks) if new else set()
        if b.dispatch:      # where each one's environment text is, for the copy a node may read
            b.env_keys = envs.sources(store.r, store.k, [codec.env_ref(j) for j in b.dispatch])

        def build(p):
            _build(p, store, b, now, usage, active, seq, period, replicas, new, fresh)

        self._write_or_undo(store, b, build, replicas, fresh, acknowledged)
        if b.jobs or b.rests:
            store.ranking.settle(b.jobs.values(), b.rests)
        store.wrote(seq, bool(b.charges or b.books))      # what the state file's figures now are (durability.seen)

    def _write_or_undo(self, store, b, build, replicas: int, fresh: set, acknowledged) -> None:
        """_write; when it is refused (the lease lapsed while a big array was written ahead), the
        records written ahead go too: the request is done again under new ids, and they would stay
        as pending jobs of no queue that `labq show` finds. Their ids are this leader's alone (the
        sequence moved past them)."""
        try:
            self._write(store, b, build, replicas, acknowledged)
        except StalePlanError:
            try:
                if fresh:
                    writes.drop_unindexed(store.r, store.k, fresh)
            except faults.ERRORS as e:      # Redis away: they stay, as after a crash between the two
                log.warning("records written ahead of a refused commit stay in Redis: %s", e)
            raise

    def _write(self, store, b, build, replicas: int, acknowledged) -> None:
        """The transaction; with `replicas`, its replies and dispatch entries go out only once that
        many replicas have it: what a client was told or a node acted on survives the master's death
        (redis.min_replicas_ack). Held back, a reply is given again to the client's resend (its done
        key), and an attempt no runner saw is withdrawn after start_timeout and requeued."""
        if not replicas:
            store.txn(build)
            return
        store.txn(build, replicas)
        self.unreplicated = store.acked < replicas
        if not self.unreplicated:
            if acknowledged is not None:
                acknowledged()
            store.txn(lambda p: _announce_into(p, store.k, b, replies=True))   # fenced, as it was
        elif (b.replies or b.dispatch) and getattr(store, "doubt", ""):
            log.warning("a commit is not acknowledged (%s): %d replies and %d dispatches held back",
                        store.doubt, len(b.replies), len(b.dispatch))
        elif b.replies or b.dispatch:
            log.warning("only %d of %d replicas acknowledged a commit within %d ms: %d replies and %d dispatches "
                        "held back", store.acked, replicas, store.wait_ms, len(b.replies), len(b.dispatch))


def _build(p, store, b: Batch, now: float, usage: dict, active, seq, period, replicas: int, new: list,
           fresh: set) -> None:
    usage0 = b.usage if b.usage is not None else {}
    if seq is not None:
        writes.put_seq(p, store.k, seq)
    # A job not new in this batch was in the table, so in the active index (loaded from it).
    writes.put_jobs(p, store.k, [j for j in b.jobs.values() if j.id not in fresh], new=b.new)
    if b.jobs or b.rests:
        store.ranking.stale(p, b.jobs.values(), b.rests)
    writes.index_jobs(p, store.k, [b.jobs[i] for i in sorted(fresh)])
    writes.put_specs(p, store.k, new)
    envs.put_new(p, store.k, [b.jobs[i] for i in sorted(b.new)])
    for acct in [a for a in usage if usage[a] != usage0.get(a)]:
        writes.put_usage(p, store.k, acct, *usage[acct])
    rests.put_changed(p, store.k, b.rests, b.rests_new)
    for c in b.charges:
        writes.put_charge(p, store.k, c, now, c.period or period(c.budget, now))
    for key in b.charged:
        writes.mark_charged(p, store.k, key)
    for jid, value in b.controls:
        writes.put_control(p, store.k, jid, value)
        dispatchq.to_runners(p, store.k, b.jobs.get(jid) or active.get(jid), jid, value)
    for a in b.alerts:
        writes.add_alert(p, store.k, a)
    for books in b.books:
        writes.put_books(p, store.k, books, now)
    if not replicas:
        _announce_into(p, store.k, b, replies=False)
    _nodes_into(p, store.k, b, now)
    writes.put_blocker(p, store.k, b.blocker)
    put_replies(p, store.k, b.replies, push=not replicas)
    for d in b.dead:
        writes.put_dead(p, store.k, *d, now)
    for rid, runs in b.partials:
        writes.put_partial(p, store.k, rid, runs)
    by_stream: dict = {}
    for stream, eid in b.acks:
        by_stream.setdefault(stream, []).append(eid)
    for stream, eids in by_stream.items():
        store.ack(p, stream, *eids)


def _nodes_into(p, k, b: Batch, now: float) -> None:
    """The nodes' admin states (drain, resume) and health marks (Change.health) the batch changes."""
    for name, admin in b.nodes:
        writes.put_node_admin(p, k, name, admin)
    for name, why in b.health:
        nodehealth.put(p, k, name, why, now)


def _announce_into(p, k, b: Batch, replies: bool) -> None:
    for j in b.dispatch:     # a gang: one entry on each part's node (the runner finds its rank)
        for node, _ in j.current.parts or ((j.current.node, ()),):
            ref = codec.env_ref(j)
            dispatchq.push(p, k, node, j.id, j.current.attempt, ref, j.has_script, b.env_keys.get(ref))
    if replies:
        for rid, reply, *_ in b.replies:
            writes.push_reply(p, k, rid, reply)
