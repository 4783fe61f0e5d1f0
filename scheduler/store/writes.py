"""Writes the scheduler adds to a transaction pipeline: job records, ledger entries, replies."""
import json
import time
from dataclasses import replace
from operator import attrgetter

from .. import states
from ..ledger import spent_field
from . import codec, resp, statrows
from .keys import Keys

REPLY_TTL = 600
DONE_TTL = 86400
CONTROL_TTL = 7 * 86400
ALERTS_MAXLEN = 100_000


def put_jobs(p, k: Keys, jobs) -> None:
    """Job records, their `stat` rows (statrows.py) and the active/history indexes, one MSET, ZADD,
    ZREM and HSET for the lot (a 100,000-task array is a few commands, not 400,000)."""
    active, ended, stale, records, rows = {}, {}, [], {}, {}
    for job in jobs:
        records[k.job(job.id)] = codec.dumps(job)
        if job.env and codec.env_ref(job) == job.id:     # once per submission (an array's first task)
            records[k.job_env(job.id)] = codec.env_json(job)
        if job.state in states.ACTIVE:
            active[str(job.id)] = job.id
            rows[str(job.id)] = statrows.dumps(job)
            if job.state == states.PENDING and job.attempts:
                # Requeued: the control that stopped the last attempt (cancel for labq requeue,
                # preempt) must not stop the next one before it starts.
                stale.append(k.control(job.id))
        else:
            ended[str(job.id)] = job.end_time or time.time()
            stale.append(k.control(job.id))
    if records:   # one MSET: a command per record cost more to pack and parse than to run
        p.mset(records)
    if active:
        p.zadd(k.active, active)
        p.hset(k.stat_rows, mapping=rows)
    if ended:
        p.zrem(k.active, *ended)
        p.hdel(k.stat_rows, *ended)
        p.zadd(k.history, ended)
    if stale:
        p.delete(*stale)


def put_charge(p, k: Keys, charge, now: float, period: str = "") -> None:
    """One ledger entry and the cached balance (of the budget's current `period`), in the same
    transaction as the job's end."""
    p.xadd(k.ledger, {"type": "charge", "key": charge.key, "budget": charge.budget, "unit": charge.unit,
                      "amount": charge.amount, "job": charge.job, "attempt": charge.attempt, "ts": now,
                      "period": period})
    p.hincrby(k.spent(), spent_field(charge.budget, period), charge.amount)


def put_books(p, k: Keys, books, now: float) -> None:
    """Ledger entries, overrides, limits, period labels and fired alert keys (ledger.Books)."""
    for e in books.entries:
        p.xadd(k.ledger, e.fields(now))
        p.sadd(k.ledger_keys, e.key)
    for o in books.overrides:
        p.hset(k.overrides, str(o.id), o.dumps())
    for name, record in books.limits:
        if record is None:
            p.hdel(k.limits, name)
        else:
            p.hset(k.limits, name, record)
    for name, label in books.periods:
        p.hset(k.periods, name, label)
    if books.fired:
        p.sadd(k.alerts_fired, *books.fired)


def mark_charged(p, k: Keys, key: str) -> None:
    p.sadd(k.ledger_keys, key)


def put_reply(p, k: Keys, rid: str, reply: dict, remember: bool = True) -> None:
    """The reply to request `rid`; remembered for retries of the same id unless `remember` is False
    (a refused credential: the id is the sender's claim, and must not bind the id's real owner)."""
    text = json.dumps(reply, separators=(",", ":"))
    p.rpush(k.reply(rid), text)
    p.expire(k.reply(rid), REPLY_TTL)
    if remember:
        p.set(k.done(rid), text, ex=DONE_TTL)


def put_usage(p, k: Keys, account: str, value: float, since: float) -> None:
    p.hset(k.usage, account, json.dumps([round(value, 3), since]))


DEAD_MAXLEN = 10_000
DEAD_ENTRY_CHARS = 4096   # what is kept of a dead entry: enough to see it, never its 1 MB body


def put_dead(p, k: Keys, source: str, eid: str, fields: dict, reason: str, now: float) -> None:
    """A stream entry no handler could take, kept with the reason for `labq admin dead`."""
    entry = json.dumps({str(f)[:64]: str(v)[:DEAD_ENTRY_CHARS] for f, v in list((fields or {}).items())[:32]})
    p.xadd(k.dead, {"source": source, "id": eid, "reason": reason[:1000], "entry": entry[:DEAD_ENTRY_CHARS],
                    "ts": now}, maxlen=DEAD_MAXLEN, approximate=True)


CHUNK_BYTES = 4 << 20
PREWRITE_MIN = 1000      # new jobs in one change from which their records are written ahead


def put_specs(p, k: Keys, new) -> None:
    """The shared spec (script, argv) of each array among the jobs a change creates, written once:
    its tasks' records refer to it (codec.shares_spec) and are indexed in the same transaction."""
    seen = set()
    for job in new:
        if job.array_id not in seen:
            seen.add(job.array_id)      # one look per array, not per task
            if codec.shares_spec(job):
                p.set(k.spec(job.array_id), codec.spec(job))


def put_new_jobs(r, k: Keys, jobs) -> set[int]:
    """Records of jobs created by a big change, written ahead of its transaction in pipelines of at
    most CHUNK_BYTES, so that a 100,000-task array never sits in memory as one ~240 MB MULTI. A
    record is invisible until `index_jobs` adds its id to the active index in the transaction; a crash
    in between leaves unindexed records under ids the sequence never hands out again. Returns the
    ids written (none for a small change, which goes into the transaction whole)."""
    if len(jobs) < PREWRITE_MIN:
        return set()
    # Each chunk is one MSET in a MULTI/EXEC: Redis fsyncs a transaction once, while a plain
    # pipeline of the same commands is fsynced at every read of its socket.
    # Their `stat` rows go with them: a row whose job is not (yet) indexed is skipped by readers
    # (thinreads.ThinReader.stat_rows), and the next leader rebuilds the rows from the records.
    done, records, rows, size = set(), [], [], 0
    for jid, record, row in _encoded(k, jobs):
        records.append(record)
        rows.append(row)
        done.add(jid)
        size += len(record) + len(row)
        if size >= CHUNK_BYTES:
            _mset(r, k, records, rows)
            records, rows, size = [], [], 0
    if records:
        _mset(r, k, records, rows)
    return done


_ID, _INDEX = -7_777_777_771, -7_777_777_772     # stand-ins, replaced in the encoded text
_ALIKE = attrgetter(*(n for n in codec.JOB_NAMES if n not in ("id", "array_index")))


def _bulk2(key: str, value: str) -> bytes:
    """A key and its value as two RESP bulk strings (MSET's or HSET's arguments)."""
    kb, vb = key.encode(), value.encode()
    return b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(kb), kb, len(vb), vb)


def _cut(text: str):
    """`text` (of a job with the stand-ins) as bytes cut around them: (before id, between, after),
    or None unless each stand-in occurs once, the id's first."""
    t, i, x = text.encode(), str(_ID).encode(), str(_INDEX).encode()
    if t.count(i) != 1 or t.count(x) != 1 or t.index(i) > t.index(x):
        return None
    a, rest = t.split(i)
    b, c = rest.split(x)
    return a, b, c, len(a) + len(b) + len(c)


def _encoded(k: Keys, jobs):
    """(id, record as MSET's key and value, stat row as HSET's field and value) of each job, in RESP.
    The tasks of a new array differ only in id and index: each run of them is encoded once with
    stand-ins, cut around them, and each task's record is the pieces with its numbers between (the
    encoding was most of a 10,000-task submit). A task that differs otherwise, or text in which a
    stand-in is not unique, is encoded on its own."""
    tmpl = None
    for job in jobs:
        if job.array_id is not None and not job.attempts:
            same = _ALIKE(job)
            if tmpl is None or tmpl[0] != same:
                stand = replace(job, id=_ID, array_index=_INDEX)
                tmpl = (same, _cut(codec.dumps(stand)), _cut(statrows.dumps(stand)))
            rec, row = tmpl[1], tmpl[2]
            if rec is not None and row is not None:
                i, x = b"%d" % job.id, b"%d" % job.array_index
                key = k.job(job.id).encode()
                n = len(i) + len(x)
                yield (job.id,
                       b"$%d\r\n%s\r\n$%d\r\n%s%s%s%s%s\r\n" % (len(key), key, rec[3] + n, rec[0], i, rec[1], x, rec[2]),
                       b"$%d\r\n%s\r\n$%d\r\n%s%s%s%s%s\r\n" % (len(i), i, row[3] + n, row[0], i, row[1], x, row[2]))
                continue
        yield job.id, _bulk2(k.job(job.id), codec.dumps(job)), _bulk2(str(job.id), statrows.dumps(job))


def _mset(r, k: Keys, records: list, rows: list) -> None:
    """One chunk as MULTI, MSET, HSET, EXEC, encoded here and sent on one of the client's
    connections: redis-py's own packing of a chunk's ~10,000 arguments, a few µs each, was a quarter
    of a 10,000-task submit's CPU. `records` and `rows`: RESP pairs from _encoded."""
    packed = b"".join([resp.encode(("MULTI",)), _head(2 * len(records), "MSET"), *records,
                       _head(2 * len(rows), "HSET", k.stat_rows), *rows, resp.encode(("EXEC",))])
    pool = r.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:       # redis-py < 5.3 wants a command name
        conn = pool.get_connection("MULTI")
    try:
        conn.send_packed_command([packed])
        replies = [conn.read_response() for _ in range(4)]   # OK, QUEUED, QUEUED, [OK, n]
    except BaseException:
        conn.disconnect()   # a reply may still be on its way: never hand this connection out again
        raise
    finally:
        pool.release(conn)
    if not isinstance(replies[3], list) or len(replies[3]) != 2:
        raise RuntimeError(f"writing records ahead: unexpected reply {str(replies)[:200]}")


def _head(n_more: int, *args) -> bytes:
    """A RESP command's header and first arguments, `n_more` arguments to follow."""
    whole = resp.encode(args)
    return b"*%d" % (len(args) + n_more) + whole[whole.index(b"\r\n"):]


def index_jobs(p, k: Keys, jobs) -> None:
    """The active index of jobs whose records `put_new_jobs` wrote ahead, in chunks of one ZADD."""
    ids = [j.id for j in jobs if j.state in states.ACTIVE]
    for i in range(0, len(ids), 10_000):
        # Score and member as bytes: redis-py packs a str or int argument in a few µs, bytes in one
        # (10,000 tasks: 20 → 8 ms of the batch's transaction).
        args = []
        for x in ids[i:i + 10_000]:
            b = b"%d" % x
            args += (b, b)
        p.execute_command("ZADD", k.active, *args)


def put_seq(p, k: Keys, seq: int) -> None:
    """The job id sequence, written with the batch that handed the ids out."""
    p.set(k.seq, seq)


def put_control(p, k: Keys, jid: int, value: str) -> None:
    """What the job's runner must do (cancel, preempt, ...); kept a week for a runner that comes back."""
    p.set(k.control(jid), value, ex=CONTROL_TTL)


def add_alert(p, k: Keys, alert: dict) -> None:
    p.xadd(k.alerts, alert, maxlen=ALERTS_MAXLEN, approximate=True)


def put_node_admin(p, k: Keys, node: str, admin: str | None) -> None:
    """An admin's state for a node (drain); None or "" lifts it."""
    if admin:
        p.set(k.node_admin(node), admin)
    else:
        p.delete(k.node_admin(node))
