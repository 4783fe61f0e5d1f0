"""Read-only queries for the CLI and the Python client. Nothing here writes."""
from ..model import Job
from . import codec
from .keys import Keys


class Reader:
    def __init__(self, r, keys: Keys):
        self.r, self.k = r, keys

    def jobs(self, ids) -> list[Job]:
        out = []
        ids = list(ids)
        for i in range(0, len(ids), 2000):
            out += [codec.loads(raw) for raw in self.r.mget([self.k.job(int(j)) for j in ids[i:i + 2000]]) if raw]
        return out

    def active(self) -> list[Job]:
        return self.jobs(self.r.zrange(self.k.active, 0, -1))

    def ended(self, since: float = 0, until: float = float("inf")) -> list[Job]:
        return self.jobs(self.r.zrangebyscore(self.k.history, since, "+inf" if until == float("inf") else until))

    def job(self, jid: int) -> Job | None:
        raw = self.r.get(self.k.job(jid))
        return codec.loads(raw) if raw else None

    def spent(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.r.hgetall(self.k.spent()).items()}

    def ledger(self, count: int = 100_000) -> list[dict]:
        return [f for _, f in self.r.xrange(self.k.ledger, count=count)]

    def attempt_status(self, jid: int, n: int) -> dict:
        return self.r.hgetall(self.k.attempt(jid, n))
