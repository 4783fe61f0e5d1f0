"""The thin client's Redis (thinclient.py): one store/resp.py connection, the requests sent over it
(store/inbox.py: LPUSH, then BLPOP the reply) and the reads of thinreads.ThinReader. No redis-py.

The connection stays in here: the thin client holds this object, never the socket (only store/
imports the connection modules, tests/test_architecture.py)."""
from ..errors import UnreachableError, UsageError
from . import inbox, kwait, resp
from .faults import ConnectionLost, RespError, without_credentials
from .keys import Keys
from .thinreads import ThinReader, noperm


class ThinStore:
    def __init__(self, url: str, keys: Keys):
        try:
            self._c = resp.Connection(url)
        except ValueError as e:
            raise UsageError(f"redis.url: {e}") from None
        self.url, self.k = url, keys
        self.read = ThinReader(self._c, keys, self.unreachable)

    def unreachable(self, e: Exception) -> UnreachableError:
        return UnreachableError(f"Redis at {without_credentials(self.url)} does not answer: {e}")

    def call(self, user: str, op: str, body: dict, timeout: float | None, tries: int, sign) -> dict:
        """inbox.call over this connection: the scheduler's reply to one request."""
        try:
            return inbox.call(self._send, self._pop, self.k, user, op, body, timeout, tries, sign,
                              lost=(ConnectionLost, OSError), send_pop=self._send_pop)
        except (ConnectionLost, RespError) as e:
            raise noperm(e) or self.unreachable(e) from None

    def _send(self, cmds) -> list:
        return self._c.pipeline(cmds, resend=False)   # a signed request is sent afresh, never resent

    def _send_pop(self, cmds, key: str, seconds: int, check):
        """The request's commands and the first BLPOP of its reply in one round trip (inbox._call):
        `check` says whether the request went in before the wait. A connection lost during the wait,
        the request in, waits again on a new one, as a lone BLPOP does (`_pop`). Its first read waits
        in the kernel for the writes' replies and the reply together (kwait.least_for): one wake-up."""
        try:
            return kwait.push_pop(self._c, cmds, key, seconds, check)
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
