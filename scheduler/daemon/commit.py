"""The scheduler's writes: each change is staged into the open batch and the batch is written as one
fenced transaction (group commit, see batch.py). A mixin of `Scheduler`, which holds the state."""
import ctypes
import gc
import logging
import time

from ..errors import StalePlanError
from ..jobs import states
from ..jobs.jobspec import Tasks
from ..jobs.model import Job
from ..money import fairshare
from ..store import codec, dispatchq, faults, rests, writes
from .batch import Batch
from .change import Change

log = logging.getLogger("labq.scheduler")

BIG_COMMIT = 5000


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
    unreplicated = False     # the last commit reached fewer replicas than redis.min_replicas_ack

    # -- writing -------------------------------------------------------------------------------
    def commit(self, change: Change, ack=None, reply=None, dead=None, partial=None) -> None:
        """Stage one change with what caused it: `ack` (stream, entry id) acknowledged, `reply`
        (rid, answer[, remember]) given, `dead` (stream, entry id, fields, reason) kept as a dead
        letter, `partial` (rid, runs) a mass cancel's progress. The in-memory view takes it now;
        Redis gets it with the open batch (`flush`), or at once when no batch is open."""
        solo = self.batch is None
        if solo:
            self.batch = Batch(usage=self.usage)
        try:
            self._stage(change, reply, ack, dead)
            if partial is not None:
                self.batch.partials.append(partial)
        finally:
            if solo:
                self.flush()

    def _stage(self, change: Change, reply, ack, dead) -> None:
        b = self.batch
        now = self.now     # the tick's time: what the change is stamped with
        jobs = change.jobs
        charges = [c for c in change.charges if c.key not in b.charged and not self.store.charged(c.key)]
        tasks = jobs if self._fresh_tasks(jobs) else None
        usage = self.usage if tasks else self._usage_after(jobs, now)     # no attempt of new tasks ended
        # Everything that could raise is done: from here on the change is staged whole or not at all.
        if tasks:
            # A new array's tasks, none known yet: staged as a whole (a loop per task was ~8 ms of
            # a 10,000-task submit).
            ids = range(tasks[0].id, tasks[0].id + len(tasks))
            b.new.update(ids)
            b.jobs.update(zip(ids, tasks))
            b.tasks[tasks[0].array_id] = tasks
            if tasks[0].state in states.ACTIVE:
                self.jobs.update(zip(ids, tasks))
                self.tally.add_alike(tasks[0], len(tasks))
            jobs = ()
        for j in jobs:
            if j.id not in self.jobs and j.id not in b.jobs:
                b.new.add(j.id)
            b.jobs[j.id] = j
            self._put(j)
        self._stage_rests(change.rests)
        b.charges += charges
        b.charged.update(c.key for c in charges)
        b.controls += change.controls
        b.dispatch += change.dispatch
        b.nodes += change.nodes
        b.alerts += change.alerts
        if change.books:
            b.books.append(change.books)
        if reply is not None:
            b.replies.append(reply)
        if ack is not None:
            b.acks.append(ack)
        if dead is not None:
            b.dead.append(dead)
        self.usage = usage

    def _stage_rests(self, changed: dict) -> None:
        """Held arrays kept as one rest each (jobs/rest.py), made or changed: the counts the submit
        handler checks follow their tasks (a task that leaves one comes in as a record of the change)."""
        for a, rest in changed.items():
            old = self.rests.get(a)
            if old is not None:
                self.tally.add_alike(old.template, -old.left)
            elif rest is not None:
                self.batch.rests_new.add(a)
            if rest is None:
                self.rests.pop(a, None)
            else:
                self.tally.add_alike(rest.template, rest.left)
                self.rests[a] = rest
            self.batch.rests[a] = rest

    def _fresh_tasks(self, jobs) -> bool:
        """Whether `jobs` are a new array's tasks as expand made them (consecutive ids, alike but for
        id and index), none of them in the table or the batch yet, in a state that holds no node."""
        if not isinstance(jobs, Tasks) or not jobs:
            return False
        first, n = jobs[0].id, len(jobs)
        if jobs[-1].id != first + n - 1 or jobs[0].array_id != first or jobs[0].state in states.ON_NODE:
            return False
        b = self.batch
        return all(i not in self.jobs and i not in b.jobs for i in range(first, first + n))

    def next_ids(self, n: int) -> int:
        """The first of `n` new consecutive job ids. The leader hands ids out from memory and writes
        the sequence with the batch (an INCRBY per submit was an fsync per submit). A big array's
        records are written ahead of the transaction (writes.put_new_jobs), so its ids are taken
        from Redis at once: a deposed leader that does not know it yet then gets ids no one else
        holds, or finds the sequence moved and stops."""
        first = self.seq + 1
        if n >= writes.PREWRITE_MIN:
            got = self.store.advance_seq(self.seq - self.seq_written + n)
            if got != self.seq + n:
                raise StalePlanError("the job id sequence moved under this scheduler")
            self.seq_written = got
        self.seq += n
        return first

    def _put(self, j: Job) -> None:
        old = self.jobs.get(j.id)
        if j.state in states.ACTIVE:
            self.jobs[j.id] = j
            self.tally.replace(old, j)
        elif old is not None:
            del self.jobs[j.id]
            self.tally.replace(old, None)

    def flush(self) -> None:
        """Write everything staged since the batch began in one fenced transaction."""
        b, self.batch = self.batch, None
        if not b:
            return
        self._unexpired(b)
        now = self.now     # the tick's time: what the change is stamped with
        # A big change (a 100,000-task array) takes seconds to build and send; the lease must
        # outlive it, or the commit would be refused and the same request redone forever.
        if b.size() >= 1000 or time.monotonic() - self.renewed > self.lease_s / 3:
            if not self._renew(self.lease_s + b.size() * 1e-4):
                raise StalePlanError("lost the leader lease while working")
        new = [b.jobs[i] for i in sorted(b.new) if b.jobs[i].state in states.ACTIVE]
        fresh = self.store.put_new_jobs(new, b.tasks) if new else set()
        usage0 = b.usage if b.usage is not None else {}

        seq = self.seq if self.seq > self.seq_written else None
        replicas = self.replicas_ack()

        def build(p):
            if seq is not None:
                writes.put_seq(p, self.k, seq)
            # A job not new in this batch was in the table, so in the active index (loaded from it).
            writes.put_jobs(p, self.k, [j for j in b.jobs.values() if j.id not in fresh], new=b.new)
            writes.index_jobs(p, self.k, [b.jobs[i] for i in sorted(fresh)])
            writes.put_specs(p, self.k, new)
            for acct in [a for a in self.usage if self.usage[a] != usage0.get(a)]:
                writes.put_usage(p, self.k, acct, *self.usage[acct])
            rests.put_changed(p, self.k, b.rests, b.rests_new)
            for c in b.charges:
                writes.put_charge(p, self.k, c, now, c.period or self.books.period(c.budget, now))
            for key in b.charged:
                writes.mark_charged(p, self.k, key)
            for jid, value in b.controls:
                writes.put_control(p, self.k, jid, value)
                dispatchq.to_runners(p, self.k, b.jobs.get(jid) or self.jobs.get(jid), jid, value)
            for a in b.alerts:
                writes.add_alert(p, self.k, a)
            for books in b.books:
                writes.put_books(p, self.k, books, now)
            if not replicas:
                self._announce_into(p, b, replies=False)
            for name, admin in b.nodes:
                writes.put_node_admin(p, self.k, name, admin)
            for reply in b.replies:
                writes.put_reply(p, self.k, *reply, push=not replicas)
            for d in b.dead:
                writes.put_dead(p, self.k, *d, now)
            for rid, runs in b.partials:
                writes.put_partial(p, self.k, rid, runs)
            by_stream: dict = {}
            for stream, eid in b.acks:
                by_stream.setdefault(stream, []).append(eid)
            for stream, eids in by_stream.items():
                self.store.ack(p, stream, *eids)

        self._write_or_undo(b, build, replicas, fresh)
        if seq is not None:
            self.seq_written = seq
        self._after_commit(b, now)

    def _write_or_undo(self, b, build, replicas: int, fresh: set) -> None:
        """_write; when it is refused (the lease lapsed while a big array was written ahead), the
        records written ahead go too: the request is done again under new ids, and they would stay
        as pending jobs of no queue that `labq show` finds. Their ids are this leader's alone (the
        sequence moved past them)."""
        try:
            self._write(b, build, replicas)
        except StalePlanError:
            try:
                if fresh:
                    writes.drop_unindexed(self.store.r, self.k, fresh)
            except faults.ERRORS as e:      # Redis away: they stay, as after a crash between the two
                log.warning("records written ahead of a refused commit stay in Redis: %s", e)
            raise

    def _write(self, b, build, replicas: int) -> None:
        """The transaction; with `replicas`, its replies and dispatch entries go out only once that
        many replicas have it: what a client was told or a node acted on survives the master's death
        (redis.min_replicas_ack). Held back, a reply is given again to the client's resend (its done
        key), and an attempt no runner saw is withdrawn after start_timeout and requeued."""
        if not replicas:
            self.store.txn(build)
            return
        self.store.txn(build, replicas)
        self.unreplicated = self.store.acked < replicas
        if not self.unreplicated:
            if getattr(self, "durable", None) is not None:
                self.durable.acknowledged(self.seq)
            self.store.txn(lambda p: self._announce_into(p, b, replies=True))   # fenced, as it was
        elif (b.replies or b.dispatch) and getattr(self.store, "doubt", ""):
            log.warning("a commit is not acknowledged (%s): %d replies and %d dispatches held back",
                        self.store.doubt, len(b.replies), len(b.dispatch))
        elif b.replies or b.dispatch:
            log.warning("only %d of %d replicas acknowledged a commit within %d ms: %d replies and %d dispatches "
                        "held back", self.store.acked, replicas, self.store.wait_ms, len(b.replies), len(b.dispatch))

    def _announce_into(self, p, b, replies: bool) -> None:
        for j in b.dispatch:     # a gang: one entry on each part's node (the runner finds its rank)
            for node, _ in j.current.parts or ((j.current.node, ()),):
                dispatchq.push(p, self.k, node, j.id, j.current.attempt, codec.env_ref(j), j.has_script)
        if replies:
            for rid, reply, *_ in b.replies:
                writes.push_reply(p, self.k, rid, reply)

    def replicas_ack(self) -> int:
        """redis.min_replicas_ack, or the `ack` of a sentinel:// URL given by the environment."""
        return max(self.cfg.min_replicas_ack, getattr(getattr(self.store, "r", None), "labq_min_ack", 0))

    def _unexpired(self, b) -> None:
        """A client gave up on a request of this batch and told its user nothing was done: commit
        none of it. The reload hands every request taken back, each then answered on its own."""
        if b.expires < self.clock():
            raise StalePlanError("a request expired before its commit; reloading, it is answered expired")

    def _after_commit(self, b, now: float) -> None:
        """What follows a written batch: the books learn it, alerts go out, big batches give memory back."""
        for books in b.books:
            if self.books.applied(books, now):
                self._use_budgets()
        for a in b.alerts:
            self.hooks.deliver(a)
            if self.metrics:
                self.metrics.alert(a)
        if b.size() >= BIG_COMMIT:
            release_memory()

    def _usage_after(self, ended, now: float) -> dict:
        """Fair-share usage with every attempt that ends in this change added (GPU-equivalent
        seconds, decayed from then on): an attempt counts once, when the record first shows its end."""
        usage = self.usage
        half = self.cfg.priority.fairshare_half_life
        for j in ended:
            a, old = j.current, self.jobs.get(j.id)
            was = old.current if old is not None else None
            if a is None or a.end_time is None or was is None or was.attempt != a.attempt or was.end_time:
                continue
            ran = a.end_time - (a.dispatch_time or a.end_time)
            if ran > 0:
                usage = fairshare.add(usage, j.account, fairshare.weight(old) * ran, now, half)
        return usage

