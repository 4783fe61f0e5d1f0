"""The Python API the CLI uses: requests through the user's inbox (store/inbox.py), reads straight
from Redis. The hot CLI commands use the thin client (thinclient.py) instead, without redis-py."""
import time

from .errors import UnreachableError
from .settings.config import Config
from .store import conn, inbox
from .store.keys import Keys
from .store.reads import Reader
from .store.state import SchedulerStore
from .thinclient import ClientBase, current_user


class Client(ClientBase):
    def __init__(self, cfg: Config, url: str | None = None, user: str | None = None, r=None):
        self.cfg = cfg
        self.currency = cfg.rates.currency      # money is printed in it (the thin client's: its settings')
        self.url = url or cfg.redis_url
        self.r = r if r is not None else conn.connect(self.url)
        self.k = Keys(cfg.prefix)
        self.user = user or current_user()
        self.read = Reader(self.r, self.k)

    @property
    def security(self) -> dict:
        return self.cfg.security

    # -- requests ------------------------------------------------------------------------------
    def request(self, op: str, body: dict, timeout: float | None = None, tries: int = 3) -> dict:
        try:
            send, pop = conn.send_and_pop(self.r)
            return inbox.call(send, pop, self.k, self.user, op, body, timeout, tries, self._sign, lost=conn.ERRORS)
        except conn.ERRORS as e:     # before anything was sent (the connection is made lazily)
            raise UnreachableError(f"Redis at {conn.without_credentials(self.url)} does not answer: {e}; "
                                   "nothing was submitted") from None

    def checkpoint(self, job_id: int) -> dict:
        return self._checked(self.request("checkpoint", {"job_id": job_id}))

    def books(self, op: str, body: dict) -> dict:
        """A budget or ledger request (budget_set, budget_override, budget_revoke, ledger_import)."""
        return self._checked(self.request(op, body))

    def archive_now(self) -> dict:
        """An archive pass in the leading scheduler now (admins): {jobs, ledger, more, keep}."""
        return self._checked(self.request("archive", {}))

    # -- reads (resolve, job: thinclient.ClientBase) -----------------------------------------------
    def nodes(self):
        return SchedulerStore(self.r, self.k, "reader").nodes(time.time())

    def expected_starts(self) -> dict:
        """job id (a string) -> expected start, as the scheduler plans it (`labq stat --start`)."""
        return self._checked(self.request("starts", {}))["starts"]

    def budgets(self, now: float | None = None):
        """The configured budgets with the limits of `labq budget set` and the active overrides."""
        return self.effective_budgets(self.cfg.budgets, now or time.time())

    def balances(self, now: float | None = None, period: str | None = None):
        """Each budget's balance in its current period, or in `period` (a label like 2026-11: settled
        spending only, for the budgets whose periods are named that way)."""
        return self.balances_of(self.cfg.budgets, now, period)

    def ping(self) -> None:
        conn.ping(self.r)
