"""The Python API the CLI uses: requests through the user's inbox, reads straight from Redis.

A request is XADDed to `labq:inbox:<user>` with a request id, then the client blocks on the reply
list. If no reply comes it sends the same request id again: the scheduler answers a repeated id
from its record instead of acting twice, so retries are always safe.
"""
import json
from dataclasses import replace
import os
import pwd
import time
import uuid

from . import auth, fairshare, ledger, munge, periods, states
from .config import Config
from .errors import LabqError, RefusedError, UnreachableError, UsageError
from .model import Job
from .jobspec import resolve_ref
from .store import conn, inbox
from .store.keys import Keys
from .store.reads import Reader
from .store.state import SchedulerStore

_ERRORS = {2: UsageError, 3: RefusedError, 4: UnreachableError}


def current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def current_umask() -> int:
    mask = os.umask(0o077)    # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


class Client:
    def __init__(self, cfg: Config, url: str | None = None, user: str | None = None, r=None):
        self.cfg = cfg
        self.url = url or cfg.redis_url
        self.r = r if r is not None else conn.connect(self.url)
        self.k = Keys(cfg.prefix)
        self.user = user or current_user()
        self.read = Reader(self.r, self.k)

    # -- requests ------------------------------------------------------------------------------
    def request(self, op: str, body: dict, timeout: float = 30.0, tries: int = 3) -> dict:
        rid = body.get("rid") or uuid.uuid4().hex
        fields = {"rid": rid, "op": op, "body": json.dumps(body, separators=(",", ":"))}
        per_try = timeout / tries
        try:
            for _ in range(tries):
                signed = self._sign(fields)   # a fresh credential per try: each is valid once
                inbox.send(self.r, self.k, self.user, signed)
                got = inbox.await_reply(self.r, self.k, rid, per_try)
                if got:
                    return json.loads(got)
        except conn.ERRORS as e:
            raise UnreachableError(f"Redis at {self.url} does not answer: {e}") from None
        raise UnreachableError(f"the scheduler did not answer within {timeout:.0f}s (is `labq scheduler` running?)")

    def _sign(self, fields: dict) -> dict:
        try:
            return auth.sign(fields, self.cfg.security)
        except munge.MungeError as e:
            raise UnreachableError(f"cannot get a munge credential (security.auth = \"munge\"): {e}") from None

    def _checked(self, reply: dict) -> dict:
        if not reply.get("ok"):
            raise _ERRORS.get(reply.get("code"), LabqError)(reply.get("error", "request failed"))
        return reply

    def submit(self, body: dict, timeout: float = 30.0) -> dict:
        # The job and its log files get the submitter's umask, as under SLURM.
        return self._checked(self.request("submit", {"umask": current_umask(), **body}, timeout))

    def act_on(self, op: str, ids: list[str]) -> dict:
        """`cancel`, `hold`, `release` or `requeue` jobs; the reply lists each one's result."""
        return self.request(op, {"ids": [str(i) for i in ids]})

    def cancel(self, ids: list[str]) -> dict:
        return self.act_on("cancel", ids)

    def checkpoint(self, job_id: int) -> dict:
        return self._checked(self.request("checkpoint", {"job_id": job_id}))

    def books(self, op: str, body: dict) -> dict:
        """A budget or ledger request (budget_set, budget_override, budget_revoke, ledger_import)."""
        return self._checked(self.request(op, body))

    def node_admin(self, op: str, node: str) -> dict:
        return self._checked(self.request(op, {"node": node}))

    # -- reads ---------------------------------------------------------------------------------
    def resolve(self, text: str) -> list[Job]:
        """Jobs named by `42` (or every task of array 42) or `42_3`."""
        return resolve_ref(text, self.read.job, self._array)

    def _array(self, array_id: int) -> list[Job]:
        first = self.read.job(array_id)
        if first is None or first.array_id != array_id:
            return []
        return [j for j in self.read.jobs(range(array_id, array_id + first.array_count)) if j.array_id == array_id]

    def job(self, text: str) -> Job:
        jobs = self.resolve(text)
        if not jobs:
            raise UsageError(f"no such job: {text}")
        if len(jobs) > 1:
            raise UsageError(f"{text} is an array of {len(jobs)} tasks; name one, like {jobs[0].display_id}")
        return jobs[0]

    def nodes(self):
        return SchedulerStore(self.r, self.k, "reader").nodes(time.time())

    def expected_starts(self) -> dict:
        """job id (a string) -> expected start, as the scheduler plans it (`labq stat --start`)."""
        return self._checked(self.request("starts", {}))["starts"]

    def fairshare(self, now: float, jobs) -> dict[str, float]:
        """Each account's decayed usage now, running jobs included (`labq prio`)."""
        running = [j for j in jobs if j.state in states.ON_NODE]
        return fairshare.current(self.read.usage(), running, now, self.cfg.priority["fairshare_half_life"])

    def effective_config(self, now: float):
        """The config the scheduler plans with now: budgets with `budget set` limits and overrides."""
        return replace(self.cfg, budgets=self.budgets(now))

    def budgets(self, now: float | None = None):
        """The configured budgets with the limits of `labq budget set` and the active overrides."""
        limits = {k: int(v["limit"]) for k, v in self.read.limits().items()}
        return ledger.effective(self.cfg.budgets, limits, self.read.overrides(), now or time.time())

    def balances(self, now: float | None = None, period: str | None = None):
        """Each budget's balance in its current period, or in `period` (a label like 2026-11: settled
        spending only, for the budgets whose periods are named that way)."""
        now = now or time.time()
        running = [j for j in self.read.active() if j.commit]
        spent = self.read.spent()
        out = []
        for b in self.budgets(now):
            label = periods.current(b, now)
            if period is not None and period != label:
                if b.period == "none":
                    continue
                try:
                    periods.bounds(b.period, period, b.timezone)
                except ValueError:
                    continue
                out.append(ledger.balance(replace(b, overrides=0), spent.get(periods.field(b.name, period), 0), (),
                                          now, period))
                continue
            out.append(ledger.balance(b, spent.get(periods.field(b.name, label), 0), running, now, label,
                                      periods.span_at(b, now, label)))
        return out

    def ping(self) -> None:
        conn.ping(self.r)
