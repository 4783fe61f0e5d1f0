"""store/wire._packed, the scheduler's packer of its pipelines (made-once RESP headers, its arguments'
type checks in the same pass), writes what resp.pack writes for every command of plain arguments:
text (non-ASCII, long), bytes (empty, 1,023 and 1,024 long and past), integers, floats, a StrEnum,
arrays of 63, 64 arguments and more, one command object repeated ([cmd] * n, packed once) among others;
and declines (None, redis-py sends them) a command holding a bool,
None or bytearray, or one whose name is not a plain word."""
import enum

from hypothesis import given, settings, strategies as st

from labq.scheduler.store import resp, wire


class Word(enum.StrEnum):
    HELD = "held"
    WIDE = "中文"


size = st.sampled_from([0, 1, 9, 10, 99, 100, 1022, 1023, 1024, 1025, 4096])
arg = st.one_of(
    st.text(max_size=20),
    size.map(lambda n: "é" * n),
    size.map(lambda n: b"x" * n),
    st.binary(max_size=30),
    st.integers(-10**12, 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(list(Word)),
)
name = st.sampled_from(["SET", "MSET", "RPUSH", "EXPIRE", "LMOVE", "multi"])
command = st.tuples(name, st.lists(arg, max_size=70)).map(lambda c: (c[0], *c[1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(command, min_size=1, max_size=6))
def test_packed_is_what_resp_pack_writes(cmds):
    assert wire._packed(cmds) == resp.pack(cmds)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(command, st.integers(1, 4)), min_size=1, max_size=5))
def test_a_command_repeated_is_what_resp_pack_writes(runs):
    """Runs of one command object ([cmd] * n, as a wait's LMOVEs) beside others and beside equal commands
    that are other objects: packed once a run, the same bytes."""
    cmds = [c for cmd, n in runs for c in [cmd] * n]
    assert wire._packed(cmds) == resp.pack(cmds)
    again = cmds + [tuple(cmds[0])] + [cmds[0]] * 2      # an equal copy between runs of the object
    assert wire._packed(again) == resp.pack(again)


def test_a_repeated_command_that_must_be_declined_is():
    assert wire._packed([("SET", "k", "v")] * 3 + [("SET", "k", None)] * 2) is None


def test_the_edges_of_the_header_tables():
    for n in (62, 63, 64, 65, 200):
        cmds = [("MSET", *["k"] * n)]
        assert wire._packed(cmds) == resp.pack(cmds), n
    for n in (1023, 1024, 1025):
        cmds = [("SET", "k", b"v" * n), ("SET", "k", "é" * n)]
        assert wire._packed(cmds) == resp.pack(cmds), n


def test_what_redis_py_must_send_is_declined():
    for bad in (True, None, bytearray(b"x"), 1.5j, ["x"]):
        assert wire._packed([("SET", "k", "v"), ("SET", "k", bad)]) is None, bad
    for head in ("CLIENT KILL", "", "SÉT", b"SET", 7):
        assert wire._packed([(head, "k")]) is None, head
