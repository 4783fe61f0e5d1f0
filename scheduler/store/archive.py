"""The accounting archive: ended jobs and old ledger entries, out of Redis, in SQLite.

Redis holds what the scheduler works with; every ended job would otherwise stay there for ever (in
RAM, replayed at each restart, decoded by every `labq acct`). Like SLURM's split between the
controller and slurmdbd, the scheduler moves ended jobs and ledger entries older than
`history.keep` here: first written (and committed) in SQLite, then removed from Redis. A crash
between the two leaves a row in both; the next pass writes it again (the same primary key: no
duplicate) and removes it. Readers take the union, so answers are the same before and after.

Ledger rows are chained: each row's hash covers the previous row's hash and its own fields, so an
edited or deleted archived row is detected by `labq ledger verify`.

Each job also gets a compact accounting row (store/acctrows.py) in the same transaction as its
record: `labq acct` and `labq report` read those, never the records.

The database is SQLite in WAL mode (stdlib `sqlite3`): readers on the scheduler's host do not
block the writer; or PostgreSQL (`history.url = "postgresql://…"`, psycopg 3), through the same SQL
(store/dialect.py). One schema, versioned in `meta`: 1 the records and the ledger, 2 the acct rows,
3 their `nodes` (a gang's), 4 the attempts' charges in them; an older archive gets its rows from
its records when the scheduler first opens it.
"""
import hashlib
import json
import logging
import os
import sqlite3
import time

from ..errors import UsageError
from ..jobs.model import Job
from . import acctrows, codec, dialect, totals, writes
from .reads import Specs

SCHEMA = 4
log = logging.getLogger("labq.scheduler")
# Written once for SQLite and PostgreSQL (store/dialect.py): `{serial}` is each one's sequence.
_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id BIGINT PRIMARY KEY, end_time DOUBLE PRECISION, "user" TEXT, account TEXT, state TEXT, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs (end_time);
CREATE TABLE IF NOT EXISTS ledger (
    seq {serial}, stream_id TEXT UNIQUE NOT NULL, ms BIGINT NOT NULL,
    key TEXT, fields TEXT NOT NULL, hash TEXT NOT NULL);
"""
_JOBS = ("id", "end_time", '"user"', "account", "state", "record")
_MIGRATE_PAGE = 5000          # records decoded per step of the 1 -> 2 back-fill
GENESIS = "0" * 64


def stream_ms(stream_id: str) -> int:
    return int(stream_id.split("-", 1)[0])


def row_hash(prev: str, stream_id: str, fields: dict) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{prev}|{stream_id}|{text}".encode()).hexdigest()


def default_committed(jobs) -> dict[int, int]:
    """What admission encumbered for each job's attempts, at the default rates (the scheduler passes
    its own function, with its configuration and the nodes' GPU models)."""
    from ..money.report import committed_by_job
    from ..settings.config import Config
    return committed_by_job(jobs, {}, Config())


def committed_fn(r, keys, cfg):
    """The scheduler's `committed` for Archive: its configuration's rates and the nodes' GPU models
    (what `labq acct` computes for a job still in Redis)."""
    def committed(jobs):
        from ..money.report import committed_by_job
        from .state import SchedulerStore
        models = {g.uuid: g.model for n in SchedulerStore(r, keys, "reader").nodes(time.time()) for g in n.gpus}
        return committed_by_job(jobs, models, cfg)
    return committed


class Archive:
    def __init__(self, path: str, readonly: bool = False, committed=None):
        """`path`: a SQLite file, or a postgresql:// URL (store/dialect.py). `committed(jobs) ->
        {id: micro}`: the acct rows' committed cost (default_committed)."""
        self.path, self.committed = path, committed or default_committed
        errors: tuple = (sqlite3.Error,)
        try:
            if not readonly and not dialect.is_pg(path):
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.db = dialect.Db(path, readonly)
            errors = self.db.errors
            if not readonly:
                self.db.script(_DDL)
                self._migrate()
        except errors as e:
            raise UsageError(f"history: cannot open {_shown(path)}: {str(e).strip()}") from None

    def _migrate(self) -> None:
        found = self._version()
        if found > SCHEMA:
            raise UsageError(f"history: {self.path} is schema {found}, newer than this labq ({SCHEMA})")
        if found < SCHEMA:
            # 0 -> 1: the tables of _DDL. 1 -> 2: the acct rows, from the records already archived. One
            # transaction: a crash half-way leaves version 1, and the next open starts the step again.
            self.db.script(acctrows.DDL)
            if found == 2:      # 2 -> 3: acct.nodes (a gang's node count), from the records
                self.db.execute("ALTER TABLE acct ADD COLUMN nodes INTEGER DEFAULT 1")
            if found in (1, 2, 3):  # 3 -> 4: the attempts' charges in the rows (ledger verify reads them)
                self._backfill()
            self.db.execute(dialect.upsert("meta", ("key", "value"), "key"), ("schema", str(SCHEMA)))
        self.db.commit()

    def _version(self) -> int:
        if not self.db.has_table("meta"):       # a read-only open of a database with no tables yet
            return 0
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        return int(row[0]) if row else 0

    # -- the cluster it belongs to (an id the scheduler sets in Redis at its first start) --------------
    def cluster(self) -> str:
        if not self.db.has_table("meta"):
            return ""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()
        return row[0] if row else ""

    def check_cluster(self, cluster: str | None) -> None:
        """A reader: refuse an archive another cluster wrote (its job ids are not this one's)."""
        mine = self.cluster()
        if cluster and mine and mine != cluster:
            raise UsageError(f"history: {_shown(self.path)} is the archive of cluster {mine}, and this Redis is "
                             f"cluster {cluster}: set history.url to this cluster's archive")

    def claim_cluster(self, cluster: str) -> None:
        """The scheduler: an archive without an id (new, or from before ids) becomes this cluster's;
        one of another cluster is refused (one line), never written."""
        mine = self.cluster()
        if mine and mine != cluster:
            from ..errors import RefusedError
            raise RefusedError(f"history: {_shown(self.path)} is the archive of cluster {mine}, and this Redis "
                               f"is cluster {cluster}: give this cluster its own "
                               "history.url (or move the file aside); if it is the same cluster, restored from a "
                               f"backup older than its id, set it back: redis-cli SET <prefix>:cluster {mine}")
        if not mine:
            self.db.execute(dialect.upsert("meta", ("key", "value"), "key"), ("cluster", cluster))
            self.db.commit()

    def _backfill(self) -> None:
        last = -1
        while True:
            recs = self.db.execute("SELECT id, record FROM jobs WHERE id > ? ORDER BY id LIMIT ?",
                                   (last, _MIGRATE_PAGE)).fetchall()
            if not recs:
                return
            self._put_rows([codec.loads(rec) for _, rec in recs])
            last = recs[-1][0]

    def _put_rows(self, jobs: list[Job]) -> None:
        cost = self.committed(jobs)
        self.db.executemany(dialect.upsert("acct", acctrows.SQL_NAMES),
                            [acctrows.row(j, cost.get(j.id, 0)) for j in jobs])

    # -- writing (the scheduler) -------------------------------------------------------------------
    def put_jobs(self, jobs: list[Job]) -> None:
        self.db.executemany(dialect.upsert("jobs", _JOBS),
                            [(j.id, j.end_time, j.user, j.account, j.state, codec.dumps(j, share=False))
                             for j in jobs])
        self._put_rows(jobs)            # the same transaction: a row never exists without its record
        self.db.commit()

    def put_ledger(self, entries: list[tuple[str, dict]]) -> None:
        """Append (stream id, fields) in stream order; ids already archived are skipped."""
        last = self.db.execute("SELECT hash, stream_id FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        prev = last[0] if last else GENESIS
        have = {r[0] for r in self.db.execute(
            f"SELECT stream_id FROM ledger WHERE stream_id IN ({','.join('?' * len(entries))})",
            [i for i, _ in entries])} if entries else set()
        rows = []
        for sid, fields in entries:
            if sid in have:
                continue
            prev = row_hash(prev, sid, fields)
            rows.append((sid, stream_ms(sid), fields.get("key", ""), json.dumps(fields, sort_keys=True), prev))
        self.db.executemany("INSERT INTO ledger (stream_id, ms, key, fields, hash) VALUES (?, ?, ?, ?, ?)", rows)
        self.db.commit()

    def purge(self, before: float) -> int:
        """Delete archived jobs that ended before `before` (history.purge_after). Ledger rows stay:
        they are the proof of every balance."""
        n = self.db.execute("DELETE FROM jobs WHERE end_time < ?", (before,)).rowcount
        self.db.execute("DELETE FROM acct WHERE end_time < ?", (before,))
        self.db.commit()
        return n

    # -- reading -------------------------------------------------------------------------------------
    def jobs(self, ids) -> dict[int, Job]:
        ids = [int(i) for i in ids]
        out: dict[int, Job] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            for (rec,) in self.db.execute(f"SELECT record FROM jobs WHERE id IN ({','.join('?' * len(part))})", part):
                j = codec.loads(rec)
                out[j.id] = j
        return out

    def ended(self, since: float, until: float) -> list[Job]:
        q = "SELECT record FROM jobs WHERE end_time >= ? AND end_time <= ? ORDER BY end_time"
        return [codec.loads(rec) for (rec,) in self.db.execute(q, (since, until if until != float("inf") else 1e300))]

    def acct(self, since: float, until: float, user: str | None = None, account: str | None = None,
             columns=None) -> list:
        """Ended jobs as acct/report read them: AcctJob rows; from an archive of an older schema (a
        reader before the scheduler migrated it), the records."""
        if self._version() < SCHEMA:
            return [j for j in self.ended(since, until)
                    if (not user or j.user == user) and (not account or j.account == account)]
        q, args = acctrows.select(since, until, user, account, columns=columns)
        return list(map(acctrows.AcctJob._make, self.db.execute(q, args)))

    def acct_table(self, since: float, until: float, user: str | None = None, account: str | None = None) -> list:
        """What acct's table prints of the jobs that ended in [since, until]: tuples of
        acctrows.TABLE_ORDER; from an archive of an older schema, the records (Jobs)."""
        if self._version() < SCHEMA:
            return self.acct(since, until, user, account)
        q, args = acctrows.select(since, until, user, account, only=acctrows.TABLE_ORDER)
        return self.db.execute(q, args).fetchall()

    def acct_iter(self, since: float, until: float):
        """The acct rows (tuples in acctrows.NAMES order) that ended in [since, until], oldest
        first, read as they are written out (`labq admin export` over years of jobs)."""
        if self._version() < SCHEMA:
            old = self.ended(since, until)
            cost = self.committed(old)
            yield from (acctrows.row(j, cost.get(j.id, 0)) for j in old)
            return
        q, args = acctrows.select(since, until)
        yield from self.db.execute(q, args)

    def ledger(self) -> list[tuple[str, dict]]:
        return [(sid, json.loads(f)) for sid, f in self.db.execute("SELECT stream_id, fields FROM ledger ORDER BY seq")]

    def ledger_window(self, lo_ms: int, hi_ms: int):
        """(stream id, fields) of the archived entries written in [lo_ms, hi_ms] (the stream id's
        time), in chain order, read as they are written out (`labq admin export --what ledger`)."""
        q = "SELECT stream_id, fields FROM ledger WHERE ms >= ? AND ms <= ? ORDER BY seq"
        return ((sid, json.loads(f)) for sid, f in self.db.execute(q, (lo_ms, hi_ms)))

    def keys(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT DISTINCT key FROM ledger WHERE key != ''")}

    def broken_chain(self, anchor: dict | None = None) -> list[str]:
        """Rows whose hash does not follow from the row before and their own fields; and, given the
        `anchor` kept outside the archive (Redis's, from the last archive pass), a chain whose row
        there is not the one anchored: edited rows whose chain was then recomputed."""
        prev, problems, seen = GENESIS, [], None
        want_sid = (anchor or {}).get("sid")
        for n, (sid, f, h) in enumerate(self.db.execute("SELECT stream_id, fields, hash FROM ledger ORDER BY seq"), 1):
            want = row_hash(prev, sid, json.loads(f))
            if want != h:
                problems.append(f"archived ledger entry {sid}: its hash does not match (edited or reordered)")
            if sid == want_sid:
                seen = (h, n)
            prev = h
        if anchor and seen != (anchor.get("hash"), anchor.get("rows")):
            problems.append(f"archived ledger: the chain at entry {want_sid} is not the one anchored at the last archive "
                            f"pass ({'missing' if seen is None else 'another hash or position'}): archived rows were "
                            "edited and the chain recomputed, or removed")
        return problems

    def head(self) -> dict | None:
        """The chain's head: {sid, hash, rows}; None while the ledger table is empty."""
        row = self.db.execute("SELECT stream_id, hash, seq FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        if row is None:
            return None
        rows = self.db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
        return {"sid": row[0], "hash": row[1], "rows": int(rows)}

    def close(self) -> None:
        self.db.close()


def _shown(where: str) -> str:
    """A database named in a message: a URL without its password."""
    if not dialect.is_pg(where) or "@" not in where:
        return where
    head, _, tail = where.partition("@")
    scheme, _, cred = head.partition("://")
    return f"{scheme}://{cred.split(':')[0]}@{tail}"


class Archiver:
    """The scheduler's archiving pass: at most `batch` jobs and `batch` ledger entries at a time,
    at most once every `every` seconds, so the tick stays short while a backlog drains."""

    def __init__(self, r, keys, archive, keep: float, purge_after: float | None = None,
                 batch: int = 1000, every: float = 10.0, committed=None, pass_s: float | None = None,
                 cluster: str = ""):
        """`archive`: an Archive, or its path (opened, and created, when there is first something to move: a
        scheduler that never archives leaves no file behind). `committed`: Archive's. `pass_s`: how long one
        pass may hold the scheduler's loop; the batch (`size`) then shrinks, down to 50, or grows, to fit."""
        self.r, self.k, self._archive, self.keep = r, keys, archive, keep
        self.purge_after, self.batch, self.every, self.committed = purge_after, batch, every, committed
        self.pass_s, self.size, self.next = pass_s, batch, float("-inf")
        self.cluster = cluster      # this Redis's id (keys.cluster): the archive must be this cluster's
        # A test's hook (tests/e2e/test_archive_kill.py): for each file `pause-STEP` in this directory, the pass
        # says `STEP-committed` (SQLite), then waits before its Redis deletes for a kill -9 there (or a file `go`).
        self.pause_dir = os.environ.get("LABQ_TEST_ARCHIVE_PAUSE", "")

    def step(self, now: float) -> tuple[int, int]:
        """(jobs, ledger entries) moved out of Redis by this call."""
        if now < self.next:
            return 0, 0
        started = time.monotonic()
        moved = self._jobs(now - self.keep), self._ledger(now - self.keep)
        full = max(moved) >= self.size
        if full and self.pass_s:
            took = max(time.monotonic() - started, 1e-3)
            self.size = max(min(50, self.batch), min(self.batch, int(self.size * self.pass_s / took)))
        # A full batch means more is waiting: come back next tick rather than in `every` seconds.
        self.next = now if full else now + self.every
        if self.purge_after is not None and (db := self.existing()) is not None:
            db.purge(now - self.purge_after)
        return moved

    def existing(self) -> Archive | None:
        """The archive for a read, None where nothing was archived yet (a read creates no file)."""
        a = self._archive      # a path: opened once there is something there (or a PostgreSQL URL)
        return None if isinstance(a, str) and not dialect.is_pg(a) and not os.path.exists(a) else self.archive

    @property
    def archive(self) -> Archive:
        if isinstance(self._archive, str):
            db = Archive(self._archive, committed=self.committed)
            if self.cluster:
                db.claim_cluster(self.cluster)      # before keeping it: another cluster's is refused each time
            self._archive = db
        return self._archive

    def publish(self) -> None:
        """At start, an archive already there (its cluster checked: another's is refused)."""
        p = self.r.pipeline(transaction=False)
        self.published(p)
        p.execute()

    def published(self, p) -> None:
        """In the pipeline that removes archived rows from Redis: clients learn there is an archive,
        and where (they never guess its path: store/history.History)."""
        p.set(self.k.archive, _shown(self.archive.path))

    def _jobs(self, before: float) -> int:
        ids = self.r.zrangebyscore(self.k.history, "-inf", before, start=0, num=self.size)
        if not ids:
            return 0
        raws = self.r.mget([self.k.job(int(i)) for i in ids])
        specs = Specs(self.r, self.k)       # the argv and script kept apart in Redis go into the record
        jobs = [codec.loads(raw, specs, specs.script) for raw in raws if raw]
        self.archive.put_jobs(jobs)                      # committed in SQLite first ...
        self._paused("jobs")
        p = self.r.pipeline(transaction=True)            # ... then gone from Redis
        spool: dict[str, list[int]] = {}
        for j in jobs:      # a gang's attempt has a status hash and a spool per part (node rank)
            p.delete(self.k.job(j.id), *[self.k.part(j.id, a.attempt, r) for a in j.attempts
                                          for r in range(max(1, len(a.parts)))])
            for node in {n for a in j.attempts for n, _ in (a.parts or ((a.node, ()),)) if n}:
                spool.setdefault(node, []).append(j.id)
        for node, jids in spool.items():      # each node then drops their scripts and checkpoints
            p.sadd(self.k.node_purge(node), *jids)
        p.zrem(self.k.history, *ids)
        p.hdel(self.k.acct_rows, *ids)                   # their acct rows (acctrows.redis_row) with them
        totals.drop(self.r, self.k, p, ids)              # and what `labq report`'s totals held of them
        self.published(p)
        p.execute()
        writes.drop_specs(self.r, self.k, {(codec.env_ref(j), j.array_count or 1) for j in jobs})
        return len(ids)

    def _ledger(self, before: float) -> int:
        got = self.r.xrange(self.k.ledger, "-", int(before * 1000), count=self.size)
        if not got:
            return 0
        self.archive.put_ledger(got)
        self._paused("ledger")
        keys = {f.get("key") for _, f in got if f.get("key")}
        head = self.archive.head()
        p = self.r.pipeline(transaction=True)
        if head is not None:
            # The chain's head, kept outside the archive (here and in the log): a row edited in the
            # archive and the chain recomputed after it no longer ends where it was anchored.
            p.set(self.k.ledger_anchor, json.dumps(head))
            log.info("ledger archived up to %s: chain head %s (%d rows)", head["sid"], head["hash"], head["rows"])
        p.xdel(self.k.ledger, *[i for i, _ in got])
        if keys:
            p.srem(self.k.ledger_keys, *keys)
        self.published(p)
        p.execute()
        return len(got)

    def _paused(self, step: str) -> None:
        if not self.pause_dir or not os.path.exists(os.path.join(self.pause_dir, f"pause-{step}")):
            return
        open(os.path.join(self.pause_dir, f"{step}-committed"), "w").close()   # tells the test where we stand
        go = os.path.join(self.pause_dir, "go")
        while not os.path.exists(go):      # the test kills the process here (or lets it go on)
            time.sleep(0.05)
