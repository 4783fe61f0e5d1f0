"""The Python client's Redis (client.py; the admin commands through it): one redis-py connection,
the requests sent over it (store/inbox.py: LPUSH, then BLPOP the reply) and the reads of
reads.Reader. The thin client's is thinstore.py, over resp.py.

The connection stays in here: the client holds this object, never the connection (only store/
imports the connection modules and no connection object leaves it, tests/test_architecture.py)."""
from ..errors import UnreachableError
from . import conn, inbox
from .keys import Keys
from .reads import Reader
from .state import SchedulerStore


class ClientStore:
    """`r`: a connection made elsewhere in store/ or by a test (a role's login, a fake server);
    else one to `url`, made lazily by redis-py on the first command."""

    def __init__(self, url: str, keys: Keys, r=None):
        self.url, self.k = url, keys
        self.r = r if r is not None else conn.connect(url)
        self.read = Reader(self.r, keys)

    def call(self, user: str, op: str, body: dict, timeout: float | None, tries: int, sign) -> dict:
        """inbox.call over this connection: the scheduler's reply to one request."""
        try:
            send, pop = conn.send_and_pop(self.r)
            return inbox.call(send, pop, self.k, user, op, body, timeout, tries, sign, lost=conn.ERRORS)
        except conn.ERRORS as e:     # before anything was sent (the connection is made lazily)
            raise UnreachableError(f"Redis at {conn.without_credentials(self.url)} does not answer: {e}; "
                                   "nothing was submitted") from None

    def nodes(self, now: float):
        return self.scheduler_store("reader").nodes(now)

    def scheduler_store(self, me: str) -> SchedulerStore:
        """The scheduler's view over this connection, for what only it reads (`labq admin
        accept-loss`: the recorded state file, the figures; `labq nodes`)."""
        return SchedulerStore(self.r, self.k, me)

    def ping(self) -> None:
        conn.ping(self.r)
