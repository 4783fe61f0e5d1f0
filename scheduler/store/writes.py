"""Writes the scheduler adds to a transaction pipeline: job records, ledger entries, replies."""
import json
import time

from .. import states
from ..ledger import spent_field
from ..model import Job
from . import codec
from .keys import Keys

REPLY_TTL = 600
DONE_TTL = 86400


def put_job(p, k: Keys, job: Job) -> None:
    put_jobs(p, k, [job])


def put_jobs(p, k: Keys, jobs, fresh=()) -> None:
    """Job records and the active/history indexes, one ZADD/ZREM per index for the lot (a
    100,000-task array is 100,000 SETs and three index commands, not 300,000 commands). The
    shared spec of an array is written with its first tasks (`fresh`: ids not written before)."""
    active, ended, stale = {}, {}, []
    specs = set()
    for job in jobs:
        if job.id in fresh and job.array_id not in specs and codec.shares_spec(job):
            specs.add(job.array_id)
            p.set(k.spec(job.array_id), codec.spec(job))
        p.set(k.job(job.id), codec.dumps(job))
        if job.state in states.ACTIVE:
            active[str(job.id)] = job.id
            if job.state == states.PENDING and job.attempts:
                # Requeued: the control that stopped the last attempt (cancel for labq requeue,
                # preempt) must not stop the next one before it starts.
                stale.append(k.control(job.id))
        else:
            ended[str(job.id)] = job.end_time or time.time()
            stale.append(k.control(job.id))
    if active:
        p.zadd(k.active, active)
    if ended:
        p.zrem(k.active, *ended)
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
