"""Bytes in, one line out (issue 34): whatever bytes a client or a node writes into an inbox, the wake
list or an event, the scheduler reads them as bytes, dead-letters what is not UTF-8 text of a sane
size (values redacted), and answers the next good request; on fakeredis and a real redis-server."""
import json
import time

from labq.scheduler.daemon import Scheduler
from labq.scheduler.store.keys import GROUP
from tests.harness import BODY, CFG, FROZEN, K, reply, setup, submit, woke

SECRET = "hunter2-secret"


def test_a_non_utf8_request_is_dead_lettered_and_the_next_one_answered(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", BODY, "first")
    s.tick(time.time(), woke(r))
    raw.xadd(K.inbox("alice"), {b"rid": b"bad", b"op": b"\xff", b"body": f'{{"x": "{SECRET}"}}'.encode()})
    raw.xadd(K.inbox("alice"), {b"rid": b"bad2", b"\xfe\xff": b"1", b"op": b"submit"})
    raw.xadd(K.inbox("alice"), {b"rid": b"bad3", b"op": b"submit", b"body": b'{"argv": ["\xc3"]}'})
    submit(r, "alice", BODY, "after")
    s.tick(time.time(), woke(r))
    assert reply(r, "after")["ok"]
    for rid in ("bad", "bad2", "bad3"):
        got = reply(r, rid)
        assert not got["ok"] and "UTF-8" in got["error"] and "\n" not in got["error"], got
    dead = r.xrange(K.dead)
    assert len(dead) == 3
    assert all(SECRET not in json.dumps(f) for _, f in dead)
    assert json.loads(dead[0][1]["entry"])["body"].endswith("bytes>")
    assert r.xpending(K.inbox("alice"), GROUP)["pending"] == 0
    # A restart meets none of it again and still answers.
    r.delete(K.leader)
    s2 = Scheduler(r, raw, CFG, me="s2", clock=FROZEN)
    submit(r, "alice", BODY, "later")
    s2.tick(time.time(), woke(r))
    assert reply(r, "later")["ok"] and len(r.xrange(K.dead)) == 3


def test_a_non_utf8_wake_token_is_dead_lettered(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    raw.lpush(K.wake, b"user:\xff", b"user:" + b"x" * 5000, b"\xc3(")
    s.tick(time.time(), s.store.wait_wake(0.1))
    assert r.smembers(K.inboxes) == set()
    assert len(r.xrange(K.dead)) == 1 and "3 wake tokens" in r.xrange(K.dead)[0][1]["reason"]
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
