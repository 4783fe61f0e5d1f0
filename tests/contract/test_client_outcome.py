"""A client always knows what happened (issue 34): the scheduler commits nothing of a request past
its expiry (checked at commit), a client that gives up names its request and says "not submitted"
or "unknown - check `labq stat --rid`", that command answers, and no message holds a password."""
import json
import threading
import time

import pytest
import redis

from labq.scheduler.client import Client
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.errors import UnreachableError
from labq.scheduler.settings import config
from labq.scheduler.store import acl
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, CFG, K, push, reply, setup, start_redis, submit, taken, wait_for


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_a_request_that_expires_before_its_commit_is_never_committed(conns, monkeypatch):
    r, raw = conns
    now = time.time()
    setup(r, raw, now)
    clock = Clock(now)
    r.delete(K.leader)
    s = Scheduler(r, CFG, me="s2", clock=clock)
    s.tick(now)
    real = s.handlers.handle

    def slow(user, op, body, t):     # the handling outlasts the client's expiry
        clock.t = now + 30
        return real(user, op, body, t)
    monkeypatch.setattr(s.handlers, "handle", slow)
    push(r, "alice", {"rid": "late", "op": "submit", "body": json.dumps(BODY), "expires": f"{now + 10:.3f}"})
    s.tick(now + 1)
    assert r.zcard(K.active) == 0 and r.get(K.seq) is None and reply(r, "late") is None
    s.tick(now + 2)                   # the reload answers it on its own, at read: expired, nothing done
    got = reply(r, "late")
    assert not got["ok"] and got["code"] == 4 and got["error"].startswith("expired")
    assert r.zcard(K.active) == 0 and taken(r) == 0


def status(r, s, user, rid, ask):
    push(r, user, {"rid": ask, "op": "request_status", "body": json.dumps({"of": rid})})
    s.tick(time.time())
    return reply(r, ask)


def test_stat_rid_says_what_became_of_a_request(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", BODY, "a" * 32)
    push(r, "alice", {"rid": "b" * 32, "op": "submit", "body": json.dumps({**BODY, "gpus": 10 ** 6})})
    s.tick(time.time())
    got = status(r, s, "alice", "a" * 32, "q1")
    assert got["state"] == "submitted" and got["job_id"] == 1
    assert status(r, s, "alice", "b" * 32, "q2")["state"] == "not submitted"
    assert status(r, s, "alice", "c" * 32, "q3")["state"] == "unknown"
    assert status(r, s, "mallory", "a" * 32, "q4")["state"] == "unknown", "another user's job is not theirs to see"
    assert status(r, s, "root", "a" * 32, "q5")["job_id"] == 1, "admins see every request"
    # A request still queued when the question comes is answered first: the answer is final.
    submit(r, "alice", BODY, "d" * 32)
    assert status(r, s, "alice", "d" * 32, "q6")["state"] == "submitted"


@pytest.mark.redis
def test_a_cancel_the_client_gave_up_on_is_not_said_undone(redis_server):
    """A mass cancel that began before its deadline goes on to its end (test_mass_cancel): a client
    that gave up waiting cannot say that nothing was done."""
    r = redis_server.client()
    r.flushall()
    for client in (Client(config.loads(""), url=redis_server.url, user="alice"),
                   ThinClient(redis_server.url, "labq", user="alice")):
        with pytest.raises(UnreachableError) as e:
            client.request("cancel", {"ids": ["7"]}, timeout=2, tries=1)
        text = str(e.value)
        rid = text.split("request ")[1].split()[0]
        assert "not submitted" not in text and f"labq stat --rid {rid}" in text and "\n" not in text, text
        r.delete(K.requests, K.wake)


@pytest.mark.redis
def test_a_client_that_gives_up_says_not_submitted_with_its_request_id(redis_server):
    r = redis_server.client()
    r.flushall()
    cfg = config.loads("")
    for client in (Client(cfg, url=redis_server.url, user="alice"), ThinClient(redis_server.url, "labq", user="alice")):
        with pytest.raises(UnreachableError) as e:
            client.request("submit", BODY, timeout=2, tries=2)
        text = str(e.value)
        assert "was not submitted" in text and "\n" not in text
        rid = text.split("request ")[1].split()[0]
        assert len(rid) == 32 and r.llen(K.requests) == 2      # two tries, one request id
        assert json.loads(json.loads(r.lindex(K.requests, 0))["expires"]) < time.time() + 1
        r.delete(K.requests, K.wake)


@pytest.mark.redis
def test_redis_gone_mid_request_is_unknown_and_names_the_command(tmp_path):
    rp = start_redis(appendonly=False)
    try:
        watcher = redis.Redis(unix_socket_path=rp.sock)

        def kill_once_sent():
            wait_for(lambda: watcher.llen(K.requests) == 1, 30, what="the request in Redis")
            rp.proc.kill()
        t = threading.Thread(target=kill_once_sent)
        t.start()
        with pytest.raises(UnreachableError) as e:
            Client(config.loads(""), url=rp.url, user="alice").request("submit", BODY, timeout=30, tries=1)
        t.join()
        text = str(e.value)
        rid = text.split("request ")[1].split()[0]
        assert f"request {rid} is unknown - check `labq stat --rid {rid}`" in text and "\n" not in text
    finally:
        rp.proc.kill()
        rp.proc.wait(10)


@pytest.mark.redis
def test_no_message_holds_the_password(redis_server):
    r = redis_server.client()
    r.flushall()
    secret = "S3cret-pw-never-shown"
    rules = acl.roles(K, [])[acl.CLIENT]
    r.execute_command("ACL", "SETUSER", "pw-test-client", "on", f">{secret}", *rules)
    try:
        url = f"unix://pw-test-client:{secret}@{redis_server.sock}"
        for client in (Client(config.loads(""), url=url, user="alice"), ThinClient(url, "labq", user="alice")):
            with pytest.raises(UnreachableError) as e:
                client.request("submit", BODY, timeout=2, tries=1)
            assert secret not in str(e.value) and "was not submitted" in str(e.value)
        for client in (Client(config.loads(""), url=f"redis://u:{secret}@127.0.0.1:1/0", user="alice"),):
            with pytest.raises(UnreachableError) as e:
                client.request("submit", BODY, timeout=2, tries=1)
            assert secret not in str(e.value) and "not submitted" in str(e.value), str(e.value)
    finally:
        r.execute_command("ACL", "DELUSER", "pw-test-client")


@pytest.mark.redis
def test_the_thin_client_says_a_refused_request_at_once_and_waits_again_after_a_drop(redis_server):
    """The thin client sends its request and the first wait for the reply in one round trip: a
    request Redis refuses (here NOPERM on the request list) is said "not submitted" at once, not
    after the wait; a connection lost while it waits, the request in, is waited on again on a new
    connection, as a lone BLPOP was."""
    r = redis_server.client()
    r.flushall()
    r.execute_command("ACL", "SETUSER", "no-requests", "on", ">pw", "~*", "&*", "+@all", "-lpush")
    try:
        client = ThinClient(f"unix://no-requests:pw@{redis_server.sock}", "labq", user="alice")
        t0 = time.monotonic()
        with pytest.raises(UnreachableError) as e:
            client.request("submit", BODY, timeout=30, tries=1)
        assert "was not submitted" in str(e.value) and time.monotonic() - t0 < 5, str(e.value)
        assert client.read.nodes() == []            # the connection left behind is not read again
    finally:
        r.execute_command("ACL", "DELUSER", "no-requests")

    def answer_after_a_drop():
        wait_for(lambda: r.llen(K.requests) == 1, 30, what="the request in Redis")
        rid = json.loads(r.lindex(K.requests, 0))["rid"]
        r.client_kill_filter(_type="normal", skipme=True)
        r.rpush(K.reply(rid), json.dumps({"ok": True, "job_id": 42}))
    t = threading.Thread(target=answer_after_a_drop)
    t.start()
    assert ThinClient(redis_server.url, "labq", user="alice").request("submit", BODY, timeout=30, tries=1) == \
        {"ok": True, "job_id": 42}
    t.join()
    assert r.llen(K.requests) == 1      # sent once: the wait, not the request, was repeated
