"""The scheduler's busiest pipelines sent on redis-py's own connection and read by resp.Reader.

A group commit of 100 submits is ~500 commands (a reply is RPUSH, EXPIRE and SET; an acknowledgement
an LREM), and a tick takes its requests with one LMOVE each. redis-py reads each reply through four
layers (the connection, the parser, its socket buffer, the pipeline's per-command parse): ~5 µs a
reply, a fifth of the scheduler's CPU per request on the live path (issue 39 item 3). resp.Reader, the
thin client's parser, reads them in ~1 µs.

Only where nothing else could be on that socket: a plain TCP or unix connection (not Sentinel's, whose
reads handle a failover; not TLS; not fakeredis), nothing unread in redis-py's buffer, every argument
plain (str, bytes, int, float). Anything else goes through redis-py as before. What a caller
sees is what redis-py gives: the same replies (response callbacks applied), the same exceptions (an
error reply parsed by the connection's parser; a connection lost while watching is a WatchError)."""
import os
import threading
import weakref

import redis
from redis._parsers import _RESP2Parser, _RESP3Parser
from redis.connection import Connection, UnixDomainSocketConnection

from . import resp
from .faults import ConnectionLost, RespError

# What a lost connection raises here: the socket's own errors while reading (ConnectionLost and
# Desync are OSErrors; ValueError: a garbled length), redis-py's while it sends.
_LOST = (OSError, ValueError, redis.ConnectionError, redis.TimeoutError)

_PLAIN = frozenset((str, bytes, int, float))     # a float as redis-py writes it: repr() is str()
_FAST = (Connection, UnixDomainSocketConnection)
# redis-py's own Python parsers, whose buffer says whether a reply is half read. hiredis's (chosen by
# redis-py whenever hiredis is importable) keeps unread bytes inside its C reader, where they cannot be
# seen: such a connection goes through redis-py.
_PARSERS = (_RESP2Parser, _RESP3Parser)


class Desync(ConnectionLost):
    """A reply that cannot be the one the command asked for: the connection is dropped."""


def _ready(c) -> bool:
    """Whether `c` is a connection this path can send on and read from (above)."""
    if type(c) not in _FAST or getattr(c, "_resp2_fallback", False) or c._sock is None:
        return False
    parser = getattr(c, "_parser", None)
    return type(parser) in _PARSERS and parser._buffer is not None and not parser._buffer.unread_bytes()


# RESP's headers of each array size and bulk length, made once: a group commit of 100 submits packs
# ~1,500 arguments, and a header formatted each (resp.pack, which the clients keep: these tables are
# ~0.1 ms of an import) with the type checks of every argument in a pass of their own was ~14 % of the
# scheduler's CPU per request in the 100-client drain (py-spy; issue 39).
_ARRAY = tuple(b"*%d\r\n" % n for n in range(64))
_BULK = tuple(b"$%d\r\n" % n for n in range(1024))


def _packed(cmds) -> bytes | None:
    """resp.pack's bytes of `cmds`; None where a command's name is not a plain word (redis-py splits
    such a name on whitespace) or an argument is not plain (a StrEnum is its text; a bool or None is
    redis-py's to pack, or refuse): redis-py sends those."""
    out: list = []
    app, arrays, bulks, crlf = out.append, _ARRAY, _BULK, b"\r\n"
    last, piece, start = None, b"", 0
    for args in cmds:
        if args is last:        # the same command again ([cmd] * n: the LMOVEs a wait sends ahead): packed once
            if not piece:
                piece = b"".join(out[start:])
            app(piece)
            continue
        last, piece, start = args, b"", len(out)
        head = args[0]
        if type(head) is not str or not (head.isascii() and head.isalpha()):
            return None
        k = len(args)
        app(arrays[k] if k < 64 else b"*%d\r\n" % k)
        for a in args:
            t = type(a)
            if t is str:
                a = a.encode()
            elif t is not bytes:
                if t is int or t is float:
                    a = str(a).encode()
                elif isinstance(a, str):
                    a = a.encode()
                else:
                    return None
            n = len(a)
            app(bulks[n] if n < 1024 else b"$%d\r\n" % n)
            app(a)
            app(crlf)
    return b"".join(out)


def _exchange(c, cmds, decode: bool, packed: bytes) -> list:
    """Send `packed` (`cmds`, _packed) at once on `c`'s socket and read one reply each (an error reply
    as a RespError in its place). Anything past the last reply means the socket held something
    else: Desync."""
    # Sent by the connection (its errors: a dropped socket is disconnected, ConnectionError), read here.
    c.send_packed_command([packed], check_health=False)
    reader = resp.Reader(c._sock.recv, decode)
    out = _queued(reader, len(cmds)) if cmds[0] == ("MULTI",) else [reader.read() for _ in cmds]
    if reader.pos != len(reader.buf):
        raise Desync("bytes past the last reply")
    return out


_QUEUED = b"+QUEUED\r\n"


def _queued(reader: resp.Reader, n: int) -> list:
    """The n replies of MULTI, the commands and EXEC: each command's QUEUED taken off the buffer as
    it stands (a group commit queues ~500 of them; a reply read by read() each was a tenth of the
    transaction's CPU), anything else (a refusal, a reply cut by the buffer's end) read as usual."""
    out = [reader.read()]
    left, queued = n - 2, "QUEUED" if reader.decode else b"QUEUED"
    while left > 0:
        k = _run(reader.buf, reader.pos, left)
        reader.pos += 9 * k
        out += [queued] * k
        left -= k
        if left > 0:
            out.append(reader.read())
            left -= 1
    out.append(reader.read())
    return out


def _run(buf: bytes, pos: int, most: int) -> int:
    """How many whole QUEUED replies, at most `most`, stand in `buf` from `pos` on: up to the first
    refusal ("-", never inside a QUEUED), compared as one slice against as many QUEUED, where a
    startswith each was ~0.7 us a command (8 % of the scheduler's CPU in the 100-client drain,
    py-spy --gil; issue 39). Anything else among them (no reply Redis gives a queued command) is
    found by halving: the replies before it are QUEUED, it is read as it is."""
    k = min(most, (len(buf) - pos) // 9)
    refused = buf.find(b"-", pos, pos + 9 * k)
    if refused >= 0:
        k = (refused - pos) // 9
    if buf[pos:pos + 9 * k] == _QUEUED * k:
        return k
    lo, hi = 0, k - 1               # the first lo are QUEUED, the first hi + 1 are not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if buf[pos:pos + 9 * mid] == _QUEUED * mid:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _error(c, e: RespError) -> redis.ResponseError:
    return c._parser.parse_error(str(e))


def transaction(p, read: bool = True) -> list:
    """`p.execute()` of a pipeline that WATCHed and began MULTI (store/state.SchedulerStore.txn).
    `read` False: the caller reads no reply (a commit), so redis-py's callbacks are not run over
    them (~3 us a request: a group commit of 100 submits has ~400 replies); errors are raised alike.
    What it returns then is each reply as Redis gave it, or redis-py's where this path cannot go."""
    c, stack = p.connection, p.command_stack
    cmds = [("MULTI",), *(args for args, _ in stack), ("EXEC",)]
    packed = _packed(cmds) if stack and not p.scripts and _ready(c) else None
    if packed is None:
        return p.execute()
    try:
        try:
            got = _exchange(c, cmds, True, packed)
            if got[0] != "OK" or any(r != "QUEUED" and not isinstance(r, RespError) for r in got[1:-1]):
                raise Desync(f"MULTI answered {str(got[0])[:40]!r}")
        except _LOST as e:
            c.disconnect()
            raise redis.WatchError("A ConnectionError occurred on while watching one or more keys") from e
        p.watching = False          # EXEC (or its refusal) unwatches
        queued = [(i, r) for i, r in enumerate(got[1:-1]) if isinstance(r, RespError)]
        done = got[-1]
        if isinstance(done, RespError):           # EXECABORT: a command was refused as queued
            if not queued:
                raise _error(c, done)
            i, first = queued[0]
            e = _error(c, first)
            p.annotate_exception(e, i + 1, stack[i][0])
            raise e
        if done is None:
            raise redis.WatchError("Watched variable changed.")
        if not isinstance(done, list) or len(done) != len(stack):
            c.disconnect()
            raise redis.ResponseError("Wrong number of response items from pipeline execution")
        return _replies(p, c, stack, done) if read else _unread(p, c, stack, done)
    finally:
        p.reset()


def _unread(p, c, stack, replies: list) -> list:
    """The replies, the first error raised as _replies raises it."""
    for i, r in enumerate(replies):
        if isinstance(r, RespError):
            e = _error(c, r)
            p.annotate_exception(e, i + 1, stack[i][0])
            raise e
    return replies


def _replies(p, c, stack, replies: list) -> list:
    """redis-py's own handling of EXEC's replies: the first error raised, callbacks applied."""
    out = []
    for i, (r, (args, options)) in enumerate(zip(replies, stack)):
        if isinstance(r, RespError):
            e = _error(c, r)
            p.annotate_exception(e, i + 1, args)
            raise e
        options.pop("keys", None)
        callback = p.response_callbacks.get(args[0])
        out.append(callback(r, **options) if callback is not None else r)
    return out


def moves(r: redis.Redis, cmd: tuple, n: int) -> list | None:
    """Raw (undecoded) replies of `cmd` (an LMOVE: idempotent only in that a repeat moves more) sent
    `n` times as one pipeline, checked and packed once (100 of them checked and packed each were ~1 us
    a request); None where this path cannot take them, or the connection failed (the caller sends
    them through redis-py then: what the lost try moved stays in `taken`, which the next tick finds)."""
    return call(r, [cmd] * n, False, alike=True)


def call(r: redis.Redis, cmds: list[tuple], decode: bool = True, raise_on_error: bool = True,
         alike: bool = False) -> list | None:
    """The replies of `cmds` sent at once, as resp.Reader reads them: no response callbacks (an
    HGETALL is a flat list in RESP2, a SMEMBERS a list); an error reply raised as redis-py raises it
    (or, without `raise_on_error`, left in its place as a redis.ResponseError).
    None where this path cannot take them or the connection failed: the caller sends them through
    redis-py then, so each must be safe to send twice (a read, or an LMOVE whose repeat is seen).
    A tick's reads (the lease, the requests waiting, the nodes, the state file's figures, the wait
    for a wake-up) each cost ~100 µs of redis-py a round trip, a third of the fixed cost per batch."""
    pool = r.connection_pool
    kept = _kept(pool)
    if not kept.lock.acquire(blocking=False):      # another thread is on it: a connection of the pool's
        c = pool.get_connection()
        try:
            return _call(c, cmds, decode, raise_on_error, alike)
        finally:
            pool.release(c)
    try:
        if kept.c is None:
            kept.c = pool.get_connection()
        c, got = kept.c, None
        try:
            got = _call(c, cmds, decode, raise_on_error, alike)
        finally:
            if got is None or c._sock is None:   # lost, or not for this path: the pool's again
                kept.c = None
                pool.release(c)
        return got
    finally:
        kept.lock.release()


class _Kept:
    """The connection wire.call keeps out of its pool between calls: a checkout was ~30 µs of
    redis-py (a poll of the socket for stray bytes, its decorators), five or six a tick."""

    def __init__(self):
        self.pid, self.c, self.lock = os.getpid(), None, threading.Lock()


_KEPTS: "weakref.WeakKeyDictionary[object, _Kept]" = weakref.WeakKeyDictionary()


def _kept(pool) -> _Kept:
    """This process's kept connection of `pool` (a child after a fork takes its own)."""
    k = _KEPTS.get(pool)
    if k is None or k.pid != os.getpid():
        k = _KEPTS[pool] = _Kept()
    return k


def _call(c, cmds: list[tuple], decode: bool, raise_on_error: bool, alike: bool = False) -> list | None:
    packed = (_packed(cmds[:1]) if alike else _packed(cmds)) if _ready(c) else None
    if packed is None:
        return None
    try:
        got = _exchange(c, cmds, decode, packed * len(cmds) if alike else packed)
    except _LOST:
        c.disconnect()
        return None
    if not raise_on_error:
        return [_error(c, x) if isinstance(x, RespError) else x for x in got]
    bad = next((x for x in got if isinstance(x, RespError)), None)
    if bad is not None:
        raise _error(c, bad)
    return got


def watch_get(p, key: str, listed: str, more: list[tuple] = ()) -> tuple:
    """`p.watch(key, listed)`, then `p.get(key)`, `p.llen(listed)` and the reads `more` (a pipeline not
    yet watching), in one round trip where this path can take it: the fence of every transaction
    (store/state.SchedulerStore.txn) was two, and the length of the list it watches comes with it
    (`more`: a round's done keys and balances, requestq.replies_done; as call() reads them)."""
    if p.connection is None and not p.watching:
        c = p.connection = p.connection_pool.get_connection()
        cmds = [("WATCH", key, listed), ("GET", key), ("LLEN", listed), *more]
        packed = _packed(cmds) if _ready(c) else None
        if packed is not None:
            try:
                got = _exchange(c, cmds, True, packed)
            except _LOST:
                c.disconnect()      # nothing watched yet: redis-py reconnects and asks again below
            else:
                for x in got:
                    if isinstance(x, RespError):
                        raise _error(c, x)
                p.watching = True
                return got[1], got[2], *got[3:]
    p.watch(key, listed)
    try:
        return p.get(key), p.llen(listed), *[p.execute_command(*m) for m in more]
    except redis.WatchError as e:
        # redis-py's word for a connection lost while watching (no EXEC yet, so no key changed under
        # us): Redis away, which the scheduler's loop rides out (a Sentinel failover), where a
        # WatchError escaped its tick and stopped the scheduler.
        p.reset()
        raise redis.ConnectionError(f"connection lost while watching: {e}") from e


def hash_of(reply) -> dict:
    """An HGETALL as call() reads it (RESP2: a flat list; RESP3: a map) as the dict redis-py gives."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2])) if reply else {}
