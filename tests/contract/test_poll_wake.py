"""A unix socket's requests from its second on wait for their first bytes in poll(), then in recv()
(store/kwait.arrived): a reader asleep in recv() is also woken when Redis reads the request (the
send buffer freed), to find nothing and sleep again; one in poll() for POLLIN is not. Two wake-ups
a request, not three; the answers, the pop's nil, a refusal and an answer in pieces read as before."""
import json
import subprocess
import sys
import threading
import time

import pytest

from labq.scheduler.errors import UnreachableError
from labq.scheduler.store import kwait, resp
from labq.scheduler.store.keys import Keys
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, redis_full

K = Keys()
KEY = K.reply("0123456789abcdef0123456789abcdef")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RCVLOWAT and poll waits: Linux")

# A server that answers each request (two writes and a BLPOP) slowly, in three steps: it reads the
# request only once the client sleeps on it, the writes' replies come later, the answer later still.
# A process, not a thread: the client's wake-ups are then its own, never a wait for the GIL.
SERVER = r"""
import socket, sys, time
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept()
key, value = sys.argv[2].encode(), sys.argv[3].encode()
answer = b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
while True:
    time.sleep(0.03)
    got = c.recv(100000)
    if not got:
        break
    time.sleep(0.03)
    c.sendall(b":1\r\n:1\r\n")
    time.sleep(0.03)
    c.sendall(answer)
"""


def _request(conn, key: str, seconds: int, seen: list):
    return conn.pipeline([("LPUSH", K.requests, "x"), ("LPUSH", K.wake, "t"), ("BLPOP", key, seconds)], seconds,
                         resend=False, check=seen.append, least=kwait.least_for(2, key))


def _waits() -> int:
    """This thread's voluntary context switches so far: its sleeps."""
    with open("/proc/thread-self/status") as f:
        return int(next(line for line in f if line.startswith("voluntary_ctxt_switches")).split(":")[1])


@linux
def test_from_the_second_request_on_a_request_wakes_its_reader_twice(tmp_path):
    path = str(tmp_path / "slow.sock")
    p = subprocess.Popen([sys.executable, "-c", SERVER, path, KEY, '{"ok":true}'], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        with resp.Connection(f"unix://{path}", timeout=5) as c:
            assert _request(c, KEY, 5, []) == [1, 1, [KEY, '{"ok":true}']]     # the first: recv alone
            n, before = 5, _waits()
            for _ in range(n):
                seen: list = []
                assert _request(c, KEY, 5, seen) == [1, 1, [KEY, '{"ok":true}']] and seen == [[1, 1]]
            # Each: poll until the writes' replies, recv until the answer. In recv alone, a third: the
            # server's read of the request woke it.
            assert _waits() - before <= 2 * n
            assert c.poller[0] is c.sock and c.poller[1] not in (True, False)
    finally:
        p.kill()
        p.wait(10)


@pytest.fixture
def conn(redis_server, real_redis):
    c = resp.Connection(redis_server.url)
    c.execute("PING")
    yield c
    c.close()


@linux
@pytest.mark.redis
def test_a_late_answer_a_nil_and_a_lost_connection_read_as_before(conn, real_redis):
    real_redis.rpush(KEY, "first")
    assert _request(conn, KEY, 5, []) == [1, 1, [KEY, "first"]] and conn.poller[1] is True
    real_redis.rpush(KEY, "second")
    assert _request(conn, KEY, 5, []) == [2, 2, [KEY, "second"]] and conn.poller[1] not in (True, False)
    t0 = time.monotonic()
    assert _request(conn, KEY, 1, [])[-1] is None          # the pop's nil, once its own timeout is up
    assert 0.9 <= time.monotonic() - t0 < 5
    conn.sock.close()           # a socket gone under it: the next request opens one, its poll with it
    conn.sock = None
    real_redis.rpush(KEY, "third")
    assert _request(conn, KEY, 5, []) == [4, 4, [KEY, "third"]] and conn.poller[1] is True
    real_redis.rpush(KEY, "fourth")
    assert _request(conn, KEY, 5, []) == [5, 5, [KEY, "fourth"]] and conn.poller[0] is conn.sock


@linux
@pytest.mark.redis
def test_a_full_redis_is_said_at_once_from_the_second_request_too(redis_server):
    r = redis_server.client()
    r.flushall()
    client = ThinClient(redis_server.url, "labq", user="alice")

    def answer_one():       # the scheduler's part for the first request: its reply pushed
        _, entry = r.blpop(K.requests, 10)
        r.rpush(K.reply(json.loads(entry)["rid"]), '{"ok":true}')
    t = threading.Thread(target=answer_one)
    t.start()
    assert client.request("submit", BODY, timeout=30, tries=1) == {"ok": True}
    t.join(10)
    assert client.store._c.poller[1] is True        # the next request waits in poll first
    with redis_full(r):
        t0 = time.monotonic()
        with pytest.raises(UnreachableError) as e:
            client.request("submit", BODY, timeout=30, tries=1)
        assert str(e.value).startswith("Redis is full (maxmemory reached)") and time.monotonic() - t0 < 5
        assert client.store._c.poller[1] not in (True, False)
    r.flushall()


@linux
@pytest.mark.redis
def test_over_tcp_a_request_waits_in_recv_alone():
    """TCP wakes a reader neither for the writes' replies (SO_RCVLOWAT) nor for the buffer freed."""
    c = resp.Connection("redis://127.0.0.1:1/0")
    c.opts["scheme"] = "redis"
    c.sock = object()
    assert kwait.arrived(c, 1.0) and kwait.arrived(c, 1.0) and c.poller[1] is False
