"""The thin client of the hot CLI commands (`sub`, `stat`, `del`, `show`, `wait`, `logs`).

The same requests as client.Client (store/inbox.py) and the reads those commands need, over
store/thinstore.py (store/resp.py's connection): no redis-py, no asyncio, and the model only when a
full job record is decoded (`show`, `logs`, `wait`). `stat` reads the `stat` index (store/statrows.py),
not job records.
"""
import os
import pwd
import time

from .errors import LabqError, RefusedError, UnreachableError, UsageError
from .store.keys import Keys
from .store.thinstore import ThinStore

_ERRORS = {2: UsageError, 3: RefusedError, 4: UnreachableError}


def current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def current_umask() -> int:
    mask = os.umask(0o077)    # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


class ClientBase:
    """What both clients do the same way over their own `request()`, `read` (a store Reader or a
    ThinReader) and `security` (config [security]): credentials, replies to errors, job names."""

    def _sign(self, fields: dict) -> dict:
        """The request with a munge credential in multi-user mode (auth.py), else as it is."""
        if self.security.get("auth") != "munge":
            return fields
        from .security import auth, munge
        try:
            return auth.sign(fields, self.security)
        except munge.MungeError as e:
            raise UnreachableError(f"cannot get a munge credential (security.auth = \"munge\"): {e}") from None

    def _checked(self, reply: dict) -> dict:
        if not reply.get("ok"):
            raise _ERRORS.get(reply.get("code"), LabqError)(reply.get("error", "request failed"))
        return reply

    def submit(self, body: dict, timeout: float | None = None) -> dict:
        # The job and its log files get the submitter's umask, as under SLURM.
        return self._checked(self.request("submit", {"umask": current_umask(), **body}, timeout))

    def act_on(self, op: str, ids: list[str]) -> dict:
        """`cancel`, `hold`, `release` or `requeue` jobs; the reply lists each one's result. A reply
        of many ok results names them in runs only (idruns.py): expanded here, the shape as before."""
        reply = self.request(op, {"ids": [str(i) for i in ids]})
        if reply.get("runs_only"):
            from .jobs.idruns import expand
            reply["results"] = expand(reply["runs"]) + reply["results"]
        return reply

    def node_admin(self, op: str, node: str) -> dict:
        """`drain` or `resume` a node (admins)."""
        return self._checked(self.request(op, {"node": node}))

    def cancel(self, ids: list[str]) -> dict:
        return self.act_on("cancel", ids)

    def resolve(self, text: str, views: bool = False) -> list:
        """Jobs named by `42` (or every task of array 42) or `42_3` (model.Job records; with `views`,
        store/jobview.JobView records where the thin reader finds them all in Redis: `labq show`)."""
        from .jobs.refs import resolve_ref
        return resolve_ref(text, self.read.job_view if views else self.read.job, lambda a: self._array(a, views))

    def _array(self, array_id: int, views: bool = False) -> list:
        first = (self.read.job_view if views else self.read.job)(array_id)
        if first is None or first.array_id != array_id:
            return []
        ids = range(array_id, array_id + first.array_count)
        return [j for j in (self.read.jobs_view if views else self.read.jobs)(ids) if j.array_id == array_id]

    def private(self, job, timeout: float | None = None) -> dict:
        """{script, export, env} of `job` (model.Job), asked of the scheduler (scheduler/security/private.py):
        the client role cannot read them; the scheduler answers their owner and admins only."""
        from .security.private import OP
        return self._checked(self.request(OP, {"job": job.id}, timeout))

    def fairshare(self, now: float, jobs, half_life: float) -> dict[str, float]:
        """Each account's decayed usage now, running jobs included (`labq prio`, `labq share`);
        `half_life`: the config's priority.fairshare_half_life."""
        from .jobs import codes
        from .money import fairshare
        running = [j for j in jobs if j.state in codes.ON_NODE]
        return fairshare.current(self.read.usage(), running, now, half_life)

    def effective_budgets(self, budgets, now: float) -> tuple:
        """`budgets` (the config's) with the limits of `labq budget set` and the active overrides."""
        from .money import ledger
        limits = {k: int(v["limit"]) for k, v in self.read.limits().items()}
        return ledger.effective(budgets, limits, self.read.overrides(), now)

    def balances_of(self, budgets, now: float | None = None, period: str | None = None) -> list:
        """Each of `budgets` (the config's) in its current period, or in `period` (balance.balances)."""
        from .money import balance
        now = now or time.time()
        running = [j for j in self.read.active() if j.commit]
        spent = self.read.spent()
        return balance.balances(self.effective_budgets(budgets, now), spent, running, now, period)

    def job(self, text: str):
        jobs = self.resolve(text)
        if not jobs:
            raise UsageError(f"no such job: {text}")
        if len(jobs) > 1:
            raise UsageError(f"{text} is an array of {len(jobs)} tasks; name one, like {jobs[0].display_id}")
        return jobs[0]


class ThinClient(ClientBase):
    def __init__(self, url: str, prefix: str = "labq", user: str | None = None, security=None, currency: str = "USD"):
        if not url:
            raise UnreachableError("no Redis URL: set redis.url in the config, or start `labq up`")
        self.url = url
        self.k = Keys(prefix)
        self.store = ThinStore(url, self.k)
        self.user = user or current_user()
        self.security = security or {"auth": "none"}
        self.currency = currency        # rates.currency of the client settings: money is printed in it
        self.read = self.store.read

    # -- requests ------------------------------------------------------------------------------
    def request(self, op: str, body: dict, timeout: float | None = None, tries: int = 3) -> dict:
        # Signed only in multi-user mode (_sign): no call a try otherwise, each run cold (issue 39)
        return self.store.call(self.user, op, body, timeout, tries,
                               self._sign if self.security.get("auth") == "munge" else None)

    # -- reads ---------------------------------------------------------------------------------
    def nodes(self):
        return self.read.nodes()

    def budget_balances(self, budgets, now: float | None = None, period: str | None = None) -> list:
        """balances_of for `budgets` as the client settings cache keeps them ({field: value},
        clientcache.books), read and added up without the job model, the ledger module and dataclasses
        (money/balance.py, store/thinreads.ThinReader.holdings): `labq budget` (issue 39 item 4)."""
        from types import SimpleNamespace

        from .money import balance
        now = now or time.time()
        running = self.read.holdings()
        spent = self.read.spent()
        limits = {k: int(v["limit"]) for k, v in self.read.limits().items()}
        terms = balance.effective_terms([SimpleNamespace(**b) for b in budgets], limits, self.read.override_records(),
                                        now)
        effective = [SimpleNamespace(**{**vars(b), "limit": lim, "overrides": extra}) for b, lim, extra in terms]
        return balance.balances(effective, spent, running, now, period)

    def close(self) -> None:
        self.store.close()
