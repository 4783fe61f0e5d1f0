"""The loop's wait for a wake-up (store/requestq.wait_wake) carries the tick's first reads: who holds
the leader lease and the nodes, read as the wait returns; the tick right after it uses them instead of
two round trips of its own (issue 39: the fixed cost per batch). Used once, and only within
requestq.WOKE_FRESH of the wait: a tick later than that reads afresh. A real redis-server (the
wire path; fakeredis goes through redis-py, which reads as before)."""
import time
from types import SimpleNamespace

from labq.scheduler.jobs.model import Gpu
from labq.scheduler.store import requestq, wire
from labq.scheduler.store.agentside import AgentStore
from tests.harness import K, setup


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
