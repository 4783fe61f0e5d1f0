"""The thin client's Redis (thinclient.py): one store/resp.py connection, the requests sent over it
(store/inbox.py: LPUSH, then BLPOP the reply) and the reads of thinreads.ThinReader. No redis-py.

The connection stays in here: the thin client holds this object, never the socket (only store/
imports the connection modules, tests/test_architecture.py)."""
import os
import time

from ..cjson import quote as _quoted
from ..errors import UnreachableError, UsageError
from . import inbox, kwait, resp
from .faults import ConnectionLost, RespError, without_credentials
from .keys import Keys
from .thinreads import ThinReader, noperm

_LOST = (ConnectionLost, OSError)


class ThinStore:
    def __init__(self, url: str, keys: Keys):
        try:
            self._c = resp.Connection(url)
        except ValueError as e:
            raise UsageError(f"redis.url: {e}") from None
        self.url, self.k = url, keys
        self.read = ThinReader(self._c, keys, self.unreachable)
        # _first's fixed parts: the request list's LPUSH up to the entry, a reply key less its id, the
        # wake-ups by user
        self._push = b"*3\r\n$5\r\nLPUSH\r\n$%d\r\n%b\r\n" % (len(keys.requests.encode()), keys.requests.encode())
        self._reply = keys.reply("")
        self._wakes: dict = {}

    def unreachable(self, e: Exception) -> UnreachableError:
        return UnreachableError(f"Redis at {without_credentials(self.url)} does not answer: {e}")

    def call(self, user: str, op: str, body: dict, timeout: float | None, tries: int, sign) -> dict:
        """inbox.call over this connection: the scheduler's reply to one request. Its first try is _first's
        where the connection is open and plain (not Sentinel's, not TLS) and nothing is signed."""
        c = self._c
        try:
            if sign is None and c.sock is not None and c.kernel and "rid" not in body \
                    and c.opts["scheme"] != "sentinel":
                return self._first(user, op, body, inbox.request_timeout() if timeout is None else timeout, tries)
            return inbox.call(self._send, self._pop, self.k, user, op, body, timeout, tries, sign,
                              lost=_LOST, send_pop=self._send_pop)
        except (ConnectionLost, RespError) as e:
            raise noperm(e) or self.unreachable(e) from None

    def _first(self, user: str, op: str, body: dict, timeout: float, tries: int) -> dict:
        """inbox._call's first try in one function, built, sent and read as _call, kwait.push_pop and
        resp.Connection would (the same fields, bytes, waits), where the answer comes whole in its first read,
        the usual case: each call on the way is run cold in a busy drain (issue 39).
        Anything else (a refusal, BLPOP's nil, an answer in pieces, a connection lost, OLD_REFUSAL) goes
        on in inbox.call as that first try's outcome: the request is never sent twice nor lost."""
        c, rid, text = self._c, os.urandom(16).hex(), inbox._TEXT(body)
        fields = {"rid": rid, "op": op, "body": text, "expires": f"{time.time() + timeout - min(5.0, timeout / 4):.3f}"}
        entry = ('{"rid":"%s","op":%s,"expires":"%s","user":%s,"body":%s}' % (     # inbox.entry_text's
            rid, _quoted(op), fields["expires"], _quoted(user), text)).encode()
        wake = self._wakes.get(user) or self._wakes.setdefault(user, resp.pack([("LPUSH", self.k.wake, "user:" + user)]))
        key, seconds = (self._reply + rid).encode(), max(1, min(inbox.POP_SLICE, int(timeout / tries)))
        out = b"%b$%d\r\n%b\r\n%b*3\r\n$5\r\nBLPOP\r\n$%d\r\n%b\r\n$%d\r\n%d\r\n" % (
            self._push, len(entry), entry, wake, len(key), key, len(str(seconds)), seconds)
        least = kwait.least_of(2, key)
        if not least:           # a key too short to wait in the kernel for (kwait.least_for): _call's try
            return self._rest(user, op, body, timeout, tries, fields, False)
        c.passed = False
        try:
            c.sock.sendall(out)
        except OSError:         # nothing went (as resp.Connection's): sent in _call on a new connection
            c.close()
            return self._rest(user, op, body, timeout, tries, fields, False)
        # any error of the read reads as a connection lost after the send: _call reads on (its EOF or error)
        got = kwait.first_read(c, least, seconds + 0.05, 2, OSError)
        if got is not None:     # the writes' replies and [key, value], whole
            c.passed, reply = True, inbox.parsed(got[2][1])
            if reply.get("ok") is not False:        # else perhaps OLD_REFUSAL: inbox.call's
                return reply
            return self._rest(user, op, body, timeout, tries, fields, True, reply)
        return self._rest(user, op, body, timeout, tries, fields, True)

    def _rest(self, user, op, body, timeout, tries, fields, sent: bool, got=None) -> dict:
        """inbox.call, _first's try its first (`got`: its reply)."""
        return inbox.call(self._send, self._pop, self.k, user, op, body, timeout, tries, None, lost=_LOST,
                          send_pop=self._send_pop, first=(fields, sent), got=got)

    def _send(self, cmds) -> list:
        return self._c.pipeline(cmds, resend=False)   # a signed request is sent afresh, never resent

    def _send_pop(self, cmds, key: str, seconds: int, check, sent: bool = False):
        """The request's commands and the first BLPOP of its reply in one round trip (inbox._call):
        `check` says whether the request went in before the wait. A connection lost during the wait,
        the request in, waits again on a new one, as a lone BLPOP does (`_pop`). Its first read waits
        in the kernel for the writes' replies and the reply together (kwait.least_for): one wake-up.
        `sent`: the request went already (_first), its first read in the reader."""
        try:
            return kwait.push_pop(self._c, cmds, key, seconds, check, sent)
        except ConnectionLost:
            if not self._c.passed:
                raise
            return self._pop(key, seconds)

    def _pop(self, key: str, seconds: int):
        return self._c.execute("BLPOP", key, seconds, extra_wait=seconds)

    def close(self) -> None:
        self._c.close()


def ping(url: str, timeout: float = 1.0) -> Exception | None:
    """One PING of `url` on a fresh connection: None when it answered, else what went wrong (`labq up`
    asks until its private redis-server answers; LOADING is an answer to wait past too)."""
    try:
        with resp.Connection(url, connect_timeout=timeout, timeout=timeout) as c:
            c.execute("PING")
        return None
    except (ConnectionLost, RespError) as e:
        return e
