"""The thin client's first try in one function (store/thinstore.ThinStore._first): the usual answer,
whole in its first read, returned there; anything else carried on by inbox._call as that very try
(the same request id, never sent twice, never lost): BLPOP's nil, a refused write, an answer bigger
than a read, a connection lost after the send, a scheduler from before 2026-12-06 (OLD_REFUSAL).
A redis-server of the suite's, and a thread playing the scheduler (or a socket playing Redis)."""
import json
import socket
import sys
import threading

import pytest

from labq.scheduler.errors import UnreachableError
from labq.scheduler.store import inbox, resp
from labq.scheduler.store.keys import Keys
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel waits (kwait.py): Linux")


def _client(url: str, prefix: str = "labq") -> ThinClient:
    client = ThinClient(url, prefix, user="alice")
    client.store._c.execute("PING")      # open: the first try is _first's only on an open connection
    return client


def _scheduler(r, answers: list, seen: list, k: Keys) -> threading.Thread:
    """Takes a request for each of `answers` (entry -> reply, or None to leave it unanswered), under
    `k`: a prefix of the test's own, so that a failed test's thread takes no other test's request."""
    def run():
        for answer in answers:
            _, text = r.blpop(k.requests, 20)
            seen.append(text)
            entry = json.loads(text)
            reply = answer(entry)
            if reply is not None:
                r.rpush(k.reply(entry["rid"]), json.dumps(reply, separators=(",", ":")))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class _Recorded:
    """A socket whose sends are kept (the real one's attributes are read-only)."""

    def __init__(self, sock):
        self.sock, self.sent = sock, []

    def sendall(self, data):
        self.sent.append(data)
        return self.sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self.sock, name)


@pytest.mark.redis
def test_the_usual_answer_is_one_function_and_inboxs_very_bytes(redis_server, real_redis, monkeypatch):
    client, seen = _client(redis_server.url, "t1"), []
    c = client.store._c
    c.sock = _Recorded(c.sock)
    monkeypatch.setattr(inbox, "_call", lambda *a, **kw: pytest.fail("the usual answer went through inbox._call"))
    t = _scheduler(real_redis, [lambda e: {"ok": True, "job_id": 7}], seen, Keys("t1"))
    assert client.request("submit", BODY, timeout=30, tries=3) == {"ok": True, "job_id": 7}
    t.join(10)
    entry = json.loads(seen[0])
    fields = {"rid": entry["rid"], "op": "submit", "body": inbox._TEXT(BODY), "expires": entry["expires"]}
    cmds = inbox.send_commands(Keys("t1"), "alice", fields) + [("BLPOP", Keys("t1").reply(entry["rid"]), 10)]
    assert c.sock.sent == [resp.pack(cmds)] and seen[0] == cmds[0][2] and c.passed
    client.close()


@pytest.mark.redis
def test_a_request_that_could_not_be_sent_is_sent_on_a_new_connection(redis_server, real_redis):
    """The send fails (the connection shut under it): nothing went, and _call's first try sends it."""
    client, seen = _client(redis_server.url, "t6"), []
    client.store._c.sock.shutdown(socket.SHUT_WR)
    t = _scheduler(real_redis, [lambda e: {"ok": True, "job_id": 12}], seen, Keys("t6"))
    assert client.request("submit", BODY, timeout=30, tries=3) == {"ok": True, "job_id": 12}
    t.join(10)
    assert len(seen) == 1
    client.close()


@pytest.mark.redis
def test_a_nil_first_slice_then_the_answer_is_the_same_request_sent_again(redis_server, real_redis):
    """The first BLPOP slice (1 s: 3 s over 3 tries) ends with nil: _call's next try resends the same
    id, and its answer is the reply."""
    client, seen = _client(redis_server.url, "t2"), []
    t = _scheduler(real_redis, [lambda e: None, lambda e: {"ok": True, "job_id": 8}], seen, Keys("t2"))
    assert client.request("submit", BODY, timeout=3, tries=3) == {"ok": True, "job_id": 8}
    t.join(10)
    assert len(seen) == 2 and seen[0] == seen[1] and real_redis.llen(Keys("t2").requests) == 0
    client.close()


@pytest.mark.redis
def test_a_refused_request_is_said_at_once_and_its_connection_closed(redis_server, real_redis):
    client = _client(redis_server.url, "t3")
    before = real_redis.config_get("maxmemory")["maxmemory"], real_redis.config_get("maxmemory-policy")["maxmemory-policy"]
    real_redis.config_set("maxmemory-policy", "noeviction")
    real_redis.config_set("maxmemory", 1)
    try:
        with pytest.raises(UnreachableError) as e:
            client.request("submit", BODY, timeout=30, tries=3)
        assert str(e.value).startswith("Redis is full (maxmemory reached)") and "was not submitted" in str(e.value)
        assert client.store._c.sock is None     # the BLPOP's reply unread: never taken for a later command's
    finally:
        real_redis.config_set("maxmemory", before[0])
        real_redis.config_set("maxmemory-policy", before[1])
    assert real_redis.llen(Keys("t3").requests) == 0
    client.close()


@pytest.mark.redis
def test_an_answer_bigger_than_a_read_is_read_whole(redis_server, real_redis):
    client, seen = _client(redis_server.url, "t4"), []
    big = {"ok": True, "job_id": 9, "note": "x" * 200_000}       # past the first read's 64 KiB
    t = _scheduler(real_redis, [lambda e: big], seen, Keys("t4"))
    assert client.request("submit", BODY, timeout=30, tries=3) == big
    t.join(10)
    assert len(seen) == 1
    client.close()


@pytest.mark.redis
def test_a_scheduler_from_before_the_body_object_is_asked_the_old_way(redis_server, real_redis):
    client, seen = _client(redis_server.url, "t5"), []
    t = _scheduler(real_redis, [lambda e: {"ok": False, "error": inbox.OLD_REFUSAL},
                                lambda e: {"ok": True, "job_id": 10}], seen, Keys("t5"))
    assert client.request("submit", BODY, timeout=30, tries=3) == {"ok": True, "job_id": 10}
    t.join(10)
    old, new = (json.loads(s) for s in seen)
    assert isinstance(old["body"], dict) and isinstance(new["body"], str) and old["rid"] != new["rid"]
    client.close()


# -- a connection lost after the send: a socket playing Redis ---------------------------------------
def _redis_double(tmp_path, script):
    """A unix socket answering PING on its first connection, then `script(conn, accept)` on it."""
    path = str(tmp_path / "double.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(2)
    srv.settimeout(20)
    out: dict = {}

    def serve():
        c, _ = srv.accept()
        reader = resp.Reader(c.recv)
        assert reader.read() == ["PING"]
        c.sendall(b"+PONG\r\n")
        out["commands"] = [reader.read() for _ in range(3)]
        script(c, srv, out)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"unix://{path}", t, out


def test_a_connection_lost_after_the_writes_went_in_waits_again_without_sending_again(tmp_path):
    """The writes' replies came, then the connection closed: the request is in, so the client waits for
    its reply on a new connection (a lone BLPOP), as a lost wait always did."""
    def script(c, srv, out):
        c.sendall(b":1\r\n:1\r\n")
        c.close()
        c2, _ = srv.accept()
        reader = resp.Reader(c2.recv)
        out["again"] = reader.read()
        key, value = out["again"][1].encode(), b'{"ok":true,"job_id":11}'
        c2.sendall(b"*2\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(key), key, len(value), value))
        c2.recv(100)
    url, t, out = _redis_double(tmp_path, script)
    client = _client(url)
    assert client.request("submit", BODY, timeout=30, tries=3) == {"ok": True, "job_id": 11}
    client.close()
    t.join(10)
    (push, _), wake, pop = out["commands"][0][:2], out["commands"][1], out["commands"][2]
    assert push == "LPUSH" and wake[0] == "LPUSH" and pop[0] == "BLPOP"
    assert out["again"] == pop          # the same wait, the request not sent again


def test_a_connection_lost_before_any_reply_says_the_request_is_unknown(tmp_path):
    def script(c, srv, out):
        c.close()
    url, t, out = _redis_double(tmp_path, script)
    client = _client(url)
    with pytest.raises(UnreachableError) as e:
        client.request("submit", BODY, timeout=30, tries=3)
    t.join(10)
    rid = json.loads(out["commands"][0][2])["rid"]
    assert "stopped answering" in str(e.value) and f"request {rid} is unknown" in str(e.value)
    client.close()
