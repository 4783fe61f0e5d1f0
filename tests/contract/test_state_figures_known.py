"""After each leading tick the state file learns Redis's figures (daemon/durability.seen): the last job
id, the ledger's count and newest entry. The leader knows them from its own commits (issue 39: a round
trip a tick): SchedulerStore.figures_now is the last read moved by each commit's id sequence, and is
read afresh once a commit adds to the ledger, fails, or nothing was read yet. Whatever it answers is
what a read of Redis gives. Fakeredis and a real redis-server."""
import time

from labq.scheduler.daemon.transitions import Charge
from labq.scheduler.errors import StalePlanError
from labq.scheduler.store import state as store_state
from tests.harness import BODY, K, reply, setup, submit, woke


def _reads(monkeypatch) -> list:
    seen = []
    real = store_state.SchedulerStore.figures
    monkeypatch.setattr(store_state.SchedulerStore, "figures", lambda self: seen.append(1) or real(self))
    return seen


def test_a_tick_of_submits_knows_the_figures_without_reading_them(conns, monkeypatch):
    """Failed before figures_now: every seen() after a tick was a read (one per tick here)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    s.store.figures()                          # as Durability.check reads them before leading
    reads = _reads(monkeypatch)
    for i in range(3):
        submit(r, "alice", {**BODY, "gpus": 0, "hold": True}, f"k{i}")
        s.tick(now + i, woke(r))
        assert reply(r, f"k{i}")["ok"]
        known = s.store.figures_now()
        assert reads == []
        monkeypatch.undo()
        assert known == s.store.figures() and known.last_job_id == reply(r, f"k{i}")["job_id"]
        reads = _reads(monkeypatch)


def test_a_commit_that_adds_to_the_ledger_or_fails_is_read_again(real_redis, redis_server, monkeypatch):
    """(A real redis-server: fakeredis answers XINFO STREAM in a shape figures() does not read.)"""
    r = real_redis
    now = time.time()
    s = setup(r, None, now)
    s.store.figures()
    reads = _reads(monkeypatch)
    s.committer.begin(s.state.usage).charges.append(Charge(9, 1, "eta-sweep", "usd", 1_000_000))
    s.flush()
    assert r.xlen(K.ledger) == 1
    got = s.store.figures_now()
    assert reads == [1] and got.ledger_count == 1 and got.ledger_last
    r.set(K.leader, "someone-else")            # the next commit is refused: nothing known after it
    s.committer.begin(s.state.usage).controls.append((9, "cancel"))
    try:
        s.flush()
    except StalePlanError:
        pass
    s.store.figures_now()
    assert reads == [1, 1]


def test_figures_known_before_another_leader_led_are_read_again(real_redis, redis_server, monkeypatch):
    """A lease taken afresh (another scheduler may have led and written meanwhile): read, not moved."""
    s = setup(real_redis, None, time.time())
    s.store.figures()
    real_redis.delete(K.leader)                # the lease lapsed; whoever led meanwhile is gone
    assert s.store.acquire_leader(30) == "taken"
    reads = _reads(monkeypatch)
    s.store.figures_now()
    assert reads == [1]
