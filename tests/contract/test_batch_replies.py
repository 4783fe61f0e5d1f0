"""A group commit's replies past its first by one script (store/replies.py): the same keys, values and
TTLs as each reply's own commands (writes.put_reply), on fakeredis and a real redis-server; and a full
Redis refuses the whole commit, so no request is acknowledged without its reply."""
import pytest
import redis

from labq.scheduler.store import writes
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.replies import put_replies
from labq.scheduler.store.state import SchedulerStore

# (rid, reply, remember): the third is a refused credential's, never kept for retries
REPLIES = [(f"{i:032x}", {"ok": True, "job_id": i, "display": str(i)}, i != 3) for i in range(1, 7)]
RIDS = [rid for rid, _, _ in REPLIES]


def _store(r, prefix: str) -> tuple[SchedulerStore, Keys]:
    k = Keys(prefix)
    r.set(k.leader, "me")       # txn commits only for the lease's holder
    return SchedulerStore(r, k, "me"), k


def _written(r, k: Keys) -> list:
    return [(r.lrange(k.reply(rid), 0, -1), r.get(k.done(rid))) for rid in RIDS]


def _ttls(r, k: Keys) -> list:
    return [(r.ttl(k.reply(rid)), r.ttl(k.done(rid))) for rid in RIDS]


@pytest.mark.parametrize("push", [True, False], ids=["pushed", "held-for-replicas"])
def test_a_batchs_replies_are_written_as_each_replys_own_commands(conns, push):
    r, _ = conns
    each, ek = _store(r, "each")
    batch, bk = _store(r, "batch")
    each.txn(lambda p: [writes.put_reply(p, ek, *x, push=push) for x in REPLIES])
    sent: list = []

    def build(p):
        put_replies(p, bk, REPLIES, push=push)
        sent.extend(args[0] for args, _ in p.command_stack)
    batch.txn(build)
    assert _written(r, bk) == _written(r, ek)
    for (reply, done), (want_reply, want_done) in zip(_ttls(r, bk), _ttls(r, ek)):
        assert abs(reply - want_reply) <= 1 and abs(done - want_done) <= 1
    got = _written(r, bk)
    assert all(reply == ([writes._compact(x[1])] if push else []) for (reply, _), x in zip(got, REPLIES))
    assert [done is not None for _, done in got] == [x[2] for x in REPLIES]
    # past the first, one command for the lot (the third, not kept, its own)
    assert (sent.count("EVAL"), sent.count("RPUSH")) == ((1, 2) if push else (0, 0))


class _Recorded:
    """A pipeline that keeps the commands put_replies gives it."""

    def __init__(self):
        self.cmds: list = []

    def execute_command(self, *args):
        self.cmds.append(args)


def _full(r):
    before = r.config_get("maxmemory")["maxmemory"], r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    return lambda: (r.config_set("maxmemory", before[0]), r.config_set("maxmemory-policy", before[1]))


@pytest.mark.redis
def test_a_full_redis_refuses_the_whole_commit_acknowledging_nothing(real_redis):
    """maxmemory reached as the commit is queued: every command is refused as queued, EXEC with them
    (EXECABORT), the script's EVAL too."""
    s, k = _store(real_redis, "full")
    kept = [x for x in REPLIES if x[2]]
    real_redis.rpush(k.taken, *[f"request {i}" for i in range(len(kept))])
    restore = _full(real_redis)
    try:
        with pytest.raises(redis.ResponseError):
            s.txn(lambda p: (put_replies(p, k, kept), p.ltrim(k.taken, 0, -len(kept) - 1)))
    finally:
        restore()
    assert real_redis.llen(k.taken) == len(kept)
    assert _written(real_redis, k) == [([], None)] * len(REPLIES)


@pytest.mark.redis
def test_memory_running_out_while_the_commit_is_queued_refuses_its_exec(real_redis):
    """Queued, then maxmemory reached before EXEC (the queue's own memory can do it): EXEC is refused
    whole only where a command it holds is refused under OOM (the first reply's own RPUSH). A script
    without flags is not such a command: EXEC would run, the script stop at its first write, and the
    acknowledgement (LTRIM, never refused) go through, those requests never answered."""
    k = Keys("late")
    kept = [x for x in REPLIES if x[2]]
    real_redis.rpush(k.taken, *[f"request {i}" for i in range(len(kept))])
    p = _Recorded()
    put_replies(p, k, kept)
    c = real_redis.connection_pool.get_connection()
    try:
        for cmd in [("MULTI",), *p.cmds, ("LTRIM", k.taken, 0, -len(kept) - 1)]:
            c.send_command(*cmd)
            assert c.read_response() in ("OK", "QUEUED")
        restore = _full(real_redis)
        try:
            c.send_command("EXEC")
            with pytest.raises(redis.ResponseError):
                c.read_response()
        finally:
            restore()
    finally:
        real_redis.connection_pool.release(c)
    assert real_redis.llen(k.taken) == len(kept)
    assert _written(real_redis, k) == [([], None)] * len(REPLIES)
