"""Writes the scheduler adds to a transaction pipeline: job records, ledger entries, replies."""
import json
import time
from dataclasses import replace
from itertools import chain, groupby, repeat
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

from ..jobs import states
from ..money.periods import field as spent_field
from ..money.totals import contribution
from . import acctrows, codec, envs, resp, statrows, totals
from .keys import Keys
from .splice import ALIKE, ID, INDEX, cut, texts

REPLY_TTL = 600
DONE_TTL = 86400
CONTROL_TTL = 7 * 86400
ALERTS_MAXLEN = 100_000
_ENCODER = json.JSONEncoder(separators=(",", ":"))       # json.dumps(x, separators=…), one encoder
# Its C encoder made once (encode makes one a call: 0.9 of a reply's 1.6 µs hot, issue 39); no check for
# cycles (`markers` None): a reply is a tree of fresh dicts; one holding itself raises RecursionError.
_C_ENCODE = c_make_encoder and c_make_encoder(None, _ENCODER.default, encode_basestring_ascii, None, ":", ",",
                                              False, False, True)


def _compact(reply) -> str:
    """json.dumps(reply, separators=(",", ":"))."""
    return "".join(_C_ENCODE(reply, 0)) if _C_ENCODE and type(reply) is dict else _ENCODER.encode(reply)


def put_jobs(p, k: Keys, jobs, new=None) -> None:
    """Job records, their `stat` rows (statrows.py), ended jobs' acct rows (acctrows.redis_row) and
    the active/history indexes, one MSET, ZADD, ZREM and HSET for the lot (a 100,000-task array is a
    few commands, not 400,000). `new`: the ids that may not be in the active index yet (the batch's
    new jobs; None: any); an active job outside it is there already and is not added again (a pass
    that gives 10,000 jobs a new reason sent 20,000 ZADD arguments for nothing)."""
    active, ended, stale, records, rows, acct, ran, counted = {}, {}, [], {}, {}, {}, [], {}
    for job, record, row in texts(jobs):
        records[k.job(job.id)] = record
        if job.state in states.ACTIVE:
            if new is None or job.id in new:
                active[str(job.id)] = job.id
            rows[str(job.id)] = row if row is not None else statrows.dumps(job)
            if has_run(job):
                # Keys.ran: `labq report` reads these records alone. Attempts never go, so a job is
                # never taken out before it ends (a pass rewriting 10,000 never-run jobs sends nothing).
                ran.append(job.id)
            if job.state == states.PENDING and job.attempts:
                # Requeued: the control that stopped the last attempt (cancel for labq requeue,
                # preempt) must not stop the next one before it starts.
                stale.append(k.control(job.id))
        else:
            ended[str(job.id)] = job.end_time or time.time()
            acct[str(job.id)] = row if row is not None else acctrows.redis_row(job)
            if job.attempts:        # `labq report`'s part of it (store/totals.py); none without an attempt
                counted[str(job.id)] = contribution(job, ended[str(job.id)])
            stale.append(k.control(job.id))
    if records:   # one MSET: a command per record cost more to pack and parse than to run
        p.mset(records)
    if active:
        p.zadd(k.active, active)
    if rows:
        p.hset(k.stat_rows, mapping=rows)
    if ran:
        p.sadd(k.ran, *ran)
    if ended:
        p.zrem(k.active, *ended)
        p.hdel(k.stat_rows, *ended)
        p.srem(k.ran, *ended)
        p.zadd(k.history, ended)
        p.hset(k.acct_rows, mapping=acct)
        totals.put(p, k, {i: v for i, v in counted.items() if v})
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


def put_reply(p, k: Keys, rid: str, reply: dict, remember: bool = True, push: bool = True) -> None:
    """The reply to request `rid`; remembered for retries of the same id unless `remember` is False
    (a refused credential: the id is the sender's claim, and must not bind the id's real owner);
    `push=False`: remembered only, `push_reply` hands it to the client later (after WAIT)."""
    text = _compact(reply)
    if push:
        push_reply(p, k, rid, reply, text)
    if remember:    # the command as p.set(ex=) writes it, without its argument handling (one per request)
        p.execute_command("SET", k.done(rid), text, "EX", DONE_TTL)


def put_partial(p, k: Keys, rid: str, runs: list | None) -> None:
    """What a mass cancel `rid` committed so far (runs of ids); None: the request is answered."""
    if runs is None:
        p.delete(k.partial(rid))
    else:
        p.set(k.partial(rid), json.dumps(runs, separators=(",", ":")), ex=DONE_TTL)


def push_reply(p, k: Keys, rid: str, reply: dict, text: str = "") -> None:
    p.execute_command("RPUSH", k.reply(rid), text or _compact(reply))
    p.execute_command("EXPIRE", k.reply(rid), REPLY_TTL)


def put_usage(p, k: Keys, account: str, value: float, since: float) -> None:
    p.hset(k.usage, account, json.dumps([round(value, 3), since]))


DEAD_MAXLEN = 10_000
# What a dead letter shows as it was (never a secret); any other value is its size (scripts, env, credentials).
DEAD_SHOWN = frozenset(("rid", "op", "expires", "kind", "job", "attempt", "node", "user"))


def put_dead(p, k: Keys, source: str, eid: str, fields: dict, reason: str, now: float) -> None:
    """An entry no handler could take, kept with the reason for `labq admin dead` (values redacted)."""
    p.xadd(k.dead, {"source": source, "id": eid, "reason": reason[:1000], "entry": json.dumps(redacted(fields)),
                    "ts": now}, maxlen=DEAD_MAXLEN, approximate=True)


def redacted(fields) -> dict:
    """`fields` (text or bytes) with every value but short plain DEAD_SHOWN ones replaced by its size."""
    out = {}
    for name, value in list((fields or {}).items())[:32]:
        name = name.decode("utf-8", "backslashreplace") if isinstance(name, bytes) else str(name)
        text = value if isinstance(value, str) else None
        if isinstance(value, bytes):
            text = value.decode("utf-8", "replace") if value.isascii() else None
        shown = name in DEAD_SHOWN and text is not None and len(text) <= 128 and text.isprintable()
        out[name[:64]] = text if shown else f"<{len(value if isinstance(value, bytes) else str(value).encode())} bytes>"
    return out


CHUNK_BYTES = 4 << 20
PREWRITE_MIN = 1000      # new jobs in one change from which their records are written ahead


def put_specs(p, k: Keys, new) -> None:
    """What the jobs a change creates keep apart from their records, written once per submission in
    the transaction that indexes them: each array's shared spec (argv, codec.shares_spec), each
    submission's script (keys.script, which clients cannot read); environments: envs.put_new."""
    seen = set()
    for job in new:
        if job.array_id is None:
            if job.script:
                p.set(k.script(job.id), job.script)
        elif job.array_id not in seen:
            seen.add(job.array_id)      # one look per array, not per task
            if codec.shares_spec(job):
                p.set(k.spec(job.array_id), codec.spec(job))
            if job.script:
                p.set(k.script(job.array_id), job.script)


def drop_specs(r, k: Keys, submissions) -> None:
    """What put_specs and put_jobs kept apart (the spec, the script, the exported environment) of
    each (array id or job id, task count) whose tasks have all left Redis (the archiver's: every
    archived record holds its script, and the archive is not served with it)."""
    gone, refs = [], []
    for ref, count in submissions:
        keys = [k.rest(ref), *(k.job(i) for i in range(ref, ref + count))]    # a rest's tasks need them yet
        # A lone job's record left in the same pass: no round trip to ask.
        if count == 1 or not any(r.exists(*keys[i:i + 10_000]) for i in range(0, len(keys), 10_000)):
            gone += [k.spec(ref), k.script(ref)]
            refs.append(ref)
    for i in range(0, len(gone), 3000):
        r.delete(*gone[i:i + 3000])
    envs.drop(r, k, refs)


def put_new_jobs(r, k: Keys, jobs, tasks=None) -> set[int]:
    """Records of a big change's new jobs, written ahead of its transaction in MULTIs of at most CHUNK_BYTES
    (a 100,000-task array is never one ~240 MB MULTI in memory). A record is invisible until `index_jobs` adds
    its id to the active index in the transaction; a crash in between leaves unindexed records under ids the
    sequence never hands out again (a refused transaction: drop_unindexed). Returns the ids written (none below
    PREWRITE_MIN). `tasks`: array id → its tasks as jobspec.expand made them (see _encoded_runs)."""
    if len(jobs) < PREWRITE_MIN:
        return set()
    # Each chunk is one MSET in a MULTI/EXEC: Redis fsyncs a transaction once, while a plain
    # pipeline of the same commands is fsynced at every read of its socket.
    # Their `stat` rows go with them: a row whose job is not (yet) indexed is skipped by readers
    # (thinreads.ThinReader.stat_rows), and the next leader rebuilds the rows from the records.
    done: set[int] = set()
    records, rows, n, size = [], [], 0, 0
    for ids, rec, row in _encoded_runs(k, jobs, tasks):
        records.append(rec)
        rows.append(row)
        done.update(ids)
        n += len(ids)
        size += len(rec) + len(row)
        if size >= CHUNK_BYTES:
            _mset(r, k, records, rows, n)
            records, rows, n, size = [], [], 0, 0
    if records:
        _mset(r, k, records, rows, n)
    return done


def has_run(job) -> bool:
    """Whether an active job belongs in Keys.ran: it has an attempt, or it is not pending."""
    return bool(job.attempts) or job.state != states.PENDING


def put_ran(p, k: Keys, jobs, leader: str) -> None:
    """Keys.ran afresh from the active `jobs` (a new leader's rebuild, with the `stat` rows), with
    its mark "-": readers tell a kept set, even one without ids, from one an older labq left; and
    `leader`, who keeps it from now on (Keys.ran_by): a labq older than the set that leads after
    a downgrade does not keep it, and readers then see another leader (ThinReader.ran)."""
    p.delete(k.ran)
    p.sadd(k.ran, "-", *(j.id for j in jobs if has_run(j)))
    p.set(k.ran_by, leader)


def drop_unindexed(r, k: Keys, ids) -> None:
    """put_new_jobs undone, its transaction refused (see store/commit.py Committer.write). One id indexed: it committed."""
    if r.zscore(k.active, min(ids)) is None:
        r.delete(*(k.job(j) for j in ids))
        r.hdel(k.stat_rows, *ids)


RUN_MAX = 4096      # tasks per encoded run: what put_new_jobs holds beyond a chunk


def _bulk2(key: str, value: str) -> bytes:
    """A key and its value as two RESP bulk strings (MSET's or HSET's arguments)."""
    kb, vb = key.encode(), value.encode()
    return b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(kb), kb, len(vb), vb)


def _encoded(k: Keys, jobs):
    """(id, record as MSET's key and value, stat row as HSET's field and value) of each job, in RESP,
    one by one (the reference `_encoded_runs` must equal, and the way of a job no template fits)."""
    for job in jobs:
        yield job.id, _bulk2(k.job(job.id), codec.dumps(job)), _bulk2(str(job.id), statrows.dumps(job))


def _encoded_runs(k: Keys, jobs, tasks=None):
    """(ids, their records as MSET's keys and values, their stat rows as HSET's fields and values),
    in RESP, run by run: what `_encoded` gives, each run's pieces joined. The tasks of a new array
    differ only in id and index: each run of them is encoded once with stand-ins and cut around
    them, and every record of the run is the same pieces with its numbers between, joined in one
    call (encoding was most of a 10,000-task submit, then the per-task formatting). A run is tasks
    alike in every other field, or, for an array in `tasks` (array id → its tasks as
    jobspec.expand made them, which are alike by construction), tasks that are still those very
    objects: one identity test, not a look at 67 fields. A task that differs otherwise, or text in
    which a stand-in is not unique, is encoded on its own."""
    kcut = cut(k.job(ID) + str(INDEX))          # the key: (prefix, "", "", …)
    tasks = tasks or {}
    i, n = 0, len(jobs)
    while i < n:
        job = jobs[i]
        tmpl = None
        if job.array_id is not None and not job.attempts and kcut is not None:
            stand = replace(job, id=ID, array_index=INDEX)
            tmpl = (cut(codec.dumps(stand)), cut(statrows.dumps(stand)))
        if tmpl is None or tmpl[0] is None or tmpl[1] is None:
            _, rec, row = next(_encoded(k, (job,)))
            yield [job.id], rec, row
            i += 1
            continue
        j, end = i + 1, min(n, i + RUN_MAX)
        made, aid = tasks.get(job.array_id), job.array_id
        if made is not None and _made(made, job, aid):
            while j < end and _made(made, jobs[j], aid):
                j += 1
        else:
            same = ALIKE(job)
            while j < end and not jobs[j].attempts and ALIKE(jobs[j]) == same:
                j += 1
        yield _spliced(kcut[0], tmpl[0], tmpl[1], jobs[i:j])
        i = j


def _made(made: list, job, aid: int) -> bool:
    """Whether `job` is the very object expand made for its id (array `aid`'s tasks `made`)."""
    at = job.id - aid
    return 0 <= at < len(made) and made[at] is job


def _spliced(kp: bytes, rec, row, run):
    """(ids, records, rows) of `run` (alike but for id and index) from the cut templates."""
    ids = [j.id for j in run]
    ib = [b"%d" % x for x in ids]
    xb = [b"%d" % j.array_index for j in run]
    (ra, rb, rc, rn), (wa, wb, wc, wn) = rec, row
    rc, wc = rc + b"\r\n", wc + b"\r\n"
    recs, rows, start = [], [], 0
    # Spans whose ids and indices have the same number of digits: every record there is
    # P id Q id R index S with the same P..S (and every row likewise).
    for (li, lx), span in groupby(zip(map(len, ib), map(len, xb))):
        m = sum(1 for _ in span)
        si, sx, end = ib[start:start + m], xb[start:start + m], start + m
        p, q = b"$%d\r\n%s" % (len(kp) + li, kp), b"\r\n$%d\r\n%s" % (rn + li + lx, ra)
        recs.append(b"".join(chain.from_iterable(zip(repeat(p, m), si, repeat(q, m), si, repeat(rb, m), sx,
                                                     repeat(rc, m)))))
        p, q = b"$%d\r\n" % li, b"\r\n$%d\r\n%s" % (wn + li + lx, wa)
        rows.append(b"".join(chain.from_iterable(zip(repeat(p, m), si, repeat(q, m), si, repeat(wb, m), sx,
                                                     repeat(wc, m)))))
        start = end
    return ids, b"".join(recs), b"".join(rows)


def _mset(r, k: Keys, records: list, rows: list, n: int) -> None:
    """One chunk as MULTI, MSET, HSET, EXEC, encoded here and sent on one of the client's
    connections: redis-py's own packing of a chunk's ~10,000 arguments, a few µs each, was a quarter
    of a 10,000-task submit's CPU. `records` and `rows`: RESP of `n` pairs each, from _encoded_runs."""
    packed = b"".join([resp.encode(("MULTI",)), _head(2 * n, "MSET"), *records,
                       _head(2 * n, "HSET", k.stat_rows), *rows, resp.encode(("EXEC",))])
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


def put_blocker(p, k: Keys, blocker: str | None) -> None:
    """The pass's blocker (Change.blocker); "" says there is none, None leaves it as it was."""
    if blocker:
        p.set(k.blocker, blocker)
    elif blocker is not None:
        p.delete(k.blocker)


def put_node_admin(p, k: Keys, node: str, admin: str | None) -> None:
    """An admin's state for a node (drain); None or "" lifts it."""
    if admin:
        p.set(k.node_admin(node), admin)
    else:
        p.delete(k.node_admin(node))
