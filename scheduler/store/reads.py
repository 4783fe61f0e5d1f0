"""Read-only queries for the CLI and the Python client. Nothing here writes."""
import json

from ..model import Job
from . import codec
from .keys import Keys


def load_jobs(r, k: Keys, ids, chunk: int = 1000) -> list[Job]:
    """The job records of `ids` that exist, in order: the one job reader of the client, the
    scheduler and the agent (one MGET per `chunk` ids)."""
    out = []
    ids = list(ids)
    for i in range(0, len(ids), chunk):
        out += [codec.loads(raw) for raw in r.mget([k.job(int(j)) for j in ids[i:i + chunk]]) if raw]
    return out


def load_job(r, k: Keys, jid: int) -> Job | None:
    raw = r.get(k.job(jid))
    return codec.loads(raw) if raw else None


class Reader:
    def __init__(self, r, keys: Keys):
        self.r, self.k = r, keys

    def jobs(self, ids) -> list[Job]:
        return load_jobs(self.r, self.k, ids)

    def active(self) -> list[Job]:
        return self.jobs(self.r.zrange(self.k.active, 0, -1))

    def ended(self, since: float = 0, until: float = float("inf")) -> list[Job]:
        return self.jobs(self.r.zrangebyscore(self.k.history, since, "+inf" if until == float("inf") else until))

    def job(self, jid: int) -> Job | None:
        return load_job(self.r, self.k, jid)

    def node_names(self) -> set[str]:
        """The nodes that ever registered."""
        return set(self.r.smembers(self.k.nodes))

    def spent(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.r.hgetall(self.k.spent()).items()}

    def usage(self) -> dict[str, tuple[float, float]]:
        return usage_from(self.r.hgetall(self.k.usage))

    def ledger(self, count: int = 100_000) -> list[dict]:
        return [f for _, f in self.r.xrange(self.k.ledger, count=count)]

    def attempt_status(self, jid: int, n: int) -> dict:
        return self.r.hgetall(self.k.attempt(jid, n))

    def overrides(self) -> list:
        from ..ledger import Override
        return sorted((Override.loads(v) for v in self.r.hvals(self.k.overrides)), key=lambda o: o.id)

    def limits(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.r.hgetall(self.k.limits).items()}

    def alerts(self, count: int = 1000) -> list[dict]:
        """The newest `count` alerts, oldest first."""
        return [f for _, f in self.r.xrevrange(self.k.alerts, count=count)][::-1]

    def ledger_all(self, page: int = 10_000) -> list[dict]:
        """Every ledger entry, oldest first, read in pages."""
        out, start = [], "-"
        while True:
            got = self.r.xrange(self.k.ledger, start, "+", count=page)
            out += [f for _, f in got]
            if len(got) < page:
                return out
            start = "(" + got[-1][0]

    def ledger_keys(self) -> set[str]:
        return set(self.r.smembers(self.k.ledger_keys))


def usage_from(raw: dict) -> dict[str, tuple[float, float]]:
    """The fair-share usage hash, account -> (decayed value, as of epoch); bad entries are skipped."""
    out = {}
    for acct, text in raw.items():
        try:
            value, since = json.loads(text)
            out[acct] = (float(value), float(since))
        except (ValueError, TypeError):
            continue
    return out
