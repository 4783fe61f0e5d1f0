"""AgentStore's per-attempt round trips on a real redis-server, over both transports a store may have:
redis-py (the agent's) and store/resp.py (a slot runner's, `open(..., fast=True)`): the same replies,
the same writes, the same exceptions (conn.ERRORS for a lost connection, redis-py's error classes
for error replies), and a claim that is still ours when it was sent twice."""
import json
import signal

import pytest
import redis

from labq.scheduler.store import agentside, codec, conn
from labq.scheduler.store.agentside import AgentStore, SlotRef
from tests.harness import NODE, K, put_job

pytestmark = pytest.mark.redis


@pytest.fixture(params=["redis-py", "resp"])
def store(request, redis_server, real_redis):
    s = AgentStore.open(redis_server.url, "labq", fast=request.param == "resp")
    assert (s.fast is not None) == (request.param == "resp")
    yield s
    s.close()


def test_an_attempt_from_take_to_its_last_post(store, real_redis):
    job = put_job(real_redis)
    real_redis.set(K.job_env(codec.env_ref(job)), json.dumps([["A", "1"]]))
    real_redis.set(K.control(1), "preempt:30")
    assert store.take(NODE, 0, 0.1) is None, "nothing dispatched: None after the timeout"
    real_redis.lpush(K.dispatch(NODE), "1:1")
    assert store.take(NODE, 0, 1.0) == "1:1"
    assert real_redis.lrange(K.dispatch_slot(NODE, 0), 0, -1) == ["1:1"]
    ref = SlotRef(NODE, 0, "1:1", 4242)

    got, control = store.job_and_control(1, ref)
    assert got == job and control == "preempt:30"
    assert real_redis.hget(K.node_runners(NODE), "0").startswith("running 1.1 pid=4242 ")

    won, pttl, env = store.claim(1, 1, NODE, 99, 0, job)
    assert (won, pttl, env) == (True, -1, (("A", "1"),))
    assert store.claim(1, 1, NODE, 99, 0, job)[0], "the same claim sent again (a lost reply) is still ours"
    assert not store.claim(1, 1, NODE, 100, 0, job)[0], "another runner's claim loses"
    assert real_redis.hget(K.attempt(1, 1), "claimed") == f"{NODE}:99"

    assert store.started(1, 1, NODE, 555, 1000.5) == -1
    assert real_redis.hget(K.attempt(1, 1), "pid") == "555" and real_redis.llen(K.wake) == 0, "no wake-up"
    assert store.heartbeat(1, 1, NODE, cpu_s=0.25, rss=1 << 20, ckpt="") == -1
    hb = real_redis.hgetall(K.attempt(1, 1))
    assert hb["cpu_s"] == "0.25" and hb["rss"] == str(1 << 20) and hb["ckpt"] == "" and float(hb["hb"]) > 0
    assert store.control(1) == "preempt:30"

    store.post("finished", 1, 1, NODE, {"outcome": "completed", "exit_code": 0}, ref)
    events = [e for _, e in real_redis.xrange(K.node_events(NODE))]
    assert [(e["kind"], e["job"], e["attempt"], e["node"]) for e in events] == [
        ("started", "1", "1", NODE), ("finished", "1", "1", NODE)]
    assert json.loads(events[1]["body"]) == {"outcome": "completed", "exit_code": 0}
    assert real_redis.lrange(K.wake, 0, -1) == ["events"]
    assert real_redis.llen(K.dispatch_slot(NODE, 0)) == 0
    assert real_redis.hget(K.node_runners(NODE), "0").startswith("idle pid=4242 ")


def test_a_withdrawn_attempt_is_never_claimed(store, real_redis):
    job = put_job(real_redis)
    real_redis.hsetnx(K.attempt(1, 1), "claimed", "withdrawn")
    assert store.claim(1, 1, NODE, 99, 0, job)[0] is False


def test_errors_are_redis_pys(store, real_redis, redis_server):
    real_redis.set(K.node_runners(NODE), "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.runner_state(NODE, 0, "idle")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):       # inside MULTI/EXEC
        store.release_slot(SlotRef(NODE, 0, "1:1", 1))
    assert isinstance(agentside._error("LOADING Redis is loading the dataset in memory"), conn.ERRORS)
    gone = AgentStore.open(redis_server.url.replace(".sock", "-none.sock"), "labq",
                           fast=store.fast is not None)
    with pytest.raises(conn.ERRORS):
        gone.take(NODE, 0, 0.1)


class _Interrupt(Exception):
    pass


def test_a_signal_that_interrupts_a_blocking_take_leaves_the_connection_usable(store, real_redis):
    """The slot runner's SIGTERM handler raises out of an idle BLMOVE; its last state write must
    then get its own reply, not the abandoned BLMOVE's."""
    def interrupt(*_):
        raise _Interrupt
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(_Interrupt):
            store.take(NODE, 0, 1.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    real_redis.set(K.control(7), "cancel")
    assert store.control(7) == "cancel"
    store.runner_state(NODE, 0, "stopped")
    assert real_redis.hget(K.node_runners(NODE), "0").startswith("stopped ")
