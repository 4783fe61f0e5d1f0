"""The loop's wait for a wake-up (store/requestq.wait_wake) carries the tick's first reads: who holds
the leader lease and the nodes, read as the wait returns; the tick right after it uses them instead of
two round trips of its own (issue 39: the fixed cost per batch). Used once, and only within
requestq.WOKE_FRESH of the wait: a tick later than that reads afresh. A real redis-server (the
wire path; fakeredis goes through redis-py, which reads as before)."""
import time
from types import SimpleNamespace

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.store import requestq, wire
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, CFG, FROZEN, K, reply, setup, submit, taken


def _round_trips(monkeypatch) -> list:
    """The first command of each round trip wire.call makes."""
    seen = []
    real = wire.call

    def call(r, cmds, *a, **kw):
        seen.append(cmds[0][0])
        return real(r, cmds, *a, **kw)
    monkeypatch.setattr(wire, "call", call)
    return seen


def test_the_tick_after_a_wait_reads_neither_the_lease_nor_the_nodes_again(real_redis, redis_server, monkeypatch):
    """Failed before: the tick began with a GET of the lease and an SMEMBERS of the nodes, each a
    round trip of its own."""
    s = setup(real_redis, None, time.time())
    now = time.time()
    s.tick(now)                    # leading, the lease fresh: the tick's check is one GET
    seen = _round_trips(monkeypatch)
    real_redis.lpush(K.wake, "user:alice")
    assert s.store.wait_wake(1.0)
    s.tick(now)
    assert seen[0] == "BLPOP" and "GET" not in seen and "SMEMBERS" not in seen, seen
    assert s.leading and [n.name for n in s.nodes] == ["n1"] and s.nodes[0].state == "up"


def test_what_a_wait_read_serves_only_the_tick_right_after_it(real_redis, redis_server, monkeypatch):
    """A tick past WOKE_FRESH after the wait, or a second tick, reads the lease and the nodes afresh:
    a lease another scheduler took and a node registered meanwhile are seen (failed with a read kept
    for later ticks: the stale holder and node list)."""
    s = setup(real_redis, None, time.time())
    now = time.time()
    s.tick(now)
    clock = [1000.0]
    monkeypatch.setattr(requestq, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    real_redis.lpush(K.wake, "user:alice")
    assert s.store.wait_wake(1.0)
    AgentStore(real_redis, K).register("n2", 16, 64 << 30, 16, [Gpu("GPU-9", 0, "fake")], "h", 1, 3600)
    clock[0] += 2 * requestq.WOKE_FRESH
    seen = _round_trips(monkeypatch)
    s.tick(now)
    assert "SMEMBERS" in seen and sorted(n.name for n in s.nodes) == ["n1", "n2"], seen
    # Another wait, then the lease taken by another scheduler: the tick right after sees the holder
    # the wait read (its own, fresh), the next one the new holder.
    real_redis.lpush(K.wake, "user:alice")
    assert s.store.wait_wake(1.0)
    real_redis.set(K.leader, "s2")
    assert s.store.leader() == "s1"
    assert s.store.leader() == "s2"


def test_the_tick_after_a_wait_takes_the_requests_the_wait_moved(real_redis, redis_server, monkeypatch):
    """The wait carries the tick's first look too (the lengths, the events, the LMOVEs of the requests
    that woke it, sized by the last intake): the tick's intake sends no look of its own, and every
    request is answered once (failed before: the look was a round trip of its own, LLEN first)."""
    s, now = _woke(real_redis)
    seen = _round_trips(monkeypatch)
    s.tick(now)
    assert "LLEN" not in seen, seen
    got = [reply(real_redis, f"w{i}") for i in range(3)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [1, 2, 3]
    assert taken(real_redis) == 0


def test_what_a_wait_moved_is_answered_once_by_the_next_leader_when_its_own_dies(real_redis, redis_server):
    """A crash point the merged wait adds: requests moved into `taken` by the wait, the scheduler
    killed before its tick handles them. The next leader answers each once."""
    s1 = setup(real_redis, None, time.time())
    now = time.time()
    for rids in (("a0", "a1", "a2"), ("d0", "d1", "d2")):    # the first three size the wait's moves
        for rid in rids:
            submit(real_redis, "alice", {**BODY, "hold": True}, rid)
        assert s1.store.wait_wake(1.0)
        if rids[0] == "a0":
            s1.tick(now)
    assert real_redis.llen(K.taken) == 3      # moved by the wait, then s1 is killed
    real_redis.delete(K.leader)
    s2 = Scheduler(real_redis, CFG, me="s2", clock=FROZEN)
    assert s2.tick(now + 1)
    got = [reply(real_redis, f"d{i}") for i in range(3)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [4, 5, 6]
    assert taken(real_redis) == 0 and len(real_redis.lrange(K.reply("d0"), 0, -1)) == 1


def test_what_a_deposed_leaders_wait_moved_is_answered_once_by_its_successor(real_redis, redis_server):
    """The wait moved requests, then another scheduler took the lease (the first was frozen): the
    deposed one's commit is refused, its successor finds them left in `taken` and answers each once."""
    s1, now = _woke(real_redis, 2, "z")
    real_redis.delete(K.leader)
    s2 = Scheduler(real_redis, CFG, me="s2", clock=FROZEN)
    assert s2.tick(now + 1)                  # leads; the requests s1 moved are in `taken`
    s1.tick(now + 2)                         # its lease check or its commit fails: nothing written
    assert not s1.leading
    s2.tick(now + 3)
    got = [reply(real_redis, f"z{i}") for i in range(2)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [1, 2]
    assert taken(real_redis) == 0 and all(len(real_redis.lrange(K.reply(f"z{i}"), 0, -1)) == 1 for i in range(2))


def test_a_batch_bigger_than_the_last_is_moved_by_the_wait_alone(real_redis, redis_server, monkeypatch):
    """The wait's LMOVEs are sized past the last intake (requestq.ahead_moves): a batch a few requests
    bigger than the one before takes no LMOVE round trip of its own, a write Redis fsyncs before it
    answers under appendfsync always (failed before: sized at the last intake, the 4th of 4 requests
    after an intake of 3 went in a round trip of its own)."""
    s, now = _woke(real_redis)
    s.tick(now)                              # an intake of 3: the next wait's LMOVEs are sized by it
    for i in range(4):
        submit(real_redis, "alice", {**BODY, "hold": True}, f"x{i}")
    seen = _round_trips(monkeypatch)
    assert s.store.wait_wake(1.0)
    s.tick(now)
    assert seen[0] == "BLPOP" and "LMOVE" not in seen, seen
    got = [reply(real_redis, f"x{i}") for i in range(4)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [4, 5, 6, 7]
    assert taken(real_redis) == 0


def _woke(real_redis, n=3, prefix="w"):
    """A scheduler that took its first tick, and whose wait `n` held submits (prefix0, prefix1, ...) woke."""
    s = setup(real_redis, None, time.time())
    now = time.time()
    s.tick(now)
    for i in range(n):
        submit(real_redis, "alice", {**BODY, "hold": True}, f"{prefix}{i}")
    assert s.store.wait_wake(1.0)
    return s, now
