"""How many round trips to Redis a tick's intake costs when nothing waits (the common tick of a quiet
queue), fake and real Redis. The check for what a deposed leader left behind (issue 35) is asked in the
same round trip as the read of the requests' length and of the new events: it cost a round trip of
its own: an idle tick was 7 round trips (now 5), ~50-70 us of its ~300-370 us of scheduler CPU."""
import contextlib
import time

import redis

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.errors import StalePlanError
from labq.scheduler.jobs import states
from labq.scheduler.store import wire
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, CFG, FROZEN, K, job, one_admitted, reply, setup, submit, woke


@contextlib.contextmanager
def _round_trips():
    """Counts what goes to Redis: one send per command, or per pipeline."""
    n = [0]
    cls = redis.connection.AbstractConnection
    orig = cls.send_packed_command

    def counting(self, *a, **kw):
        n[0] += 1
        return orig(self, *a, **kw)
    cls.send_packed_command = counting
    try:
        yield n
    finally:
        cls.send_packed_command = orig


def test_an_idle_intake_is_one_round_trip(conns):
    r, s, now = one_admitted(conns)
    with _round_trips() as n:
        s.inboxes.intake(now + 1, pending=False)
    assert n[0] == 1


def test_what_a_deposed_leader_left_behind_is_still_found_in_that_round_trip(conns):
    """The same as tests/contract/test_stale_leader.py, with new entries read in the same round trip:
    the request and the events the deposed leader took, and those that came after, are all handled."""
    r, s1, now = one_admitted(conns)
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    assert s2.tick(now + 10)
    submit(r, "alice", BODY, "b")
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"pid": 123, "start_time": now + 1})
    with contextlib.suppress(StalePlanError):
        s1.inboxes.intake(now + 11, pending=False)           # takes them, and its commit is refused
    assert r.llen(K.taken) == 1
    submit(r, "alice", BODY, "c")                       # new ones, read in the same round trip
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "start_time": now + 1,
                                        "end_time": now + 11})
    s2.inboxes.intake(now + 12, pending=False)
    assert reply(r, "b")["job_id"] == 2 and reply(r, "c")["job_id"] == 3 and r.llen(K.taken) == 0
    j = job(r, 1)
    assert j.state == states.COMPLETED and j.current.start_time == now + 1


def test_a_request_that_woke_the_scheduler_is_taken_in_the_first_read(conns):
    """The wake-up's tokens (one a request) size the LMOVEs sent with the tick's first read (look):
    a round trip fewer than for the same requests found without a wake-up's count (failed before:
    the LMOVEs always went on their own); through the wire path the wait sends that look itself."""
    r, s, now = one_admitted(conns)
    counts = []
    for t, rids in enumerate((["w1"], ["w2", "w3"])):
        for hinted in (False, True):
            for rid in rids:
                submit(r, "alice", BODY, f"{rid}{hinted}")
            if hinted:
                assert s.store.wait_wake(0.01)
            else:
                woke(r)      # emptied as a test does: no count of the tokens
            with _round_trips() as n:
                s.inboxes.intake(now + 1 + t, pending=False)
            assert all(reply(r, f"{rid}{hinted}")["ok"] for rid in rids) and r.llen(K.taken) == 0
            counts.append(n[0])
    # Through the wire path (a real Redis) the wait carries the whole look too (store.wait_wake): two fewer.
    fewer = 2 if wire.call(r, [("PING",)]) is not None else 1
    assert counts[1] == counts[0] - fewer and counts[3] == counts[2] - fewer, counts


def test_a_batch_after_a_wait_is_two_round_trips(real_redis, redis_server):
    """The loop's wait moved the batch (store.wait_wake): what is left is the done keys of its request
    ids and the budgets' balances (CFG sets budgets), read in the round trip that opens the commit's
    WATCH (the lease's holder, `taken`'s length), then MULTI..EXEC. Failed before: the done keys and
    the balances were a round trip each (four)."""
    s = setup(real_redis, None, time.time())
    now = time.time()
    counts = []
    for batch in range(2):          # the first batch sizes the wait's moves for the second
        for i in range(3):
            submit(real_redis, "alice", {**BODY, "hold": True}, f"b{batch}{i}")
        assert s.store.wait_wake(1.0)
        with _round_trips() as n:
            s.inboxes.intake(now + 1 + batch, pending=False)
        counts.append(n[0])
    got = [reply(real_redis, f"b{b}{i}") for b in range(2) for i in range(3)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [1, 2, 3, 4, 5, 6]
    assert real_redis.llen(K.taken) == 0 and counts[1] == 2, counts


def test_a_round_that_fails_after_its_fence_leaves_nothing_watched_and_answers_once(real_redis, redis_server,
                                                                                     monkeypatch):
    """A crash point the early fence adds: Redis lost between the round's first read (which opened
    the commit's WATCH and holds the lease lock) and its commit. The WATCH and the lock are let go
    (a lock kept would hang the next commit or renewal), nothing is written, and the next tick
    answers the request once."""
    s = setup(real_redis, None, time.time())
    now = time.time()
    submit(real_redis, "alice", {**BODY, "hold": True}, "x")
    real = s.handlers.handle

    def lost(*a, **kw):
        monkeypatch.setattr(s.handlers, "handle", real)
        raise redis.ConnectionError("lost")
    monkeypatch.setattr(s.handlers, "handle", lost)
    with contextlib.suppress(redis.ConnectionError):
        s.tick(now)
    assert not s.store.lease_lock.locked() and reply(real_redis, "x") is None
    s.leading = False          # as the loop does after a Redis error: the next tick reloads
    s.tick(now + 1)
    assert len(real_redis.lrange(K.reply("x"), 0, -1)) == 1 and real_redis.llen(K.taken) == 0
