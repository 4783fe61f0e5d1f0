"""The daemon driven with arbitrary inbox entries and events (any JSON, any field types, sizes up to
the bounds), with leaders replaced at random points, on fakeredis and on a real redis-server: a
tick never raises, every request gets exactly one reply, nothing stays pending, the ledger
verifies and no job is in an impossible state. Example counts are kept modest (make test)."""
import json
import time

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.money.ledger import verify
from labq.scheduler.store.keys import CONSUMER, GROUP
from labq.scheduler.store.reads import Reader
from tests.harness import BODY, CFG, FROZEN, K, push, setup, taken

USER = "alice"
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
SUBMIT_KEYS = ["argv", "script", "workdir", "gpus", "cpus", "mem", "time_limit", "array", "begin", "deadline",
               "account", "budget", "hold", "dependency", "ids", "node", "job_id", "retries", "signal", "tags"]
good_body = st.fixed_dictionaries({}, optional={k: json_values for k in SUBMIT_KEYS}).map(
    lambda extra: {**BODY, **extra})
texts = st.one_of(json_values.map(lambda v: json.dumps(v)), good_body.map(json.dumps), st.text(max_size=30),
                  st.sampled_from(["[" * 500 + "]" * 500, '{"a": NaN}', "[1e400]", "x" * 5000]))
ops = st.sampled_from(["submit", "cancel", "hold", "release", "requeue", "checkpoint", "drain", "resume",
                       "budget_set", "budget_override", "ledger_import", "", "bogus", "SUBMIT", "x" * 40])
scalar_text = st.one_of(st.text(max_size=20), st.integers().map(str), st.sampled_from(["1", "2", "0", "-1"]))
request = st.fixed_dictionaries({"op": ops, "body": texts},
                                optional={"expires": st.one_of(scalar_text, st.just(str(time.time() + 600))),
                                          "cred": st.text(max_size=10), "junk": st.text(max_size=10)})
finished_body = st.fixed_dictionaries({}, optional={
    k: json_values for k in ("outcome", "exit_code", "end_time", "start_time", "usage", "message",
                             "last_checkpoint", "pid")})
event = st.fixed_dictionaries(
    {"kind": st.sampled_from(["started", "finished", "alert", "bogus"]),
     "job": st.one_of(st.sampled_from(["1", "2", "3"]), scalar_text),
     "attempt": st.one_of(st.sampled_from(["1", "2"]), scalar_text),
     "node": st.sampled_from(["n1", "n2", "", "x y"]),
     "body": st.one_of(finished_body.map(json.dumps), texts)})
steps = st.lists(st.one_of(request.map(lambda f: ("request", f)), event.map(lambda f: ("event", f)),
                           st.just(("tick", None)), st.just(("crash", None)), st.just(("restart", None))),
                 min_size=1, max_size=14)


def drive(r, raw, plan) -> None:
    now = time.time()
    s = setup(r, raw, now)
    rids, n = [], 0
    for i, (what, fields) in enumerate(plan):
        now += 1
        if what == "request":
            rid = f"r{i}"
            rids.append(rid)
            push(r, USER, {**fields, "rid": rid})
        elif what == "event":
            r.xadd(K.events, fields)
        elif what == "crash":   # a leader read everything and died before acknowledging any of it
            while r.lmove(K.requests, K.taken, "RIGHT", "LEFT"):
                pass
            r.xreadgroup(GROUP, CONSUMER, {K.events: ">"})
        elif what == "restart":
            n += 1
            r.delete(K.leader)
            s = Scheduler(r, CFG, me=f"s{n + 2}", clock=FROZEN)
        if what in ("tick", "restart") or i == len(plan) - 1:
            s.tick(now)
    # Whatever a crash left pending, the next leader finishes.
    r.delete(K.leader)
    s = Scheduler(r, CFG, me="last", clock=FROZEN)
    s.tick(now + 1)
    s.tick(now + 2)
    for rid in rids:
        assert r.llen(K.reply(rid)) >= 1, f"request {rid} unanswered"
        replies = [json.loads(x) for x in r.lrange(K.reply(rid), 0, -1)]
        assert all(x == replies[0] for x in replies), f"request {rid} answered differently: {replies}"
        assert r.get(K.done(rid)) is None or json.loads(r.get(K.done(rid))) == replies[0]
    assert taken(r) == 0 and r.xpending(K.events, GROUP)["pending"] == 0
    read = Reader(r, K)
    assert verify(read.ledger_all(), read.spent(), read.ledger_keys(), read.ended()) == []
    active = set(map(int, r.zrange(K.active, 0, -1)))
    for j in read.jobs(active):
        assert j.state in states.ACTIVE and (j.state == states.PENDING or j.node)
    for j in read.ended():
        assert j.state in states.TERMINAL and j.id not in active


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_arbitrary_entries_never_break_the_daemon_fake(plan):
    server = fakeredis.FakeServer(version=(7, 0))
    drive(fakeredis.FakeRedis(server=server, decode_responses=True), fakeredis.FakeRedis(server=server), plan)


@pytest.mark.redis
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_arbitrary_entries_never_break_the_daemon_real(redis_server, plan):
    r = redis_server.client()
    r.flushall()
    import redis as redis_py
    drive(r, redis_py.Redis(unix_socket_path=redis_server.sock), plan)
