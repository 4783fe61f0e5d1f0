"""The accounting archive: ended jobs and old ledger entries, out of Redis, in SQLite.

Redis holds what the scheduler works with; every ended job would otherwise stay there for ever (in
RAM, replayed at each restart, decoded by every `labq acct`). Like SLURM's split between the
controller and slurmdbd, the scheduler moves ended jobs and ledger entries older than
`history.keep` here: first written (and committed) in SQLite, then removed from Redis. A crash
between the two leaves a row in both; the next pass writes it again (the same primary key: no
duplicate) and removes it. Readers take the union, so answers are the same before and after.

Ledger rows are chained: each row's hash covers the previous row's hash and its own fields, so an
edited or deleted archived row is detected by `labq ledger verify`.

The database is SQLite in WAL mode (stdlib `sqlite3`): readers on the scheduler's host do not
block the writer. One schema, versioned in `meta`.
"""
import hashlib
import json
import os
import sqlite3

from ..errors import UsageError
from ..model import Job
from . import codec
from .history import default_path, path_of  # noqa: F401 - one place for the path rules

SCHEMA = 1
_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, end_time REAL, user TEXT, account TEXT, state TEXT, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs (end_time);
CREATE TABLE IF NOT EXISTS ledger (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, stream_id TEXT UNIQUE NOT NULL, ms INTEGER NOT NULL,
    key TEXT, fields TEXT NOT NULL, hash TEXT NOT NULL);
"""
GENESIS = "0" * 64


def stream_ms(stream_id: str) -> int:
    return int(stream_id.split("-", 1)[0])


def row_hash(prev: str, stream_id: str, fields: dict) -> str:
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{prev}|{stream_id}|{text}".encode()).hexdigest()


class Archive:
    def __init__(self, path: str, readonly: bool = False):
        self.path = path
        try:
            if readonly:
                self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
            else:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self.db = sqlite3.connect(path, timeout=30)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.executescript(_DDL)
                self._migrate()
        except sqlite3.Error as e:
            raise UsageError(f"history: cannot open {path}: {e}") from None

    def _migrate(self) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA:
            raise UsageError(f"history: {self.path} is schema {found}, newer than this labq ({SCHEMA})")
        if found < SCHEMA:      # 0 -> 1: the tables above; later versions add their steps here
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            self.db.commit()

    # -- writing (the scheduler) -------------------------------------------------------------------
    def put_jobs(self, jobs: list[Job]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?)",
                            [(j.id, j.end_time, j.user, j.account, j.state, codec.dumps(j)) for j in jobs])
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

    def ledger(self) -> list[tuple[str, dict]]:
        return [(sid, json.loads(f)) for sid, f in self.db.execute("SELECT stream_id, fields FROM ledger ORDER BY seq")]

    def keys(self) -> set[str]:
        return {k for (k,) in self.db.execute("SELECT DISTINCT key FROM ledger WHERE key != ''")}

    def broken_chain(self) -> list[str]:
        """Rows whose hash does not follow from the row before and their own fields."""
        prev, problems = GENESIS, []
        for sid, f, h in self.db.execute("SELECT stream_id, fields, hash FROM ledger ORDER BY seq"):
            want = row_hash(prev, sid, json.loads(f))
            if want != h:
                problems.append(f"archived ledger entry {sid}: its hash does not match (edited or reordered)")
            prev = h
        return problems

    def close(self) -> None:
        self.db.close()


class Archiver:
    """The scheduler's archiving pass: at most `batch` jobs and `batch` ledger entries at a time,
    at most once every `every` seconds, so the tick stays short while a backlog drains."""

    def __init__(self, r, keys, archive, keep: float, purge_after: float | None = None,
                 batch: int = 1000, every: float = 10.0):
        """`archive`: an Archive, or its path (opened, and created, when there is first something
        to move: a scheduler that never archives leaves no file behind)."""
        self.r, self.k, self._archive, self.keep = r, keys, archive, keep
        self.purge_after, self.batch, self.every = purge_after, batch, every
        self.next = float("-inf")

    def step(self, now: float) -> tuple[int, int]:
        """(jobs, ledger entries) moved out of Redis by this call."""
        if now < self.next:
            return 0, 0
        moved = self._jobs(now - self.keep), self._ledger(now - self.keep)
        # A full batch means more is waiting: come back next tick rather than in `every` seconds.
        self.next = now if max(moved) >= self.batch else now + self.every
        if self.purge_after is not None and (not isinstance(self._archive, str) or os.path.exists(self._archive)):
            self.archive.purge(now - self.purge_after)
        return moved

    @property
    def archive(self) -> Archive:
        if isinstance(self._archive, str):
            self._archive = Archive(self._archive)
        return self._archive

    def _jobs(self, before: float) -> int:
        ids = self.r.zrangebyscore(self.k.history, "-inf", before, start=0, num=self.batch)
        if not ids:
            return 0
        raws = self.r.mget([self.k.job(int(i)) for i in ids])
        jobs = [codec.loads(raw) for raw in raws if raw]
        self.archive.put_jobs(jobs)                      # committed in SQLite first ...
        p = self.r.pipeline(transaction=True)            # ... then gone from Redis
        for j in jobs:
            p.delete(self.k.job(j.id), *[self.k.attempt(j.id, a.attempt) for a in j.attempts])
        p.zrem(self.k.history, *ids)
        p.execute()
        return len(ids)

    def _ledger(self, before: float) -> int:
        got = self.r.xrange(self.k.ledger, "-", int(before * 1000), count=self.batch)
        if not got:
            return 0
        self.archive.put_ledger(got)
        keys = {f.get("key") for _, f in got if f.get("key")}
        p = self.r.pipeline(transaction=True)
        p.xdel(self.k.ledger, *[i for i, _ in got])
        if keys:
            p.srem(self.k.ledger_keys, *keys)
        p.execute()
        return len(got)

