"""store/resp.py, the stdlib RESP connection of the thin client: the parser on encoded values
(hypothesis, any split of the byte stream), then the connection against a real redis-server: commands,
pipelines, error replies, AUTH with a user and password, SELECT, RESP3, reconnects, timeouts, TLS."""
import shutil
import socket
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.store import faults, resp


# -- the parser ----------------------------------------------------------------------------------
def _enc(v, resp3: bool) -> bytes:
    """The server's encoding of a value (RESP3 types only when resp3)."""
    if v is None:
        return b"_\r\n" if resp3 else b"$-1\r\n"
    if isinstance(v, bool):
        return b"#t\r\n" if v else b"#f\r\n"
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, float):
        return b",%r\r\n" % v
    if isinstance(v, resp.RespError):
        return b"-%s\r\n" % str(v).encode()
    if isinstance(v, str):
        b = v.encode()
        return b"$%d\r\n%s\r\n" % (len(b), b)
    if isinstance(v, dict):
        return b"%%%d\r\n" % len(v) + b"".join(_enc(k, resp3) + _enc(x, resp3) for k, x in v.items())
    return b"*%d\r\n" % len(v) + b"".join(_enc(x, resp3) for x in v)


scalars2 = st.none() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=50)
scalars3 = scalars2 | st.booleans() | st.floats(allow_nan=False, allow_infinity=False)
values2 = st.recursive(scalars2, lambda c: st.lists(c, max_size=5), max_leaves=20)
values3 = st.recursive(scalars3, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                       max_leaves=20)


def _reader(data: bytes, cuts):
    """A Reader over `data`, delivered in pieces cut at `cuts` (as a socket may deliver it)."""
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    it = iter(pieces)
    return resp.Reader(lambda n: next(it, b""))


@settings(max_examples=300, deadline=None)
@given(st.lists(values2, min_size=1, max_size=5), st.lists(st.integers(0, 400), max_size=10))
def test_resp2_values_parse_back_whatever_the_chunking(vals, cuts):
    r = _reader(b"".join(_enc(v, False) for v in vals), cuts)
    assert [r.read() for _ in vals] == vals


@settings(max_examples=300, deadline=None)
@given(st.lists(values3, min_size=1, max_size=5), st.lists(st.integers(0, 400), max_size=10))
def test_resp3_values_parse_back_whatever_the_chunking(vals, cuts):
    r = _reader(b"".join(_enc(v, True) for v in vals), cuts)
    assert [r.read() for _ in vals] == vals


def _reader_into(data: bytes, cuts, decode: bool = True):
    """A Reader over `data` with recv_into (Connection's): the pieces cut at `cuts`, each read at most
    as much as the buffer it is given takes, the rest kept for the next read."""
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]

    def recv(n):
        if isinstance(n, int):
            return pieces.pop(0) if pieces else b""
        got = pieces.pop(0) if pieces else b""
        if len(got) > len(n):
            pieces.insert(0, got[len(n):])
            got = got[:len(n)]
        n[:len(got)] = got
        return len(got)
    return resp.Reader(recv, decode, recv)


@settings(max_examples=50, deadline=None)
@given(st.integers(resp._RECV + 1, 3 * resp._RECV), st.lists(st.integers(0, 4 * resp._RECV), max_size=8),
       st.sampled_from(["x", "é", "x\r\n"]))
def test_a_long_string_is_read_into_its_own_buffer_and_the_stream_goes_on(n, cuts, char):
    """A bulk string longer than a read (bulkread.whole: `labq prio`'s published ranking) comes whole,
    decoded or as bytes, and the replies after it parse as before."""
    text = (char * n)[:n]
    data = _enc(["head", text, 7], False) + _enc(text, False) + _enc("after", False)
    r = _reader_into(data, cuts)
    assert [r.read() for _ in range(3)] == [["head", text, 7], text, "after"]
    r = _reader_into(data, cuts, decode=False)
    got = [r.read() for _ in range(3)]
    assert got == [[b"head", text.encode(), 7], text.encode(), b"after"] and type(got[1]) is bytes


def test_error_replies_are_values_and_the_stream_goes_on():
    r = _reader(b"-WRONGTYPE Operation against a key\r\n:5\r\n!5\r\nERR x\r\n", [3, 7, 20])
    e = r.read()
    assert isinstance(e, resp.RespError) and "WRONGTYPE" in str(e)
    assert r.read() == 5
    assert isinstance(r.read(), resp.RespError)


def test_resp3_extras_verbatim_attribute_set_bignum():
    data = b"=8\r\ntxt:abcd\r\n|1\r\n+ttl\r\n:3\r\n+OK\r\n~2\r\n+a\r\n+b\r\n(12345678901234567890\r\n"
    r = _reader(data, [5, 11])
    assert r.read() == "abcd" and r.read() == "OK" and r.read() == {"a", "b"}
    assert r.read() == 12345678901234567890


def test_a_closed_stream_is_connection_lost_not_a_hang():
    r = _reader(b"$10\r\nabc", [])
    with pytest.raises(resp.ConnectionLost):
        r.read()


def test_encode_is_a_resp_array_of_bulk_strings():
    assert resp.encode(["SET", "k", 5, "é"]) == b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n$2\r\n\xc3\xa9\r\n"


@pytest.mark.parametrize("url,want", [
    ("redis://localhost:6380/2", {"host": "localhost", "port": 6380, "db": 2, "username": None, "password": None}),
    ("redis://u%40x:p%3Aw@10.0.0.1", {"host": "10.0.0.1", "port": 6379, "db": 0, "username": "u@x", "password": "p:w"}),
    ("redis://:secret@h:1/0", {"host": "h", "port": 1, "username": None, "password": "secret"}),
    ("rediss://h?ssl_cert_reqs=none", {"scheme": "rediss", "host": "h", "port": 6379}),
    ("unix:///run/r.sock?db=3&password=pw", {"path": "/run/r.sock", "db": 3, "password": "pw"}),
    ("unix://alice:pw@/run/r.sock", {"path": "/run/r.sock", "username": "alice", "password": "pw"}),
    ("redis://[::1]:7000?protocol=3", {"host": "::1", "port": 7000, "protocol": 3}),
])
def test_urls_as_redis_py_reads_them(url, want):
    got = faults.parse_url(url)
    assert {k: got[k] for k in want} == want


def test_a_bad_url_is_a_value_error():
    with pytest.raises(ValueError):
        faults.parse_url("http://localhost")


# -- against a real redis-server -----------------------------------------------------------------
@pytest.fixture
def conn(redis_server, real_redis):
    c = resp.Connection(redis_server.url)
    yield c
    c.close()


@pytest.mark.redis
def test_commands_and_a_pipeline(conn, real_redis):
    assert conn.execute("SET", "k", "v") == "OK" and conn.execute("GET", "k") == "v"
    out = conn.pipeline([("RPUSH", "l", "a", "b"), ("LRANGE", "l", 0, -1), ("GET", "missing"), ("INCR", "l")])
    assert out[:3] == [2, ["a", "b"], None] and isinstance(out[3], resp.RespError)
    with pytest.raises(resp.RespError):
        conn.execute("INCR", "l")
    assert real_redis.lrange("l", 0, -1) == ["a", "b"]   # the error did not break the connection
    assert conn.execute("HSET", "h", "f", "é" * 3) == 1 and conn.execute("HGETALL", "h") == ["f", "é" * 3]


@pytest.mark.redis
def test_a_large_reply_arrives_whole(conn):
    conn.pipeline([("HSET", "big", *[x for i in range(5000) for x in (f"f{i}", "x" * 300)])])
    vals = conn.execute("HVALS", "big")
    assert len(vals) == 5000 and all(v == "x" * 300 for v in vals)


@pytest.mark.redis
def test_a_long_string_arrives_whole(conn):
    text = "é" + "x" * (3 * resp._RECV) + "é"        # past a read: received into its own buffer (bulkread.whole)
    assert conn.execute("SET", "long", text) == "OK"
    assert conn.pipeline([("MULTI",), ("GET", "long"), ("GET", "long"), ("EXEC",), ("GET", "k")])[3:] == [[text, text], None]
    assert conn.execute("GET", "long") == text and conn.execute("PING") == "PONG"


@pytest.mark.redis
def test_multi_exec_reads_together(conn):
    out = conn.pipeline([("MULTI",), ("SET", "a", 1), ("GET", "a"), ("EXEC",)])
    assert out == ["OK", "QUEUED", "QUEUED", ["OK", "1"]]


@pytest.mark.redis
def test_select_by_url(redis_server, real_redis):
    with resp.Connection(redis_server.url + "?db=3") as c:
        c.execute("SET", "in3", "yes")
    real_redis.execute_command("SELECT", 3)
    assert real_redis.get("in3") == "yes"


@pytest.mark.redis
def test_resp3_by_url(redis_server, real_redis):
    real_redis.hset("h", mapping={"a": "1", "b": "2"})
    with resp.Connection(redis_server.url + "?protocol=3") as c:
        assert c.execute("HGETALL", "h") == {"a": "1", "b": "2"}
        assert c.execute("SMEMBERS", "nothing") == set()


@pytest.mark.redis
def test_reconnects_once_after_the_server_drops_it(conn, real_redis):
    conn.execute("SET", "k", "1")
    real_redis.client_kill_filter(_type="normal", skipme=True)
    assert conn.execute("GET", "k") == "1"


@pytest.mark.redis
def test_blocking_pop_waits_past_the_read_timeout(redis_server, real_redis):
    with resp.Connection(redis_server.url, timeout=0.5) as c:
        t0 = time.monotonic()
        assert c.execute("BLPOP", "nothing", 1, extra_wait=1) is None
        assert time.monotonic() - t0 >= 0.9
        assert c.execute("PING") == "PONG"


@pytest.mark.redis
def test_a_silent_server_is_a_timeout_not_a_hang(tmp_path):
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    try:
        with resp.Connection(f"unix://{path}", timeout=0.3) as c, pytest.raises(resp.ConnectionLost, match="answer"):
            c.execute("PING")
    finally:
        srv.close()


def test_nothing_listening_is_connection_lost(tmp_path):
    with pytest.raises(resp.ConnectionLost, match="cannot connect"):
        resp.Connection(f"unix://{tmp_path}/none.sock").execute("PING")


@pytest.mark.redis
def test_auth_with_user_and_password(redis_server, real_redis):
    real_redis.execute_command("ACL", "SETUSER", "alice", "on", ">s3cret", "~*", "+@all")
    try:
        sock = redis_server.sock
        with resp.Connection(f"unix://alice:s3cret@{sock}") as c:
            assert c.execute("ACL", "WHOAMI") == "alice"
        with resp.Connection(f"unix://alice:s3cret@{sock}?protocol=3") as c:
            assert c.execute("ACL", "WHOAMI") == "alice"
        with pytest.raises(resp.RespError, match="WRONGPASS"):
            resp.Connection(f"unix://alice:wrong@{sock}").execute("PING")
    finally:
        real_redis.execute_command("ACL", "DELUSER", "alice")


@pytest.mark.redis
def test_password_only_auth_over_tcp(tmp_path):
    rp = _redis_with(["--port", str(_free_port()), "--requirepass", "pw"], tmp_path)
    try:
        port = rp[1]
        with resp.Connection(f"redis://:pw@127.0.0.1:{port}/1") as c:
            assert c.execute("PING") == "PONG"
        with pytest.raises(resp.RespError, match="NOAUTH"):
            resp.Connection(f"redis://127.0.0.1:{port}").execute("GET", "x")
    finally:
        rp[0].terminate()
        rp[0].wait(10)


@pytest.mark.redis
def test_tls(tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    port = _free_port()
    try:
        rp = _redis_with(["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(crt), "--tls-key-file",
                          str(key), "--tls-auth-clients", "no"], tmp_path, tls=(port, str(crt)))
    except RuntimeError as e:
        pytest.skip(f"redis-server without TLS: {e}")
    try:
        with resp.Connection(f"rediss://localhost:{port}?ssl_ca_certs={crt}") as c:
            assert c.execute("PING") == "PONG"
        with resp.Connection(f"rediss://localhost:{port}?ssl_cert_reqs=none") as c:
            assert c.execute("PING") == "PONG"
        with pytest.raises(resp.ConnectionLost):   # an unknown CA is refused
            resp.Connection(f"rediss://localhost:{port}").execute("PING")
    finally:
        rp[0].terminate()
        rp[0].wait(10)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _redis_with(args, tmp_path, tls=None):
    """A redis-server of its own (TCP, so the suite's unix-socket fixture does not fit)."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed")
    proc = subprocess.Popen([exe, *args, "--dir", str(tmp_path), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    port = int(args[args.index("--port") + 1]) if tls is None else tls[0]
    end = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise RuntimeError(proc.stdout.read().decode()[-300:])
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > end:
                proc.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)



def test_commands_already_sent_are_not_resent_when_asked(tmp_path):
    """A server that takes the command and closes: a read is sent again on a new connection, a
    signed request (resend=False) is not — the server may have run it."""
    import threading
    path = str(tmp_path / "drop.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    got = []

    def serve():
        for _ in range(3):
            c, _ = srv.accept()
            got.append(c.recv(1000))
            c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with pytest.raises(resp.ConnectionLost) as e:
        resp.Connection(f"unix://{path}", timeout=5).pipeline([("XADD", "s", "*", "a", "1")], resend=False)
    assert e.value.sent and len(got) == 1
    with pytest.raises(resp.ConnectionLost):
        resp.Connection(f"unix://{path}", timeout=5).execute("GET", "k")
    t.join(5)
    srv.close()
    assert len(got) == 3 and got[1] == got[2]


@pytest.mark.redis
def test_a_checked_pipeline_waits_only_behind_what_its_check_accepts(conn, real_redis):
    """The thin client's request and the wait for its reply go in one round trip (store/thinstore.py):
    `check` sees the writes' replies before the blocking command's is waited for. A check that
    raises is not kept waiting, and the connection it leaves is never read again (a fresh one is
    opened); one that passes gets the blocking command's reply."""
    def refuse(replies):
        if any(isinstance(r, resp.RespError) for r in replies):
            raise RuntimeError("refused")
    real_redis.set("s", "text")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        conn.pipeline([("LPUSH", "s", "x"), ("BLPOP", "reply", 5)], 5, resend=False, check=refuse)
    assert time.monotonic() - t0 < 2 and conn.sock is None
    real_redis.rpush("reply", "late")      # the abandoned BLPOP took nothing
    assert conn.execute("LPOP", "reply") == "late"
    seen = []
    pusher = threading.Timer(0.3, lambda: real_redis.rpush("reply", "answer"))
    pusher.start()
    got = conn.pipeline([("LPUSH", "req", "x"), ("BLPOP", "reply", 5)], 5, resend=False, check=seen.append)
    pusher.join(10)         # its reply read before the fixture closes the client (test_one_wake says why)
    assert seen == [[1]] and got == [1, ["reply", "answer"]] and real_redis.llen("req") == 1


def test_a_checked_pipeline_whose_wait_a_failover_cuts_is_not_sent_again(tmp_path):
    """Behind Sentinel, a demoted master UNBLOCKs the BLPOP that followed the request's writes: those
    went in (the check passed), so the request is not sent again (a credential resent is a replay);
    ConnectionLost (sent) tells the caller to wait again on its own (store/thinstore._send_pop)."""
    path = str(tmp_path / "demoted.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    got = []

    def serve():
        c, _ = srv.accept()
        got.append(c.recv(1000))
        c.sendall(b":1\r\n:1\r\n-UNBLOCKED force unblock from blocking operation\r\n")
        c.recv(1000)
        c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = resp.Connection(f"unix://{path}", timeout=5)
    conn._open()
    conn.opts.update(scheme="sentinel", service="labq")     # as behind Sentinel (no reconnect is tried)
    seen = []
    with pytest.raises(resp.ConnectionLost) as e:
        conn.pipeline([("LPUSH", "q", "x"), ("LPUSH", "w", "t"), ("BLPOP", "r", 1)], 1, resend=False,
                      check=seen.append)
    assert e.value.sent and seen == [[1, 1]] and len(got) == 1
    conn.close()
    t.join(5)
    srv.close()
