"""Bytes in, one line out (issue 34): whatever bytes a client or a node writes into an inbox, the wake
list or an event, the scheduler reads them as bytes, dead-letters what is not UTF-8 text of a sane
size (values redacted), and answers the next good request; on fakeredis and a real redis-server."""
import json
import time

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.store.keys import GROUP
from tests.harness import BODY, CFG, FROZEN, K, reply, setup, submit, taken, woke

SECRET = "hunter2-secret"


def test_a_non_utf8_request_is_dead_lettered_and_the_next_one_answered(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", BODY, "first")
    s.tick(time.time(), woke(r))
    raw.lpush(K.requests, b'{"rid": "bad", "user": "alice", "op": "\xff", "body": "' + SECRET.encode() + b'"}')
    raw.lpush(K.requests, b'{"rid": "bad2", "user": "alice", "op": "submit", "body": "{}", "x": "\\ud800' +
              SECRET.encode() + b'"}')
    raw.lpush(K.requests, b'{"rid": "bad3", "user": "alice", "op": "submit", "body": "{\\"argv\\": [\\"\xc3\\"]}"}')
    submit(r, "alice", BODY, "after")
    s.tick(time.time(), woke(r))
    assert reply(r, "after")["ok"]
    for rid in ("bad", "bad2", "bad3"):
        got = reply(r, rid)
        assert not got["ok"] and "UTF-8" in got["error"] and "\n" not in got["error"], got
    dead = r.xrange(K.dead)
    assert len(dead) == 3
    assert all(SECRET not in json.dumps(f) for _, f in dead), dead
    shown = [v for _, f in dead for v in json.loads(f["entry"]).values() if not v.endswith("bytes>")]
    assert set(shown) <= {"bad", "bad2", "bad3", "alice", "submit"}, shown     # names, never a value
    assert taken(r) == 0
    # A restart meets none of it again and still answers.
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    submit(r, "alice", BODY, "later")
    s2.tick(time.time(), woke(r))
    assert reply(r, "later")["ok"] and len(r.xrange(K.dead)) == 3


def test_wake_tokens_carry_nothing_and_create_nothing(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    keys = set(r.keys("*"))
    raw.lpush(K.wake, b"user:\xff", b"user:" + b"x" * 5000, b"\xc3(", *[f"user:u{i}".encode() for i in range(20_000)])
    assert s.store.wait_wake(0.1) and r.llen(K.wake) == 0
    s.tick(time.time())
    assert set(r.keys("*")) - keys <= {K.wake}, "a wake token creates no key (issue 34)"
    submit(r, "alice", BODY, "after")
    s.tick(time.time(), s.store.wait_wake(0.1))
    assert reply(r, "after")["ok"]


def test_a_non_utf8_event_is_dead_lettered(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    raw.xadd(K.events, {b"kind": b"finished", b"job": b"1", b"attempt": b"1", b"body": b'{"message": "\xff"}'})
    raw.xadd(K.node_events("n1"), {b"kind": b"\xff"})
    raw.xadd(K.events, {b"kind": b"started", b"job": b"1", b"attempt": b"1", b"pad": b"x" * (CFG.max_request_bytes + 70_000)})
    submit(r, "alice", BODY, "after")
    s.tick(time.time(), woke(r))
    assert reply(r, "after")["ok"]
    reasons = [f["reason"] for _, f in r.xrange(K.dead)]
    assert len(reasons) == 3 and sum("UTF-8" in x for x in reasons) == 2 and any("bytes" in x for x in reasons), reasons
    for stream in (K.events, K.node_events("n1")):
        assert r.xpending(stream, GROUP)["pending"] == 0
