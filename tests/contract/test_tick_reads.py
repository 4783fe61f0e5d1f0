"""The reads of every tick on store/wire.py's path (real redis-server): the same answers as through
redis-py, in fewer round trips (issue 39 item 3: the fixed cost per batch was ~2 ms of scheduler CPU,
most of it redis-py's ~100 µs a round trip: the lease, the nodes, the state file's figures, the wake)."""
import os
from dataclasses import replace

import pytest

from labq.scheduler.daemon import durability
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.store import conn, wire
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, K, setup, submit

NOW = 1_800_000_000.0


@pytest.fixture
def r(redis_server):
    c = conn.connect(f"unix://{redis_server.sock}")
    c.flushall()
    yield c
    c.close()


class Trips:
    """Round trips as Redis counts them: the read events it processed (INFO stats), less the INFO's own."""

    def __init__(self, r):
        self.r = r
        self.start = self._reads()

    def _reads(self) -> int:
        return int(self.r.info("stats")["total_reads_processed"])

    @property
    def n(self) -> int:
        return self._reads() - self.start - 1


def _through_redis_py(monkeypatch):
    monkeypatch.setattr(wire, "call", lambda *a, **kw: None)


def test_a_commit_is_two_round_trips_the_fence_then_the_transaction(r, monkeypatch):
    """WATCH of the lease and its GET went one by one before MULTI..EXEC: three round trips a commit."""
    s = setup(r, None, NOW)
    trips = Trips(r)
    s.store.txn(lambda p: p.set("x", 1))
    assert trips.n == 2 and r.get("x") == "1"


def test_a_lost_lease_still_fences_the_commit(r):
    s = setup(r, None, NOW)
    r.set(K.leader, "someone else")
    with pytest.raises(Exception, match="no longer holds the leader lease"):
        s.store.txn(lambda p: p.set("x", 1))
    assert r.get("x") is None and r.ping()


def test_the_nodes_are_one_round_trip_while_the_set_is_the_same_and_read_as_redis_py_reads_them(r, monkeypatch):
    s = setup(r, None, NOW)
    s.store.nodes(NOW)
    trips = Trips(r)
    fast = s.store.nodes(NOW)
    assert trips.n == 1 and [n.name for n in fast] == ["n1"]
    AgentStore(r, K).register("n2", 8, 32 << 30, 8, [Gpu("GPU-x", 0, "fake")], "h2", 2, 3600)
    r.hset(K.node_health("n2"), "reason", "a runner did not answer")
    fast = s.store.nodes(NOW)           # a set that changed: asked again with its records
    assert [n.name for n in fast] == ["n1", "n2"] and fast[1].state == "unhealthy"
    _through_redis_py(monkeypatch)
    slow = s.store.nodes(NOW)
    assert [abs(a.lease_expiry - b.lease_expiry) < 60 for a, b in zip(fast, slow)] == [True, True]
    assert [replace(n, lease_expiry=0) for n in slow] == [replace(n, lease_expiry=0) for n in fast]


def test_the_state_files_figures_are_redis_pys(r, monkeypatch):
    s = setup(r, None, NOW)
    call = wire.call

    def both():
        monkeypatch.setattr(wire, "call", call)
        fast = s.store.figures()
        _through_redis_py(monkeypatch)
        return fast, s.store.figures()
    fast, slow = both()             # no ledger yet: XINFO's error reply in its place
    assert fast == slow and fast.ledger_count == 0 and fast.last_job_id == 0
    r.xadd(K.ledger, {"type": "charge", "amount": "5"})
    r.xadd(K.ledger, {"type": "charge", "amount": "7", "job": "3"})
    r.set(K.seq, 12)
    fast, slow = both()
    assert fast == slow and fast.ledger_count == 2 and fast.ledger_hash and fast.last_job_id == 12


def test_a_ticks_look_reads_the_events_as_redis_py_reads_them(r, monkeypatch):
    s = setup(r, None, NOW)
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"pid": 7, "start_time": NOW})
    agent.post("alert", 0, 0, "n1", {"text": "é"})
    submit(r, "alice", BODY, "a")
    streams = s.events.node_streams()
    r.xgroup_create(K.events + ":copy", "g", id="0", mkstream=True)      # nothing to do with the look
    fast = s.store.look(streams, 10)
    # The same entries again, as pending ones: read through redis-py from id 0.
    _through_redis_py(monkeypatch)
    left, waiting, again = s.store.look(streams, 10)
    assert fast[1] == waiting == 1 and left is True        # the first look's entries are pending now
    assert [(st, eid) for st, eid, _ in fast[2]] == [(st, eid) for st, eid, _ in s.store.read_group(streams, True)]
    assert [f for _, _, f in fast[2]] == [f for _, _, f in s.store.read_group(streams, True)]
    assert all(isinstance(f, dict) and b"kind" in f for _, _, f in fast[2])


def test_a_wait_woken_or_not_through_either_path(r, monkeypatch):
    s = setup(r, None, NOW)
    r.lpush(K.wake, "user:alice")
    assert s.store.wait_wake(5.0) is True and r.llen(K.wake) == 0
    assert s.store.wait_wake(0.05) is False
    _through_redis_py(monkeypatch)
    r.lpush(K.wake, "user:alice", "user:bob")
    assert s.store.wait_wake(5.0) is True and r.llen(K.wake) == 0


def test_the_state_file_makes_its_directory_once_not_at_every_save(tmp_path, monkeypatch):
    """A leader saves after every tick that handed out ids: a makedirs each time was three syscalls."""
    f = durability.StateFile(str(tmp_path / "new" / "dir" / "state.json"))
    made = []
    real = os.makedirs
    monkeypatch.setattr(os, "makedirs", lambda *a, **kw: (made.append(a[0]), real(*a, **kw))[1])
    for i in range(3):
        f.save(durability.Figures(last_job_id=i + 1))
    assert made.count(str(tmp_path / "new" / "dir")) == 1 and f.load() == durability.Figures(last_job_id=3)
    assert oct(os.stat(tmp_path / "new" / "dir").st_mode & 0o777) == "0o700"


def test_wire_keeps_its_connection_between_calls(r, monkeypatch):
    """A checkout from redis-py's pool polled the socket and went through its decorators each time:
    ~30 µs, five or six a tick."""
    r.set("k", "v")
    wire.call(r, [("GET", "k")])
    taken = []
    real = r.connection_pool.get_connection
    monkeypatch.setattr(r.connection_pool, "get_connection", lambda *a, **kw: (taken.append(1), real(*a, **kw))[1])
    assert [wire.call(r, [("GET", "k"), ("LLEN", "none")]) for _ in range(3)] == [["v", 0]] * 3
    assert taken == []


def test_a_kept_connection_that_redis_dropped_is_given_back_and_the_reads_still_answer(r):
    s = setup(r, None, NOW)
    assert s.store.leader() == "s1"
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")     # ours among them
    assert s.store.leader() == "s1"      # through redis-py this once
    assert wire.call(r, [("GET", K.leader)]) == ["s1"]     # on a connection of its own again


def test_while_another_thread_is_on_the_kept_connection_a_call_takes_one_of_the_pools(r):
    r.set("k", "v")
    kept = wire._kept(r.connection_pool)
    with kept.lock:
        assert wire.call(r, [("GET", "k")]) == ["v"]
    assert kept.c is None or kept.c._sock is not None
