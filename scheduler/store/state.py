"""The scheduler's view of Redis: loading state, the leader lease, and fenced transactions.

Every write the scheduler makes goes through `txn()`: WATCH the leader key, check that this
scheduler still holds it, then MULTI/EXEC. A scheduler that lost its lease (paused, partitioned)
therefore cannot write anything, and a crash at any instant leaves either all or none of a change.
"""
import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import redis

from ..errors import StalePlanError
from ..jobs.model import Job, Node
from ..jobs.states import ACTIVE
from . import acctrows, conn, noderows, requestq, rests as rest_rows, statrows, totals, wire, writes
from .conn import ERRORS
from .figures import Figures, entry_hash
from .keys import CONSUMER, GROUP, Keys
from .nodeside import NodeSide
from .ranking import Published
from .reads import Reader, load_job, load_jobs
from .requestq import RequestList

log = logging.getLogger("labq.scheduler")


class SchedulerStore(RequestList):
    wait_ms = conn.WAIT_MS    # how long txn() waits for the replicas (commit.py's warning says so)

    def __init__(self, r: redis.Redis, keys: Keys, me: str):
        self.r, self.k, self.me = r, keys, me
        self.lease_lock = threading.Lock()  # a renewal's PEXPIRE between a txn's WATCH and EXEC would abort it
        self.acked = 0     # replicas that acknowledged the last replicated txn (WAIT's answer)
        self.doubt = ""    # why the sentinels did not confirm the master of that txn (conn.Keep.wait)
        self.held: dict[str, bytes] = {}     # entry id -> the bytes of each request taken, until acknowledged
        self._spent: dict[str, int] | None = None   # the spent hash as read since the last transaction
        self._node_names: list[str] = []     # the registered nodes as last read (noderows.read)
        self._known: Figures | None = None   # Redis's figures as read, then as this leader's commits moved them
        self.nodeside = NodeSide(r, keys)    # claims, withdrawals, health signs (daemon/events.py)
        self.ranking = Published(keys, me)   # `labq prio`'s ranking, published (daemon/ranking.py)

    # -- leader lease ------------------------------------------------------------------------
    def acquire_leader(self, ttl_s: float) -> str | bool:
        """Take or renew the lease: "taken" (it was free), "renewed" (it was ours), or False while
        another scheduler holds it."""
        self.unwatch()          # the lease lock is its; a renewal's PEXPIRE would fail its commit anyway
        with self.lease_lock:
            got = self._acquire_leader(ttl_s)
        if got == "taken":          # another leader may have written meanwhile
            self._spent = self._known = None
        return got

    @contextmanager
    def keeping_lease(self, ttl_s: float, every_s: float):
        """Renew the lease (only while it is still ours) every `every_s` from a thread for as long as
        the block runs: a state reload that outlasts the lease must not lose it (issue 35: each
        reload took longer than the lease, and the leader reloaded forever). Yields a Kept whose
        `lost` says why the lease was not ours at some point (the block's work is then stale)."""
        kept = Kept(time.monotonic())
        stop = threading.Event()

        def renew():
            while not stop.wait(every_s):
                try:
                    got = self.acquire_leader(ttl_s)
                except ERRORS as e:          # the block's own reads meet the same Redis: they say so
                    log.warning("renewing the leader lease during the reload: %s", e)
                    continue
                if got != "renewed":
                    kept.lost = ("the leader lease lapsed during the reload" if got else
                                 "another scheduler took the leader lease during the reload")
                    return
                kept.renewed = time.monotonic()
        t = threading.Thread(target=renew, name="labq-lease", daemon=True)
        t.start()
        try:
            yield kept
        finally:
            stop.set()
            t.join()

    def _acquire_leader(self, ttl_s: float) -> str | bool:
        px = int(ttl_s * 1000)
        if self.r.set(self.k.leader, self.me, nx=True, px=px):
            return "taken"
        # Renew only if it is still ours; a Lua-free check-and-set under WATCH.
        with self.r.pipeline() as p:
            try:
                p.watch(self.k.leader)
                if p.get(self.k.leader) != self.me:
                    p.reset()
                    return False
                p.multi()
                p.pexpire(self.k.leader, px)
                p.execute()
                return "renewed"
            except redis.WatchError:
                return False

    def leader(self) -> str | None:
        """Who holds the leader lease now (None: nobody): as the loop's wait for a wake-up read it
        the moment it returned, where that was just now (requestq.woken), else read."""
        woke = self.woken("leader")
        if woke is not None:
            return woke[0]
        got = wire.call(self.r, [("GET", self.k.leader)])
        return got[0] if got is not None else self.r.get(self.k.leader)

    def release_leader(self) -> None:
        self.unwatch()
        with self.lease_lock, self.r.pipeline() as p:
            try:
                p.watch(self.k.leader)
                if p.get(self.k.leader) == self.me:
                    p.multi()
                    p.delete(self.k.leader)
                    p.execute()
            except redis.WatchError:
                return   # another scheduler took the lease meanwhile: it is not ours to release

    def txn(self, build, replicas: int = 0) -> list:
        """MULTI `build(pipe)`, fenced by the leader lease; then WAIT for `replicas` (self.acked: how many)."""
        self._spent = None      # written or not, read afresh after it
        known, self._known = self._known, None     # unknown unless it commits (then `wrote` says what moved)
        # `taken` watched too: acknowledged by its length (ack), it must not change under us.
        with self.fenced() as (p, keep, holder):
            try:
                if holder != self.me:
                    raise StalePlanError("this scheduler no longer holds the leader lease")
                p.multi()
                build(p)
                got = wire.transaction(p, read=False)      # no caller reads a commit's replies
            except redis.WatchError:
                raise StalePlanError("the leader lease changed during a transaction") from None
            self._known = known
            self.acked = keep.wait(replicas, conn.WAIT_MS) if replicas else 0
            self.doubt = keep.doubt
            if keep.stale:      # nothing of an old master's is acknowledged: reload from the one Sentinel names
                self.r.connection_pool.disconnect()
                raise StalePlanError(f"a commit was not acknowledged: {keep.doubt}")
            return got

    def rebuild_stat_rows(self, jobs, rests=()) -> None:
        """The `stat` rows of the active jobs and the ids of those that ran (Keys.ran), afresh from their
        records (statrows.py), and of the held arrays' `rests` (store/rests.py): run when this scheduler
        becomes leader, so rows of an older shape or an older labq are replaced."""
        jobs = list(jobs)       # read twice: the rows and Keys.ran
        rows = [(str(j.id), statrows.dumps(j)) for j in jobs]
        # The hashes of older row shapes (keys.ROWS_VERSION): nothing reads them once this one is
        # written, and they held a row for every job active when labq was upgraded.
        base, _, version = self.k.stat_rows.rpartition(":v")
        older = [f"{base}:v{v}" for v in range(1, int(version))]

        ended = self.r.zrange(self.k.history, 0, -1)      # `labq report`'s totals afresh (store/totals.py)

        def build(p):
            p.delete(self.k.stat_rows, *self.ranking.keys(), *older)    # and an old ranking
            writes.put_ran(p, self.k, jobs, self.me)
            totals.rebuild(p, self.k, ended, self.me)
            for i in range(0, len(rows), 10_000):
                p.hset(self.k.stat_rows, mapping=dict(rows[i:i + 10_000]))
            for r in rests:
                p.hset(self.k.rests, str(r.array_id), rest_rows.row(r))
        self.txn(build)
        self.ranking.dropped()

    def acct_rows_missing(self) -> list[int]:
        """Ended jobs in Redis that have no acct row (acctrows.redis_row: they ended under an older
        labq), oldest end first, for backfill_acct_rows; rows whose job is no longer in Redis (an
        older labq's archiver left them) are dropped here. As many rows as ended jobs: none missing
        (rows of gone jobs and as many jobs without one, after a downgrade and back, would go
        unnoticed: those jobs' records are then read, and the rows are memory only)."""
        n_rows, n_ended = self.r.pipeline(transaction=False).hlen(self.k.acct_rows).zcard(self.k.history).execute()
        if n_rows == n_ended:       # the usual start: every ended job has its row (a count, not two lists)
            return []
        ids, have = self.r.zrange(self.k.history, 0, -1), set(self.r.hkeys(self.k.acct_rows))
        gone = sorted(have.difference(ids))
        if gone:
            def drop(p):
                for i in range(0, len(gone), 10_000):
                    p.hdel(self.k.acct_rows, *gone[i:i + 10_000])
            self.txn(drop)
        return [int(i) for i in ids if i not in have]

    def backfill_acct_rows(self, ids: list[int], batch: int = 2000) -> list[int]:
        """The acct rows of the first `batch` of `ids`, made from their records (a job archived
        meanwhile has none: skipped), in one fenced transaction; returns the rest."""
        rows = {str(j.id): acctrows.redis_row(j) for j in load_jobs(self.r, self.k, ids[:batch])
                if j.state not in ACTIVE}
        if rows:
            self.txn(lambda p: p.hset(self.k.acct_rows, mapping=rows))
        return ids[batch:]

    def fold_report(self) -> bool:
        """store/totals.fold: a batch of ended jobs into `labq report`'s cells; True where more wait."""
        return totals.fold(self.r, self.k, self.txn)

    # -- loading -------------------------------------------------------------------------------
    def reader(self, history=None) -> Reader:
        """The read side over this connection (`history`: the archive ended jobs move to)."""
        return Reader(self.r, self.k, history)

    def active_jobs(self) -> dict[int, Job]:
        return {j.id: j for j in load_jobs(self.r, self.k, self.r.zrange(self.k.active, 0, -1))}

    def job(self, jid: int) -> Job | None:
        """One job record (an ended job, which the scheduler does not keep in memory)."""
        return load_job(self.r, self.k, jid)

    def jobs(self, ids) -> list[Job]:
        return load_jobs(self.r, self.k, ids)

    def job_seq(self) -> int:
        return int(self.r.get(self.k.seq) or 0)

    def nodes(self, now: float) -> tuple[Node, ...]:
        woke = self.woken("nodes")      # read with the wake-up just now: (the names asked, the replies)
        if woke is not None and woke[0] != self._node_names:
            woke = None
        self._node_names, got = noderows.read(self.r, self.k, now, self._node_names, woke and woke[1])
        return got

    def spent(self) -> dict[str, int]:
        """The spent hash, read once between transactions: only the leader's transactions write it
        (writes.put_charge), and every submit asks (a round trip per request where budgets are set)."""
        if self._spent is None:
            self._spent = {k: int(v) for k, v in self.r.hgetall(self.k.spent()).items()}
        return dict(self._spent)

    def books(self) -> dict:
        """The budget state the scheduler keeps in Redis: overrides, limits, period labels, fired alerts."""
        p = self.r.pipeline(transaction=False)
        p.hgetall(self.k.overrides)
        p.hgetall(self.k.limits)
        p.hgetall(self.k.periods)
        p.smembers(self.k.alerts_fired)
        o, lim, per, fired = p.execute()
        return {"overrides": o, "limits": lim, "periods": per, "fired": set(fired)}

    def known_keys(self, keys) -> set[str]:
        """Which of `keys` are idempotency keys of ledger entries already."""
        keys = list(keys)
        found = set()
        for i in range(0, len(keys), 1000):
            chunk = keys[i:i + 1000]
            found |= {k for k, hit in zip(chunk, self.r.smismember(self.k.ledger_keys, chunk)) if hit}
        return found

    def charged(self, key: str) -> bool:
        return bool(self.r.sismember(self.k.ledger_keys, key))

    def attempt_heartbeats(self, attempts) -> list[tuple[float | None, float | None, float | None]]:
        """(last heartbeat, newest checkpoint file the runner saw, when a runner claimed it) of each
        (job, attempt); None where there is none yet (a withdrawal writes no claimed_at)."""
        p = self.r.pipeline(transaction=False)
        for jid, n in attempts:
            p.hmget(self.k.attempt(jid, n), ["hb", "ckpt", "claimed_at"])
        return [(_float(hb), _float(ckpt), _float(at)) for hb, ckpt, at in p.execute()]

    # -- durability (scheduler/daemon/durability.py) -------------------------------------------------
    def aof_enabled(self) -> bool | None:
        """INFO persistence, readable where an ACL denies CONFIG GET; None when even that is denied."""
        try:
            return str(self.r.info("persistence").get("aof_enabled", 0)) == "1"
        except redis.ResponseError:
            return None

    def aof_fsync(self) -> str | None:
        """appendfsync ("always", "everysec", "no"); None where CONFIG GET is denied."""
        try:
            return str(self.r.config_get("appendfsync").get("appendfsync") or "") or None
        except redis.ResponseError:
            return None

    def figures(self) -> Figures:
        cmds = [("GET", self.k.seq), ("XINFO", "STREAM", self.k.ledger), ("XREVRANGE", self.k.ledger, "+", "-", "COUNT", 1)]
        got = wire.call(self.r, cmds, raise_on_error=False)
        if got is None:
            p = self.r.pipeline(transaction=False)
            for cmd in cmds:
                p.execute_command(*cmd)
            got = p.execute(raise_on_error=False)
        else:     # as redis-py's callbacks make them: the stream's info a dict, the entry's fields a dict
            got[1] = got[1] if isinstance(got[1], Exception) else wire.hash_of(got[1])
            got[2] = [(x[0], wire.hash_of(x[1])) for x in got[2]] if isinstance(got[2], list) else got[2]
        seq, info, last = got
        if isinstance(info, Exception):   # no ledger yet
            info = {}
        count = info.get("entries-added", info.get("length", 0)) or 0
        lid, fields = last[0] if isinstance(last, list) and last else ("", {})
        self._known = Figures(int(seq or 0), int(count), lid, entry_hash(fields) if lid else "")
        return self._known

    def figures_now(self) -> Figures:
        """The figures as read, then moved by this leader's commits (`wrote`: a tick that adds nothing
        to the ledger moves only the id sequence it wrote), read where not known (a round trip a tick)."""
        return self._known if self._known is not None else self.figures()

    def wrote(self, seq: int | None, ledger: bool) -> None:
        """A commit went in: it wrote the job id sequence `seq` (None: not), and `ledger` entries or not."""
        if self._known is not None:
            self._known = None if ledger else self._known if seq is None else replace(self._known, last_job_id=seq)

    def cluster_id(self) -> str:
        """This cluster's id: made at the first start of a scheduler on this Redis, then kept."""
        import uuid
        self.r.set(self.k.cluster, uuid.uuid4().hex[:16], nx=True)
        v = self.r.get(self.k.cluster)
        return v.decode() if isinstance(v, bytes) else v

    def record_state_file(self, path: str) -> None:
        self.r.set(self.k.state_file, path)

    def recorded_state_file(self) -> str:
        v = self.r.get(self.k.state_file) or ""
        return v.decode() if isinstance(v, bytes) else v

    def ledger_entry_is(self, eid: str, digest: str) -> bool | None:
        """Is ledger entry `eid` still there with fields hashing to `digest`? None when it was
        trimmed away (archived: older than the oldest entry kept), which is no loss."""
        if not eid:
            return None
        got = self.r.xrange(self.k.ledger, eid, eid)
        if got:
            return entry_hash(got[0][1]) == digest
        first = self.r.xrange(self.k.ledger, count=1)
        key = lambda e: tuple(int(x) for x in e.split("-"))   # noqa: E731
        return None if first and key(first[0][0]) > key(eid) else False

    # -- streams -------------------------------------------------------------------------------
    def ensure_group(self, stream: str) -> None:
        try:
            self.r.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def advance_seq(self, by: int) -> int:
        """Take `by` job ids from Redis at once (INCRBY): the new end of the sequence."""
        self._known, known = None, self._known
        got = self.r.incrby(self.k.seq, by)
        self._known = known and replace(known, last_job_id=got)
        return got

    def put_new_jobs(self, jobs, tasks=None) -> set[int]:
        """A big change's new records, written ahead of its transaction (writes.put_new_jobs)."""
        return writes.put_new_jobs(self.r, self.k, jobs, tasks)

    def read_group(self, streams: list[str], pending: bool, count: int = 500):
        """Entries of the scheduler's group: ones delivered but not acknowledged (after a restart)
        when `pending`, else new ones. Yields (stream, entry_id, fields): fields as the raw bytes
        anyone wrote (decode.fields decodes and checks them), None for an entry trimmed while pending."""
        if not streams:
            return []
        ident = "0" if pending else ">"
        return requestq.entries(self.r.execute_command("XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", count,
                                                       "STREAMS", *streams, *[ident] * len(streams), NEVER_DECODE=True))

    def partial(self, rid: str) -> list:      # runs of ids a dead leader committed of cancel `rid`
        text = self.r.get(self.k.partial(rid))
        return json.loads(text) if text else []

    def dead_letters(self) -> int:
        """Entries in the dead-letter stream (labq admin dead; the metrics gauge)."""
        return self.r.xlen(self.k.dead)

    def claim_credentials(self, claims: list[tuple[str, str]], ttl: float) -> list:
        """Record that inbox entry `entry` uses the credential `key`, for each (key, entry): "new",
        "same" (this entry claimed it before a restart) or None (another entry did: a replay).
        Two round trips for a whole batch."""
        p = self.r.pipeline(transaction=False)
        for key, entry in claims:
            p.set(self.k.credential(key), entry, nx=True, ex=max(1, int(2 * ttl)))
        won = p.execute()
        p = self.r.pipeline(transaction=False)
        for (key, _), ok in zip(claims, won):
            if not ok:
                p.get(self.k.credential(key))
        holders = iter(p.execute())
        return ["new" if ok else ("same" if next(holders) == entry else None) for (_, entry), ok in zip(claims, won)]



def _float(v) -> float | None:
    try:
        return float(v) if v else None
    except ValueError:
        return None


class Kept:
    """What keeping_lease saw: when it last renewed (monotonic), and why the lease was lost, if it was."""

    def __init__(self, renewed: float):
        self.renewed, self.lost = renewed, ""

