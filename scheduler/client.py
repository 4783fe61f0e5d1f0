"""The Python API the CLI uses: requests through the user's inbox (store/inbox.py), reads straight
from Redis, both through its store object (store/clientstore.py, which holds the redis-py
connection). The hot CLI commands use the thin client (thinclient.py) instead, without redis-py."""
import time

from .settings.config import Config
from .store.clientstore import ClientStore
from .store.keys import Keys
from .thinclient import ClientBase, current_user


class Client(ClientBase):
    def __init__(self, cfg: Config, url: str | None = None, user: str | None = None, r=None):
        self.cfg = cfg
        self.currency = cfg.rates.currency      # money is printed in it (the thin client's: its settings')
        self.url = url or cfg.redis_url
        self.k = Keys(cfg.prefix)
        # `r`: a connection a test or bench made (a role's login, a server of its own), else one to `url`.
        self.store = ClientStore(self.url, self.k, r)
        self.user = user or current_user()
        self.read = self.store.read

    @property
    def security(self) -> dict:
        return self.cfg.security

    # -- requests ------------------------------------------------------------------------------
    def request(self, op: str, body: dict, timeout: float | None = None, tries: int = 3) -> dict:
        return self.store.call(self.user, op, body, timeout, tries, self._sign)

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
        return self.store.nodes(time.time())

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
        self.store.ping()
