"""Arbitrary bytes in everything a client or a node writes (issue 34): requests, wake tokens,
shared and per-node events. Each example feeds a round of such entries, then a legitimate request;
the tick never raises, the legitimate request is answered, nothing stays pending. Each example
carries ENTRIES entries, so the cases add up to well over 10,000 at a modest wall time."""
import json
import time

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.store import inbox
from labq.scheduler.store.keys import GROUP
from tests.harness import BODY, K, reply, setup, submit, taken

USER = "alice"
ENTRIES = 40
GOOD = json.dumps(BODY).encode()
junk = st.binary(max_size=48)
# Text that is nearly right, with arbitrary bytes spliced in: reaches past the first check.
spliced = st.tuples(st.sampled_from([b"submit", b"cancel", GOOD, b'{"ids": [1, 2]}', b"1", b"n1", b"finished",
                                     b"started", b"user:" + USER.encode(), str(time.time() + 600).encode()]),
                    st.integers(0, 64), junk).map(lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:])
value = st.one_of(junk, spliced, st.sampled_from([b"", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"x" * 5000]))
name = st.one_of(st.sampled_from([b"rid", b"op", b"body", b"expires", b"cred", b"user",
                                  b"kind", b"job", b"attempt", b"node"]), junk.filter(bool))
texts = st.one_of(value.map(lambda b: b.decode("utf-8", "surrogateescape")), st.text(max_size=16),
                  st.sampled_from(["submit", "cancel", GOOD.decode(), USER, "\ud800"]))
as_json = st.fixed_dictionaries({"op": texts, "body": texts, "user": texts},
                                optional={"rid": texts, "expires": texts, "cred": texts}).flatmap(
    lambda base: st.dictionaries(st.text(max_size=8), st.one_of(texts, st.integers(), st.none(), st.lists(texts)),
                                 max_size=3).map(lambda extra: {**base, **extra}))
# A body written as itself, last (inbox.entry_text, the way clients send one): a good one, odd ones,
# one that is no JSON at all between its braces.
as_entry = st.tuples(as_json, st.sampled_from([GOOD.decode(), '{"ids": [1, 2]}', "{}", "{x}", '{"a": "\\ud800"}',
                                               '{"argv": [1e999]}', "{" * 200 + "}"])).map(
    lambda t: inbox.entry_text({**{k: v for k, v in t[0].items() if k != "user"}, "body": t[1]},
                               str(t[0]["user"])).encode("utf-8", "surrogatepass"))
# A request is one JSON object of text fields (store/inbox.py): bytes of every kind, JSON of every
# shape, and nearly right JSON with bytes spliced in.
request = st.one_of(
    value, as_json.map(lambda d: json.dumps(d, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.tuples(as_json.map(lambda d: json.dumps(d).encode()), st.integers(0, 80), junk).map(
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:]),
    as_entry, st.tuples(as_entry, st.integers(0, 200), junk).map(lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:]))
event = st.fixed_dictionaries({b"kind": value, b"job": value, b"attempt": value},
                              optional={b"node": value, b"body": value}).flatmap(
    lambda base: st.dictionaries(name, value, max_size=3).map(lambda extra: {**base, **extra}))
entry = st.one_of(request.map(lambda f: ("inbox", f)), event.map(lambda f: ("events", f)),
                  event.map(lambda f: ("node", f)), value.map(lambda t: ("wake", t)))
rounds = st.lists(entry, min_size=ENTRIES, max_size=ENTRIES)


def drive(r, raw, entries, n: int) -> None:
    now = time.time()
    s = setup(r, raw, now)
    p = raw.pipeline(transaction=False)
    for where, fields in entries:
        if where == "wake":
            p.lpush(K.wake, fields)
        elif where == "inbox":
            p.lpush(K.requests, fields or b"-")
        else:
            stream = {"events": K.events, "node": K.node_events("n1")}[where]
            p.xadd(stream, fields)
    p.lpush(K.wake, f"user:{USER}")
    p.execute()
    s.tick(now + 1, s.store.wait_wake(0.01))
    rid = f"legit-{n}"
    submit(r, USER, BODY, rid)
    s.tick(now + 2, s.store.wait_wake(0.01))
    got = reply(r, rid)
    assert got is not None and got["ok"], got
    assert taken(r) == 0
    for stream in (K.events, K.node_events("n1")):
        assert r.xpending(stream, GROUP)["pending"] == 0
    assert all(len(f["entry"]) < 4096 for _, f in r.xrange(K.dead))


COUNT = [0]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds)
def test_arbitrary_bytes_never_stop_the_scheduler_fake(entries):
    server = fakeredis.FakeServer(version=(7, 0))
    COUNT[0] += 1
    drive(fakeredis.FakeRedis(server=server, decode_responses=True), fakeredis.FakeRedis(server=server), entries,
          COUNT[0])


@pytest.mark.redis
@settings(max_examples=160, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(entries=rounds)
def test_arbitrary_bytes_never_stop_the_scheduler_real(redis_server, entries):
    import redis as redis_py
    r = redis_server.client()
    r.flushall()
    COUNT[0] += 1
    drive(r, redis_py.Redis(unix_socket_path=redis_server.sock), entries, COUNT[0])
