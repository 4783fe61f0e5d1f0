"""Waits in the kernel for resp.Connection's plain sockets (unix, TCP; Linux): the socket is left
blocking and its timeouts are SO_RCVTIMEO / SO_SNDTIMEO, not Python's (which polls before each recv
and each send: a syscall each), and a read may ask for a least number of bytes (SO_RCVLOWAT).

Why (issue 39 item 3): the thin client sends a request's writes and the blocking pop of its reply in
one round trip. Redis answers the writes at once and the pop when the scheduler has replied, so the
client was woken twice a request; each wake-up runs its Python cold (caches gone to the other
processes), the cost of most of a client's CPU in a busy drain. Asked to wait for more bytes than
the writes' replies can fill, the first read returns once, with the whole answer.

TLS sockets, and other systems, keep Python's timeouts (`usable` says which)."""
import _socket
import sys

from .faults import ConnectionLost, RespError

# struct timeval on Linux: tv_sec, tv_usec as C longs (written without struct: its import is ~0.2 ms of
# every `labq sub`)
_LONG, _ORDER = (8 if sys.maxsize > 2 ** 32 else 4), sys.byteorder
_LINUX = sys.platform.startswith("linux")
CRLF = b"\r\n"
# The largest reply of a write that succeeded: ":" + a 64-bit integer + CRLF (LPUSH's new length).
WRITE_REPLY_MAX = 22


def usable(sock) -> bool:
    """Whether `sock` (a plain socket, just connected) can wait in the kernel; it is then made blocking."""
    if not _LINUX or type(sock).__name__ != "socket":     # an ssl.SSLSocket keeps Python's
        return False
    sock.settimeout(None)
    return True


def set_timeouts(sock, read: float, send: float | None = None) -> None:
    """SO_RCVTIMEO (and SO_SNDTIMEO) in seconds: a read or send that waits that long fails with EAGAIN."""
    sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVTIMEO, _timeval(read))
    if send is not None:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, _timeval(send))


def set_least(conn, n: int) -> None:
    """A resp.Connection's SO_RCVLOWAT, where it changes: a blocking read returns once n bytes are in
    (or at its timeout, with what came)."""
    if conn.least != n:
        conn.sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVLOWAT, n)
        conn.least = n


def least_for(writes: int, key: str) -> int:
    """The bytes to wait for after `writes` write commands and one BLPOP of `key`: more than the writes'
    replies alone can be (so they never wake the reader by themselves), no more than the shortest
    whole answer with a value (":1" each, then *2, the key, an empty value). 0: no such number (a
    short key). An error reply to a write is longer than a number (Redis' are 40+ bytes: NOPERM, OOM,
    READONLY, MISCONF), so it wakes the reader at once; a shorter one, or BLPOP's nil when it times out,
    is read when the wait's time is up, one BLPOP timeout at most."""
    k = len(key.encode())
    shortest = 4 * writes + 4 + (1 + len(str(k)) + 2 + k + 2) + 6
    least = WRITE_REPLY_MAX * writes + 1
    return least if least <= shortest else 0


def first_read(conn, least: int, wait: float, writes: int = 0, lost=BlockingIOError) -> list | None:
    """A checked exchange's first read (resp.Connection, its request just sent): in the kernel until
    `least` bytes are in, one wake-up for the writes' replies and the blocking pop's together (on a unix
    socket, from its second request: poll first, `arrived`), or until
    `wait` (the pop's own timeout, whose nil is short) with what came; its reader reads on from there.
    `writes`: the writes' replies and the pop's [key, value] where the read holds exactly those (popped).
    `lost`: the errors of the read (and of its settings) left to the reader, which reads on to its own:
    BlockingIOError, nothing yet (a slow Redis); OSError, any (thinstore.ThinStore._first, whose caller
    carries the try on as one lost after the send, or read on; the server's close, b"", included)."""
    reader = conn.reader
    try:
        if conn.least != least:     # each call here is run cold in a busy drain (issue 39): only where it changes
            set_least(conn, least)
        if conn.waits != wait:
            conn._wait_for(wait)
        if not arrived(conn, wait):
            raise BlockingIOError       # nothing by the pop's timeout: as recv's own
        chunk = conn.sock.recv(reader.size)
        if writes and chunk and reader.pos == len(reader.buf) and len(chunk) < reader.size:
            got = popped(chunk, writes, reader.decode)      # the whole answer, nothing before it: not buffered
            if got is not None:
                return got
        reader._fill(chunk)             # b"": the server closed the connection (ConnectionLost)
    except lost:
        pass
    return None


def arrived(conn, wait: float) -> bool:
    """Whether bytes came within `wait` seconds, waited for in poll() on a unix socket from its second
    request on (else True at once: recv waits alone).

    Why (issue 39 item 3): a reader asleep in recv() on a unix socket is woken by anything done to
    it, not only by bytes: when Redis reads the request, the send buffer it frees wakes the reader
    (unix_write_space), which finds nothing and sleeps again; Redis' side of that wake-up was 8 % of
    its CPU in the 100-client drain (perf: sock_wfree -> unix_write_space -> try_to_wake_up). A waiter
    in poll() for POLLIN is not woken by it; poll returns with the writes' replies, and the reader
    then sleeps in recv(), the request read, until the whole answer is in: two wake-ups a request,
    not three (recv's own timeout then counts from the writes' replies: a nil is read that much later,
    an fsync's ms). TCP wakes a reader for neither (SO_RCVLOWAT is kept there). A socket's first request
    goes without: the `select` import (~0.3 ms) would cost `labq sub`, one request a process, more
    than the wake-up it saves."""
    sock, got = conn.sock, conn.poller
    if got is None or got[0] is not sock:
        conn.poller = (sock, conn.opts["scheme"] == "unix")     # True: poll from the next request on
        return True
    po = got[1]
    if po is False:
        return True
    if po is True:
        import select
        po = select.poll()
        po.register(sock, select.POLLIN)
        conn.poller = (sock, po)
    return bool(po.poll(wait * 1000))


_LEAST: dict = {}      # least_for by (writes, the key's bytes): one shape a client, its call run cold each request


def least_of(writes: int, key: bytes) -> int:
    """least_for(writes, key), kept by (writes, the key's length): one shape a client (reply keys of
    32-character ids), computed once."""
    size = (writes, len(key))
    least = _LEAST.get(size)
    if least is None:
        least = _LEAST[size] = least_for(writes, key.decode())
    return least


def push_pop(conn, writes, key: str, seconds: int, check, sent: bool = False):
    """The last reply of conn.pipeline([*writes, ("BLPOP", key, seconds)], seconds, resend=False,
    check=check, least=least_for(...)) (an error reply raised): a request and the first wait for its
    answer (store/thinstore.py), on a connection already open, not Sentinel's, without pipeline()'s
    loop: its calls, like every call of the request path, are run cold in a busy drain (issue 39).
    `conn.passed`, after a ConnectionLost: whether `check` had passed (the writes went in). `sent`: the
    request already sent on the open connection and its first read in the reader (thinstore.ThinStore
    ._first, whose read was not the usual answer): read on from there, never sent again."""
    cmds = [*writes, ("BLPOP", key, seconds)]
    least = least_of(len(writes), key.encode())
    conn.passed = False
    got = None
    if sent:
        got = conn._roundtrip(cmds, seconds, check, 0, True)
    elif conn.sock is not None and conn.opts["scheme"] != "sentinel":
        try:
            got = conn._roundtrip(cmds, seconds, check, least)
        except ConnectionLost as e:
            if e.sent:
                raise
    if got is None:         # not open, Sentinel's, or lost before anything was sent: as ever
        got = conn.pipeline(cmds, seconds, resend=False, check=check, least=least)
    if isinstance(got[-1], RespError):      # raised, as execute() raises a lone BLPOP's
        raise got[-1]
    return got[-1]


def popped(buf: bytes, writes: int, decode: bool) -> list | None:
    """The replies of `writes` writes that went in and of a BLPOP that got [key, value], where `buf` (a
    first read) is exactly those, whole: the thin client's usual answer to a request, in one read
    (first_read). None for anything else (a refusal, BLPOP's nil, an answer still arriving): the
    reader reads that as any reply. One pass of C slicing where read() a reply was ~10 Python calls
    each, run cold in a busy drain (issue 39: a client's CPU a request is mostly its Python run with
    the caches gone to the other processes)."""
    pos, out = 0, []
    try:
        for _ in range(writes):
            end = buf.index(CRLF, pos)
            if buf[pos] != 58:         # ":"
                return None
            out.append(int(buf[pos + 1:end]))
            pos = end + 2
        if buf[pos:pos + 4] != b"*2\r\n":
            return None
        end = buf.index(CRLF, pos + 4)
        n = int(buf[pos + 5:end]) if buf[pos + 4] == 36 else -1     # "$"
        key, pos = buf[end + 2:end + 2 + n], end + 4 + n
        if n < 0 or buf[pos - 2:pos] != CRLF:
            return None
        end = buf.index(CRLF, pos)
        n = int(buf[pos + 1:end]) if buf[pos] == 36 else -1
        value, pos = buf[end + 2:end + 2 + n], end + 4 + n
        if n < 0 or pos != len(buf) or buf[pos - 2:] != CRLF:
            return None
    except (IndexError, ValueError):       # cut short: read on as usual
        return None
    out.append([key.decode(), value.decode()] if decode else [key, value])
    return out


def _timeval(seconds: float) -> bytes:
    seconds = max(seconds, 0.001)       # 0 would be "no timeout"
    whole = int(seconds)
    return whole.to_bytes(_LONG, _ORDER) + int((seconds - whole) * 1e6).to_bytes(_LONG, _ORDER)
