"""store/wire.py on a real redis-server: the scheduler's transactions and request moves read by
resp.Reader on redis-py's connection give what redis-py's own execution gives (replies, callbacks,
errors, a lost WATCH), and a group commit no longer reads each reply through redis-py (issue 39 item 3)."""
import json
import time

import pytest
import redis

from labq.scheduler.store import conn, resp, wire
from labq.scheduler.store.faults import RespError
from tests.harness import BODY, push, reply, setup

NOW = 1_800_000_000.0


@pytest.fixture
def both(redis_server):
    """Two clients as the scheduler connects (conn.connect): one runs redis-py's execution, one wire's."""
    r = conn.connect(f"unix://{redis_server.sock}")
    r.flushall()
    yield r
    r.close()


def _run(r, build, fast: bool, watch="lease"):
    with r.pipeline() as p:
        p.watch(watch)
        p.get(watch)
        p.multi()
        build(p)
        return wire.transaction(p) if fast else p.execute()


def _mixed(prefix):
    def build(p):
        p.set(f"{prefix}:s", "é", ex=60)
        p.rpush(f"{prefix}:l", "a", "b")
        p.expire(f"{prefix}:l", 60)
        p.zadd(f"{prefix}:z", {"1": 1.5, "2": 1800000000.123})
        p.hset(f"{prefix}:h", mapping={"x": "1", "y": 2})
        p.incrbyfloat(f"{prefix}:f", 0.1)
        p.get(f"{prefix}:s")
        p.lrem(f"{prefix}:l", 1, "a")
        p.delete(f"{prefix}:none")
    return build


def test_a_transaction_gives_redis_pys_replies(both):
    slow = _run(both, _mixed("slow"), False)
    fast = _run(both, _mixed("fast"), True)
    assert fast == slow
    assert both.zrange("fast:z", 0, -1, withscores=True) == both.zrange("slow:z", 0, -1, withscores=True)
    assert both.get("fast:s") == "é" and 0 < both.ttl("fast:l") <= 60


def test_an_error_reply_raises_as_redis_py_raises_it_and_the_rest_is_applied(both):
    got = {}
    for fast in (False, True):
        key = f"k{fast}"
        both.set(key, "text")
        with pytest.raises(redis.ResponseError) as e:
            _run(both, lambda p, key=key: (p.set(f"{key}:before", 1), p.lpush(key, "x"), p.set(f"{key}:after", 1)),
                 fast)
        got[fast] = (type(e.value), str(e.value).replace(key, "K"))
        assert both.get(f"{key}:after") == "1"      # Redis runs the rest of an EXEC
    assert got[True] == got[False]
    assert "WRONGTYPE" in got[True][1] and "Command # 2" in got[True][1]


def test_a_command_refused_as_queued_aborts_the_transaction_as_in_redis_py(both):
    got = {}
    for fast in (False, True):
        with pytest.raises(redis.ResponseError) as e:
            _run(both, lambda p, fast=fast: (p.set(f"a{fast}", 1), p.execute_command("SET", "only-a-key")), fast)
        got[fast] = (type(e.value), str(e.value))
        assert both.get(f"a{fast}") is None
    assert got[True] == got[False]


def test_a_watched_key_that_changed_is_a_watch_error_and_nothing_is_written(both):
    with both.pipeline() as p:
        p.watch("lease")
        p.multi()
        both.set("lease", "someone else")
        p.set("w", 1)
        with pytest.raises(redis.WatchError):
            wire.transaction(p)
    assert both.get("w") is None
    assert both.ping()       # the connection went back to the pool in a usable state


def test_request_moves_give_the_raw_entries_oldest_first(both):
    both.lpush("rq", *[f"é{i}".encode() for i in range(5)])
    got = wire.moves(both, ("LMOVE", "rq", "tk", "RIGHT", "LEFT"), 7)
    assert got == [f"é{i}".encode() for i in range(5)] + [None, None]
    assert both.llen("tk") == 5


def test_request_moves_are_packed_once_whatever_their_count(both, monkeypatch):
    """A tick's LMOVEs are one command n times: checked and packed once (failed before: packed n times)."""
    both.lpush("rq", *[b"x%d" % i for i in range(300)])
    packed = []
    real = wire._packed
    monkeypatch.setattr(wire, "_packed", lambda cmds: packed.append(len(cmds)) or real(cmds))
    got = wire.moves(both, ("LMOVE", "rq", "tk", "RIGHT", "LEFT"), 300)
    assert got == [b"x%d" % i for i in range(300)] and packed == [1] and both.llen("rq") == 0


class Counted:
    def __init__(self, monkeypatch):
        self.n = 0
        real = redis.client.Pipeline.parse_response

        def parse(p, *a, **kw):
            self.n += 1
            return real(p, *a, **kw)
        monkeypatch.setattr(redis.client.Pipeline, "parse_response", parse)


def test_a_group_commit_of_100_requests_reads_its_replies_in_one_pass(both, monkeypatch):
    """~5 commands a request (the record's share, the reply, its TTL, the done key, the
    acknowledgement): redis-py parsed each reply on its own, ~500 for 100 submits."""
    s = setup(both, None, NOW)
    for i in range(100):
        push(both, "alice", {"rid": f"r{i}", "op": "submit", "body": json.dumps({**BODY, "hold": True})})
    counted = Counted(monkeypatch)
    t0 = time.process_time()
    s.tick(NOW + 1)
    assert all((reply(both, f"r{i}") or {}).get("ok") for i in range(100))
    assert counted.n < 20, f"{counted.n} replies parsed by redis-py ({time.process_time() - t0:.3f} s CPU)"


class _OtherParser(redis._parsers._RESP3Parser):
    """A parser wire.py does not know, as hiredis's is (redis-py picks _HiredisParser whenever hiredis
    is importable): its unread bytes live where wire.py cannot see them."""


def _with_parser(server, parser_class) -> redis.Redis:
    pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection, path=server.sock,
                                decode_responses=True, parser_class=parser_class)
    return redis.Redis(connection_pool=pool)


def test_a_connection_with_a_parser_it_does_not_know_goes_through_redis_py(redis_server, monkeypatch):
    r = _with_parser(redis_server, _OtherParser)
    r.flushall()
    counted = Counted(monkeypatch)
    slow = _run(r, _mixed("slow"), False)
    by_redis_py, counted.n = counted.n, 0
    assert _run(r, _mixed("fast"), True) == slow
    assert counted.n == by_redis_py, f"{counted.n} of {by_redis_py} replies read by redis-py: wire read the rest"
    r.close()


def test_a_connection_reading_through_hiredis_goes_through_redis_py(redis_server):
    """Where hiredis is installed (a packager's python3-hiredis), the scheduler's commits crashed with
    AttributeError: 'bytearray' object has no attribute 'unread_bytes'."""
    hiredis_parser = pytest.importorskip("redis._parsers")._HiredisParser
    pytest.importorskip("hiredis")
    r = _with_parser(redis_server, hiredis_parser)
    r.flushall()
    assert _run(r, _mixed("h"), True) == _run(r, _mixed("p"), False)
    r.close()


def test_queued_replies_cut_anywhere_by_the_socket_read_the_same():
    """A group commit's ~500 QUEUED are taken off the buffer in a loop (wire._queued); cut at any
    byte by the reads, with a refusal among them, the replies are what read() gives one by one."""
    data = (b"+OK\r\n" + b"+QUEUED\r\n" * 3 + b"-ERR wrong number of arguments\r\n" + b"+QUEUED\r\n"
            + b"*5\r\n:1\r\n+OK\r\n$2\r\n\xc3\xa9\r\n:-22\r\n$-1\r\n")
    for size in (1, 2, 5, 9, 10, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        reader = resp.Reader(lambda n, chunks=chunks: chunks.pop(0) if chunks else b"")
        got = wire._queued(reader, 7)
        assert got[:4] == ["OK", "QUEUED", "QUEUED", "QUEUED"] and isinstance(got[4], RespError)
        assert got[5:] == ["QUEUED", [1, "OK", "é", -22, None]] and reader.pos == len(reader.buf), size


@pytest.mark.parametrize("odd", [3, 0, 40, 99])
def test_a_long_run_of_queued_is_taken_whole_and_anything_else_among_them_read_as_it_is(odd):
    """wire._run takes a run of QUEUED by one slice compared (issue 39); a reply among them that no
    queued command gets (here "+OK", at `odd`) is found by halving, never counted as QUEUED, and the
    replies are what read() gives one by one, cut at any size."""
    replies = [b"+QUEUED\r\n"] * 100
    replies[odd] = b"+OK\r\n"
    data = b"+OK\r\n" + b"".join(replies) + b"*1\r\n:7\r\n"
    for size in (1, 7, 9, 64, 500, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        reader = resp.Reader(lambda n, chunks=chunks: chunks.pop(0) if chunks else b"")
        got = wire._queued(reader, 102)
        assert got[0] == "OK" and got[-1] == [7] and reader.pos == len(reader.buf), size
        assert [i for i, r in enumerate(got[1:-1]) if r != "QUEUED"] == [odd] and got[1 + odd] == "OK", size


def test_a_connection_lost_while_watching_is_redis_away_not_a_watch_error(both):
    """A Sentinel failover under load: the round's first read (watch_get, requestq.replies_done) loses
    its connection after the WATCH. redis-py says WatchError there, which the scheduler's loop took
    for a refusal and stopped on (tests/e2e/test_sentinel_failover.py, kill -9 of the master); it
    is Redis away, which the loop rides out. The connection here is killed by its own command (Redis
    answers it, then closes the connection: the read after it is lost), on either path of watch_get."""
    kill_all = ("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no")
    with both.pipeline() as p:
        with pytest.raises(redis.ConnectionError, match="connection lost while watching"):
            wire.watch_get(p, "lease", "taken", [kill_all, ("PING",)])
        assert not p.watching
    both.set("after", "1")      # the client's pool serves the next command on a new connection
    assert both.get("after") == "1"
