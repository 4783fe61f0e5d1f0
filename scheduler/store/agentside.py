"""What node agents and runners may do in Redis: their own node's keys, attempt status, events.

The scheduler reads these; it never writes them (except to delete a dead node's lease key it found
expired, which is a no-op). Runners never write job records.
"""
import json
import time

from ..model import Gpu, Job
from .keys import Keys
from .reads import load_job


class AgentStore:
    def __init__(self, r, keys: Keys):
        self.r, self.k = r, keys

    # -- node registration and lease ----------------------------------------------------------
    def register(self, name: str, cpus: int, mem: int, slots: int, gpus: list[Gpu], host: str, pid: int,
                 lease_s: float, runs: str = "") -> None:
        now = time.time()
        p = self.r.pipeline()
        p.hset(self.k.node(name), mapping={
            "cpus": cpus, "mem": mem, "slots": slots, "host": host, "pid": pid, "hb": now, "started": now, "runs": runs,
            "gpus": json.dumps([[g.uuid, g.index, g.model, g.mem] for g in gpus])})
        p.sadd(self.k.nodes, name)
        p.set(self.k.node_lease(name), f"{host}:{pid}", px=int(lease_s * 1000))
        p.lpush(self.k.wake, "node")
        p.execute()

    def renew(self, name: str, lease_s: float, status: str = "") -> bool:
        """Extend the lease only while it still exists (XX): an expired lease must not come back to
        life, because the scheduler may already have declared this node's attempts lost."""
        p = self.r.pipeline()
        p.set(self.k.node_lease(name), status or "up", px=int(lease_s * 1000), xx=True)
        p.hset(self.k.node(name), "hb", time.time())
        return bool(p.execute()[0])

    def release(self, name: str) -> None:
        """Give the lease up now (clean stop), so the scheduler need not wait for it to expire."""
        p = self.r.pipeline()
        p.delete(self.k.node_lease(name))
        p.lpush(self.k.wake, "node")
        p.execute()

    def lease_alive(self, name: str) -> bool:
        return bool(self.r.exists(self.k.node_lease(name)))

    # -- attempts ------------------------------------------------------------------------------
    def job(self, jid: int) -> Job | None:
        return load_job(self.r, self.k, jid)

    def claim(self, jid: int, attempt: int, node: str, pid: int) -> bool:
        """First runner to claim an attempt wins: a re-delivered RQ job never runs a command twice."""
        return bool(self.r.hsetnx(self.k.attempt(jid, attempt), "claimed", f"{node}:{pid}"))

    def heartbeat(self, jid: int, attempt: int, **fields) -> None:
        self.r.hset(self.k.attempt(jid, attempt), mapping={"hb": time.time(), **fields})

    def control(self, jid: int) -> str | None:
        return self.r.get(self.k.control(jid))

    def post(self, kind: str, jid: int, attempt: int, node: str, body: dict) -> None:
        """Append an event for the scheduler and wake it."""
        p = self.r.pipeline()
        p.xadd(self.k.events, {"kind": kind, "job": jid, "attempt": attempt, "node": node,
                               "body": json.dumps(body, separators=(",", ":"))},
               maxlen=100_000, approximate=True)
        p.lpush(self.k.wake, "events")
        p.execute()
