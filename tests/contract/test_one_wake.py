"""The thin client's request and the first wait for its reply: one round trip and one wake-up
(store/kwait.py). Its first read waits in the kernel (SO_RCVLOWAT) for more bytes than the writes'
replies alone can be, so they and the reply come back together; a refusal still comes back at once,
BLPOP's nil when its own timeout is up, and an answer in pieces is read whole."""
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, strategies as st

from labq.scheduler.errors import UnreachableError
from labq.scheduler.store import kwait, resp
from labq.scheduler.store.keys import Keys
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, redis_full, wait_for

K = Keys()
KEY = K.reply("0123456789abcdef0123456789abcdef")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RCVLOWAT waits: Linux")


def test_the_least_is_more_than_the_writes_replies_and_no_more_than_an_answer():
    least = kwait.least_for(2, KEY)
    biggest_writes = len(b":%d\r\n" % (2 ** 63 - 1)) * 2
    shortest = len(b":1\r\n:1\r\n" + resp.pack([(KEY, "")]))     # BLPOP's answer: *2, the key, an empty value
    assert biggest_writes < least <= shortest
    assert kwait.least_for(2, "k") == 0         # a key too short to tell the two apart: no waiting for it


@pytest.fixture
def conn(redis_server, real_redis):
    c = resp.Connection(redis_server.url)
    yield c
    c.close()


def _request(conn, key: str, seconds: int, seen: list):
    return conn.pipeline([("LPUSH", K.requests, "x"), ("LPUSH", K.wake, "t"), ("BLPOP", key, seconds)], seconds,
                         resend=False, check=seen.append, least=kwait.least_for(2, key))


@linux
@pytest.mark.redis
def test_the_writes_replies_and_a_late_answer_come_in_one_read(conn, real_redis):
    conn.execute("PING")
    assert conn.kernel
    pusher = threading.Timer(0.3, lambda: real_redis.rpush(KEY, "answer"))
    pusher.start()
    seen = []
    assert _request(conn, KEY, 5, seen) == [1, 1, [KEY, "answer"]] and seen == [[1, 1]]
    # The pusher has its reply before the fixture closes its client: redis-py sends a command again
    # when its connection is closed under it, and a second "answer" would outlive this test.
    pusher.join(10)
    # The reader never asked for more: the first read held the writes' replies until the answer came.
    assert conn.least == kwait.least_for(2, KEY)
    assert conn.execute("LLEN", K.requests) == 1 and conn.least == 1     # other reads wait for any byte


@linux
@pytest.mark.redis
def test_no_answer_is_the_pops_nil_when_its_own_timeout_is_up(conn):
    t0 = time.monotonic()
    assert _request(conn, KEY, 1, [])[-1] is None
    assert 0.9 <= time.monotonic() - t0 < 5          # not the connection's 30 s on top


@pytest.mark.redis
def test_a_full_redis_is_said_at_once_not_after_the_wait(redis_server):
    r = redis_server.client()
    r.flushall()
    with redis_full(r):
        t0 = time.monotonic()
        with pytest.raises(UnreachableError) as e:
            ThinClient(redis_server.url, "labq", user="alice").request("submit", BODY, timeout=30, tries=1)
        assert str(e.value).startswith("Redis is full (maxmemory reached)") and time.monotonic() - t0 < 5


@linux
def test_an_answer_in_pieces_is_read_whole(tmp_path):
    """A server that answers the writes, then the reply in two parts: the first read returns what
    came by the pop's timeout, and the reader reads on, any byte at a time, to the end."""
    path = str(tmp_path / "slow.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    key, value = KEY.encode(), b'{"ok":true,"job_id":7}'
    whole = b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)

    def serve():
        c, _ = srv.accept()
        c.recv(10000)
        c.sendall(b":1\r\n:1\r\n")
        time.sleep(1.3)           # past the first read's wait (the pop's 1 s): it returns the writes' replies
        c.sendall(whole[:20])
        time.sleep(0.2)
        c.sendall(whole[20:])
        c.recv(100)
        c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with resp.Connection(f"unix://{path}", timeout=5) as c:
        assert _request(c, KEY, 1, []) == [1, 1, [KEY, value.decode()]] and c.least == 1
    t.join(5)
    srv.close()


@linux
@pytest.mark.redis
def test_over_tcp_too(tmp_path):
    """TCP waits the same way (there the kernel does not even wake the reader for the writes' replies)."""
    import redis
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--dir", str(tmp_path), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _answers(port), 20, what="redis-server on TCP")
        with resp.Connection(f"redis://127.0.0.1:{port}/0") as c:
            c.execute("PING")
            assert c.kernel
            other = redis.Redis(port=port)
            pusher = threading.Timer(0.3, lambda: other.rpush(KEY, "answer"))
            pusher.start()
            assert _request(c, KEY, 5, []) == [1, 1, [KEY, "answer"]] and c.least == kwait.least_for(2, KEY)
            pusher.join(10)
            t0 = time.monotonic()
            assert _request(c, KEY, 1, [])[-1] is None and time.monotonic() - t0 < 5
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


# -- the usual answer cut out in one pass (kwait.popped), and the request on an open connection ---------
_writes = st.lists(st.integers(0, 2 ** 63 - 1), min_size=1, max_size=3)
_texts = st.text(max_size=300) | st.sampled_from(["", "a\r\nb", "$3\r\n", "\r\n"])


def _answer(writes: list, key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    return b"".join(b":%d\r\n" % n for n in writes) + b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v)


@given(_writes, _texts, _texts)
def test_a_whole_answer_is_cut_out_as_the_reader_reads_it(writes, key, value):
    data = _answer(writes, key, value)
    assert kwait.popped(data, len(writes), True) == [*writes, [key, value]]
    assert kwait.popped(data, len(writes), False) == [*writes, [key.encode(), value.encode()]]


@given(_writes, _texts, st.data())
def test_anything_else_is_left_to_the_reader(writes, value, data):
    """A refused write, BLPOP's nil, an answer cut short, bytes past it: None (the reader reads them)."""
    whole = _answer(writes, KEY, value)
    i = data.draw(st.integers(0, len(writes) - 1))
    refused = whole.replace(b":%d\r\n" % writes[i], b"-OOM command not allowed\r\n", 1)
    nil = b"".join(b":%d\r\n" % n for n in writes) + b"*-1\r\n"
    cut = whole[:data.draw(st.integers(0, len(whole) - 1))]
    for buf in (refused, nil, cut, whole + b":1\r\n"):
        assert kwait.popped(buf, len(writes), True) is None


@pytest.mark.redis
def test_a_request_on_an_open_connection_is_one_exchange(conn, real_redis):
    """push_pop sends the request and reads its answer itself where the connection is open (pipeline's
    loop is for opening one, and for Sentinel's); `passed` says the writes went in."""
    conn.execute("PING")
    real_redis.rpush(KEY, "answer")

    def no_pipeline(*a, **kw):
        raise AssertionError("an open connection's request went through pipeline()")
    conn.pipeline, seen = no_pipeline, []
    assert kwait.push_pop(conn, [("LPUSH", K.requests, "x"), ("LPUSH", K.wake, "t")], KEY, 5, seen.append) == [KEY, "answer"]
    assert seen == [[1, 1]] and conn.passed and real_redis.llen(K.requests) == 1
