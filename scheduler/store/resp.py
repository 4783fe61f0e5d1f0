"""A minimal Redis connection in the standard library only: RESP2 and RESP3 over a unix socket or TCP.

The hot CLI commands (`sub`, `stat`, `del`, `show`, `wait`, `logs`) speak through this instead of
redis-py, whose import alone (asyncio, ssl, cluster support) costs more than the whole command should.
It does what those commands need and nothing more: one connection, commands and pipelines, AUTH
(user + password), SELECT, TLS for rediss:// (ssl is imported only then), timeouts, and one
reconnect-and-retry when the connection drops (every command the client sends is safe to repeat:
reads, and requests the scheduler deduplicates by request id).

URLs are redis-py's (faults.parse_url), or sentinel:// (store/sentinel.py).
"""
import _socket  # the C module: socket.py (its enums, selectors) is ~2 ms of every `labq sub`; TCP imports it

from . import bulkread, kwait
from .faults import ConnectionLost, RespError, parse_url

CRLF = b"\r\n"
# recv(n) allocates n bytes: above glibc's mmap threshold (128 KiB) an mmap, mremap and munmap each
# call (twice a thin-client request); below it, the heap. A reply that fills a first read is a big one.
_FIRST = 1 << 16
_RECV = 1 << 18


def url_parts(url: str) -> dict:
    """faults.parse_url's parts of `url`; a sentinel:// URL's as store/sentinel.py reads them."""
    if url.startswith("sentinel://"):
        from . import sentinel
        return sentinel.parse(url)
    return parse_url(url)


def encode(args) -> bytes:
    """One command as a RESP array of bulk strings."""
    return pack((args,))


def pack(cmds) -> bytes:
    """Commands as one buffer of RESP arrays: pieces appended to one list and joined once (a group
    commit packs ~2,000 arguments; a join per command, and a copy of every large argument into its
    piece, were a tenth of the scheduler's CPU per request, issue 39 item 3)."""
    out: list = []
    app = out.append
    for args in cmds:
        app(b"*%d\r\n" % len(args))
        for a in args:
            t = type(a)
            if t is str:
                a = a.encode()
            elif t is not bytes and t is not bytearray:
                a = a.encode() if isinstance(a, str) else str(a).encode()    # a StrEnum: its text; int, float
            n = len(a)
            if n < 1024:
                app(b"$%d\r\n%b\r\n" % (n, a))
            else:       # appended as it is: copied once, by the join
                app(b"$%d\r\n" % n)
                app(a)
                app(b"\r\n")
    return b"".join(out)


class Reader:
    """Parses replies from a byte source (`recv(n) -> bytes`, b"" at end of stream)."""

    def __init__(self, recv, decode: bool = True, recv_into=None):
        self.recv, self.decode, self.recv_into = recv, decode, recv_into    # recv_into(view) -> n: bulkread.whole
        self.buf, self.pos, self.size = b"", 0, _FIRST

    def _fill(self, chunk=None):
        chunk = self.recv(self.size) if chunk is None else chunk
        if not chunk:
            raise ConnectionLost("the server closed the connection")
        if len(chunk) == self.size:
            self.size = _RECV
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(CRLF, self.pos)
            if end >= 0:
                line = self.buf[self.pos:end]
                self.pos = end + 2
                return line
            self._fill()

    def _bytes(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n + 2:
            if n > _RECV and self.recv_into is not None:
                return bulkread.whole(self, n)
            self._fill()
        data = self.buf[self.pos:self.pos + n]
        self.pos += n + 2
        return data

    def _str(self, b: bytes):
        return b.decode() if self.decode else bytes(b)      # bytes(b): b itself, or whole()'s bytearray's

    def _items(self, n: int) -> list:
        """An aggregate's n items. Bulk strings already in the buffer are cut out here without a
        call to read() each: `stat` reads one per active job (HVALS of 10,000 rows: 6 → 3 ms); a
        long array's first ones by C loops alone (bulkread.py)."""
        items: list = bulkread.strings(self, n) if n >= bulkread.MANY else []
        n -= len(items)
        buf, pos = self.buf, self.pos
        append, find, decode = items.append, buf.find, self.decode
        for _ in range(n):
            kind = buf[pos:pos + 1]
            if kind == b"$":
                end = find(CRLF, pos)
                if end > 0:
                    k = int(buf[pos + 1:end])
                    stop = end + 2 + k
                    if k >= 0 and stop + 2 <= len(buf):
                        data = buf[end + 2:stop]
                        append(data.decode() if decode else data)
                        pos = stop + 2
                        continue
            elif kind == b"+":      # a status (a transaction's SET and MSET replies: OK)
                end = find(CRLF, pos)
                if end > 0:
                    data = buf[pos + 1:end]
                    append(data.decode() if decode else data)
                    pos = end + 2
                    continue
            elif kind == b":":      # an integer (a transaction's RPUSH, EXPIRE, ZADD, LTRIM replies)
                end = find(CRLF, pos)
                if end > 0:
                    append(int(buf[pos + 1:end]))
                    pos = end + 2
                    continue
            self.pos = pos
            append(self.read())     # anything else, or a string that runs past the buffer
            buf, pos = self.buf, self.pos
            find = buf.find
        self.pos = pos
        return items

    def read(self):
        """One reply. An error reply is returned as a RespError (not raised): a pipeline's other
        replies are still good, and the caller decides."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$" or kind == b"=":
            n = int(rest)
            if n < 0:
                return None
            data = self._bytes(n)
            return self._str(data[4:] if kind == b"=" else data)
        if kind == b"*" or kind == b"~" or kind == b">":
            n = int(rest)
            if n < 0:
                return None
            items = self._items(n)
            return set(items) if kind == b"~" and all(x.__hash__ for x in items) else items
        if kind == b":" or kind == b"(":
            return int(rest)
        if kind == b"+":
            return self._str(rest)
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b"%":
            n = int(rest)
            out = {}
            for _ in range(n):
                k = self.read()
                out[k if k.__hash__ else tuple(k)] = self.read()
            return out
        if kind == b"_":
            return None
        if kind == b",":
            return float(rest)
        if kind == b"#":
            return rest == b"t"
        if kind == b"!":
            return RespError(self._bytes(int(rest)).decode(errors="replace"))
        if kind == b"|":    # attributes: metadata about the next reply, which is what was asked for
            for _ in range(2 * int(rest)):
                self.read()
            return self.read()
        raise ConnectionLost(f"not a RESP reply: {line[:40]!r}")


class Connection:
    """One connection, opened on first use, reopened once if it drops."""

    def __init__(self, url: str, connect_timeout: float = 5.0, timeout: float = 30.0, decode: bool = True):
        self.url, self.opts = url, url_parts(url)
        self.connect_timeout, self.timeout, self.decode = connect_timeout, timeout, decode
        self.sock = self.reader = None
        self.until = 0.0     # behind Sentinel: when the call under way stops waiting for a master
        self.waits = 0.0     # the socket's timeout as last set (_wait_for)
        self.kernel, self.least, self.passed, self.poller = False, 1, False, None  # kwait: RCVLOWAT, push_pop, poll
        self.full = timeout     # the exchange under way's timeout for each read

    def describe(self) -> str:
        o = self.opts
        if o["scheme"] == "sentinel":
            return f"{o['host']}:{o['port']} (master of {o['service']!r})" if o["host"] else f"service {o['service']!r}"
        return o["path"] if o["scheme"] == "unix" else f"{o['host']}:{o['port']}"

    # -- connecting ------------------------------------------------------------------------------
    def _open(self):
        o = self.opts
        if o["scheme"] == "sentinel":
            from . import sentinel
            return sentinel.open_master(self, o)
        if o["scheme"] != "unix":
            return self.open_tcp(o["host"], o["port"])
        try:
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            s.settimeout(self.connect_timeout)
            s.connect(o["path"])
        except OSError as e:
            raise ConnectionLost(f"cannot connect to {self.describe()}: {e.strerror or e}") from None
        self._ready(s)

    def open_tcp(self, host: str, port: int):
        try:
            import socket
            s = socket.create_connection((host, port), timeout=self.connect_timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.opts["scheme"] == "rediss":
                s = self._tls(s)
        except OSError as e:
            raise ConnectionLost(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        self._ready(s)

    def _ready(self, s):
        self.kernel, self.least = kwait.usable(s), 1
        kwait.set_timeouts(s, self.timeout, self.timeout) if self.kernel else s.settimeout(self.timeout)
        self.sock, self.waits = s, self.timeout
        self.reader = Reader(self._recv, self.decode, self._recv)
        self._handshake()

    def _tls(self, s):
        import ssl
        q = self.opts["query"]
        ctx = ssl.create_default_context(cafile=q.get("ssl_ca_certs") or None)
        if q.get("ssl_certfile"):
            ctx.load_cert_chain(q["ssl_certfile"], q.get("ssl_keyfile") or None)
        if q.get("ssl_cert_reqs", "required").lower() in ("none", "optional"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE if q["ssl_cert_reqs"].lower() == "none" else ssl.CERT_OPTIONAL
        elif q.get("ssl_check_hostname", "true").lower() in ("false", "0", "no"):
            ctx.check_hostname = False
        return ctx.wrap_socket(s, server_hostname=self.opts["host"])

    def _handshake(self):
        o = self.opts
        cmds = []
        if o["protocol"] == 3:
            hello = ["HELLO", 3]
            if o["password"]:
                hello += ["AUTH", o["username"] or "default", o["password"]]
            cmds.append(hello)
        elif o["password"]:
            cmds.append(["AUTH", o["username"], o["password"]] if o["username"] else ["AUTH", o["password"]])
        if o["db"]:
            cmds.append(["SELECT", o["db"]])
        if cmds:
            for r in self._roundtrip(cmds):
                if isinstance(r, RespError):
                    self.close()
                    raise r

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = self.reader = None

    # -- commands --------------------------------------------------------------------------------
    def _wait_for(self, seconds: float) -> None:
        """The socket's timeout, set only where it changes: each settimeout is a syscall, and a loop
        of requests (a blocking pop behind each) set it twice a request (issue 39 item 3)."""
        if seconds != self.waits:
            kwait.set_timeouts(self.sock, seconds) if self.kernel else self.sock.settimeout(seconds)
            self.waits = seconds

    def _recv(self, n):
        """The reader's reads (n bytes at most, or into buffer n: bulkread.whole), each up to the exchange's timeout."""
        kwait.set_least(self, 1)
        self._wait_for(self.full)
        return self.sock.recv(n) if n.__class__ is int else self.sock.recv_into(n)

    def _roundtrip(self, cmds, extra_wait: float = 0.0, check=None, least: int = 0, sent: bool = False) -> list:
        self.full = self.timeout + extra_wait      # each exchange under its own, however the last ended
        if not self.kernel:         # else SO_SNDTIMEO (the timeout) bounds a send, and _recv sets the reads'
            self._wait_for(self.full)
        try:
            if not sent:    # else sent, and their first read in the reader (thinstore.ThinStore._first): read on
                self.sock.sendall(pack(cmds))
                sent = True
            if least and self.kernel:
                got = kwait.first_read(self, least, extra_wait + 0.05, len(cmds) - 1 if check else 0)
                if got is not None:     # the usual answer, whole (kwait.popped)
                    return self._checked(check, got[:-1]) or got
            if check is None:
                return [self.reader.read() for _ in cmds]
            first = [self.reader.read() for _ in cmds[:-1]]
            self._checked(check, first)
            return first + [self.reader.read()]
        except (TimeoutError, BlockingIOError):    # socket.timeout; EAGAIN at SO_RCVTIMEO / SO_SNDTIMEO
            self.close()
            raise ConnectionLost(f"{self.describe()} did not answer within {self.timeout + extra_wait:.0f}s",
                                 sent=sent) from None
        except ConnectionLost as e:
            self.close()
            e.sent = sent and not e.refused      # refused (_checked): nothing was done
            raise
        except OSError as e:
            self.close()
            raise ConnectionLost(f"connection to {self.describe()} failed: {e.strerror or e}", sent=sent) from None

    raw_roundtrip = _roundtrip

    def _checked(self, check, replies: list) -> None:
        """`check(replies)` of all but a pipeline's last command, before its last reply is read: a blocking
        command (BLPOP) sent behind refused writes is not waited for. Whatever check raises closes the
        connection, so that the unread reply can never be taken for the answer of a later command; a demoted
        master's refusal (nothing done) is raised first, as pipeline() does, to send it to the new master."""
        if self.opts["scheme"] == "sentinel":
            self._demoted(replies)      # its ConnectionLost closes the connection in _roundtrip
        try:
            check(replies)
        except BaseException:
            self.close()
            raise
        self.passed = True

    def _after_check(self, last) -> None:
        """The last reply of a checked pipeline, demoted (a BLPOP that a failover UNBLOCKED): the
        writes before it went in (the check passed), so the whole is never sent again; the caller
        waits again on its own (ConnectionLost, sent)."""
        try:
            self._demoted([last])
        except ConnectionLost as e:
            e.sent, e.refused = True, False
            raise

    def pipeline(self, cmds, extra_wait: float = 0.0, resend: bool = True, check=None, least: int = 0) -> list:
        """Send all of `cmds` at once, then read their replies; error replies come back as RespError
        values in their place. Reconnects and sends again once if the connection was lost — after
        the commands were sent only when `resend` (a signed request must not be sent twice: its
        credential would be a replay; the caller sends it afresh). `check`: called with the replies
        of all commands but the last before that one's is waited for (_checked); `least`: the bytes
        the replies come to at least once the last is in (kwait.least_for: its first read waits for them)."""
        cmds = [list(c) for c in cmds]
        if not cmds:
            return []
        self.until = 0.0
        for attempt in range(1 << 30):
            try:
                if self.sock is None:
                    self._open()
                got = self._roundtrip(cmds, extra_wait, check, least)
                if check is None:
                    return self._demoted(got)
                self._after_check(got[-1])
                return got
            except ConnectionLost as e:
                if (e.sent and not resend) or (attempt and not e.refused):
                    raise
                if self.opts["scheme"] == "sentinel":
                    # Behind Sentinel, again (refused: nothing done) until the failover ends, within one
                    # bound for the whole call, reconnects included (store/sentinel.py · open_master).
                    import time
                    self.until = self.until or time.monotonic() + float(self.opts["query"].get("failover_wait") or 30)
                    if attempt and time.monotonic() > self.until:
                        raise
                    if attempt:
                        time.sleep(0.2)
        raise AssertionError("unreachable")

    def _demoted(self, replies: list) -> list:
        """Behind Sentinel, a master that was demoted refuses writes (READONLY) or unblocks a waiting
        read (UNBLOCKED), and one cut off from its replicas refuses writes (NOREPLICAS): this
        connection must find the (new) master. Nothing refused was done."""
        if self.opts["scheme"] == "sentinel":
            for r in replies:
                if isinstance(r, RespError) and str(r).startswith(("READONLY", "UNBLOCKED", "NOREPLICAS")):
                    self.close()
                    e = ConnectionLost(f"{self.describe()} refuses writes: {r}")
                    e.refused = True
                    raise e
        return replies

    def execute(self, *args, extra_wait: float = 0.0):
        """One command; an error reply is raised as RespError."""
        reply = self.pipeline([args], extra_wait)[0]
        if isinstance(reply, RespError):
            raise reply
        return reply

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
