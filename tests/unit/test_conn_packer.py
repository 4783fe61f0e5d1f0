"""conn.Packer: the bytes redis-py's own packer (PythonRespSerializer, utf-8, strict) sends, for any
command the scheduler could send, faster for the common arguments; what redis-py refuses, it refuses."""
import enum

import pytest
from hypothesis import given, settings, strategies as st
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from labq.scheduler.store import conn

REDIS_PY = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)


class Color(enum.StrEnum):
    RED = "R"
    GREEN = "grün"


class Size(enum.IntEnum):
    BIG = 7


ARG = (st.text() | st.binary(max_size=40) | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
       | st.booleans() | st.sampled_from([Color.RED, Color.GREEN, Size.BIG]) | st.binary(max_size=9).map(memoryview)
       | st.text(max_size=7000))
HEAD = st.sampled_from(["MSET", "ZADD", "CLIENT SETNAME", b"HSET", b"CONFIG GET", "hset", Color.RED]) | st.text(max_size=8)


def _packed(packer, args):
    try:
        return b"".join(bytes(c) for c in packer.pack(*args))
    except DataError as e:
        return ("DataError", str(e))


@settings(max_examples=300, deadline=None)
@given(HEAD, st.lists(ARG, max_size=12))
def test_the_same_bytes_as_redis_py(head, rest):
    args = [head, *rest]
    assert _packed(conn.Packer(), args) == _packed(REDIS_PY, args)


def test_connections_made_by_connect_use_it_unless_hiredis_packs():
    r = conn.connect("unix:///nonexistent/labq.sock")
    packer = r.connection_pool.connection_kwargs.get("command_packer")
    assert isinstance(packer, conn.Packer) == conn._fast_pack()
    with pytest.raises(DataError):
        conn.Packer().pack("SET", "k", True)
