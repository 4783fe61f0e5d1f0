"""What node agents and runners may do in Redis: their own node's keys, attempt status, events.

The scheduler reads these; it never writes them (except to delete a dead node's lease key it found
expired, which is a no-op). Runners never write job records.
"""
import json
import time
from dataclasses import dataclass

from ..model import Gpu, Job
from . import codec, conn
from .keys import Keys
from .reads import load_job


class AgentStore:
    def __init__(self, r, keys: Keys):
        self.r, self.k = r, keys

    @classmethod
    def open(cls, url: str, prefix: str) -> "AgentStore":
        """A node-side connection. RESP2: no HELLO round trip on connect (an attempt runner is a
        fresh fork, and connects once per attempt); nothing here reads a RESP3-only reply."""
        return cls(conn.connect(url, protocol=2), Keys(prefix))

    def close(self) -> None:
        self.r.close()

    # -- node registration and lease ----------------------------------------------------------
    def register(self, name: str, cpus: int, mem: int, slots: int, gpus: list[Gpu], host: str, pid: int,
                 lease_s: float, runs: str = "", addr: str = "") -> None:
        now = time.time()
        p = self.r.pipeline()
        p.hset(self.k.node(name), mapping={
            "cpus": cpus, "mem": mem, "slots": slots, "host": host, "pid": pid, "hb": now, "started": now, "runs": runs,
            "addr": addr or host,     # where a gang's other nodes reach it (MASTER_ADDR when rank 0)
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

    def job_env(self, job: Job) -> tuple[tuple[str, str], ...]:
        """The variables the job's submitter exported (keys.job_env); a record from before they
        were kept apart carries them itself."""
        raw = self.r.get(self.k.job_env(codec.env_ref(job)))
        return tuple((n, v) for n, v in json.loads(raw)) if raw else job.env

    def claim(self, jid: int, attempt: int, node: str, pid: int, rank: int = 0,
              job: Job | None = None) -> tuple[bool, int, tuple]:
        """(won, the node lease's PTTL in ms, the variables `job`'s submitter exported (job_env),
        () without `job`), in one round trip. The first to claim an attempt wins: a runner that
        takes the same entry again, or the scheduler withdrawing it (dispatch.py), never both run it.
        A gang's part `rank` claims its own part (keys.part)."""
        p = self.r.pipeline(transaction=False)
        p.hsetnx(self.k.part(jid, attempt, rank), "claimed", f"{node}:{pid}")
        p.hsetnx(self.k.part(jid, attempt, rank), "claimed_at", time.time())    # the latency split's mark
        p.pttl(self.k.node_lease(node))
        if job is not None:
            p.get(self.k.job_env(codec.env_ref(job)))
        won, _, pttl, *env = p.execute()
        if job is None:
            return bool(won), int(pttl), ()
        return bool(won), int(pttl), (tuple((n, v) for n, v in json.loads(env[0])) if env[0] else job.env)

    def job_and_control(self, jid: int, slot: "SlotRef | None" = None) -> tuple[Job | None, str | None]:
        """The job record and its control, in one round trip (a runner's first read); with `slot`,
        the slot's runner state says it runs this attempt, in the same round trip."""
        p = self.r.pipeline(transaction=False)
        p.get(self.k.job(jid))
        p.get(self.k.control(jid))
        if slot is not None:
            self._runner_state(p, slot.node, slot.index, slot.running)
        raw, control, *_ = p.execute()
        return (codec.loads(raw) if raw else None), control

    def started(self, jid: int, attempt: int, node: str, pid: int, start: float, rank: int = 0) -> int:
        """The attempt's process runs: its first heartbeat and the `started` event in one round
        trip; returns the node lease's PTTL in ms."""
        p = self.r.pipeline(transaction=False)
        p.hset(self.k.part(jid, attempt, rank), mapping={"hb": time.time(), "pid": pid, "start": start})
        p.pttl(self.k.node_lease(node))
        # No wake-up: nothing waits on a start (the attempt is R since its admission; billing
        # takes the start from the event's body), so the scheduler reads it with the next event
        # or tick instead of spending a tick and a plan pass on it alone.
        self._event(p, "started", jid, attempt, node, {"pid": pid, "start_time": start}, wake=False)
        return int(p.execute()[1])

    def claimed_by(self, jid: int, attempt: int) -> str | None:
        return self.r.hget(self.k.attempt(jid, attempt), "claimed")

    def heartbeat(self, jid: int, attempt: int, node: str = "", rank: int = 0, **fields) -> int | None:
        """Record the runner's heartbeat; returns the node lease's PTTL in ms (-2: gone) when `node`."""
        p = self.r.pipeline(transaction=False)
        p.hset(self.k.part(jid, attempt, rank), mapping={"hb": time.time(), **fields})
        if node:
            p.pttl(self.k.node_lease(node))
        got = p.execute()
        return int(got[1]) if node else None

    def publish_master(self, jid: int, attempt: int, addr: str, port: int) -> None:
        """Node rank 0 of a gang: where the other parts find it (worker/gang.py)."""
        self.r.hset(self.k.part(jid, attempt, 0), mapping={"addr": addr, "port": port})

    def master(self, jid: int, attempt: int) -> tuple[str, int] | None:
        addr, port = self.r.hmget(self.k.part(jid, attempt, 0), ["addr", "port"])
        return (addr, int(port)) if addr and port else None

    def control(self, jid: int) -> str | None:
        return self.r.get(self.k.control(jid))

    def wait_control(self, node: str, jid: int, timeout: float) -> bool:
        """Block until the scheduler pushes a control for `jid` (True) or `timeout` passes."""
        return self.r.blpop([self.k.node_control(node, jid)], timeout=timeout) is not None

    def post(self, kind: str, jid: int, attempt: int, node: str, body: dict, slot: "SlotRef | None" = None) -> None:
        """Append an event to the node's own stream and wake the scheduler; with `slot`, the
        attempt's entry leaves the slot's list and the slot is idle again, in the same transaction
        (a runner's last round trip: the slot then has nothing to write before its next pop)."""
        p = self.r.pipeline()
        self._event(p, kind, jid, attempt, node, body)
        if slot is not None:
            self._release(p, slot)
        p.execute()

    def release_slot(self, slot: "SlotRef") -> None:
        """The slot's entry is done with (the attempt ran and ended, or was not to run here)."""
        p = self.r.pipeline()
        self._release(p, slot)
        p.execute()

    def _release(self, p, slot: "SlotRef") -> None:
        p.lrem(self.k.dispatch_slot(slot.node, slot.index), 1, slot.entry)
        self._runner_state(p, slot.node, slot.index, slot.idle)

    def _event(self, p, kind: str, jid: int, attempt: int, node: str, body: dict, wake: bool = True) -> None:
        p.xadd(self.k.node_events(node), {"kind": kind, "job": jid, "attempt": attempt, "node": node,
                                          "body": json.dumps(body, separators=(",", ":"))},
               maxlen=100_000, approximate=True)
        if wake:
            p.lpush(self.k.wake, "events")

    # -- the node's dispatch list ----------------------------------------------------------------
    def take(self, node: str, slot: int, timeout: float) -> str | None:
        """Block until an attempt is dispatched to `node` and move it to this slot's own list (a
        claim that survives the runner's crash); None after `timeout`."""
        return self.r.blmove(self.k.dispatch(node), self.k.dispatch_slot(node, slot), timeout, "RIGHT", "LEFT")

    def taken(self, node: str, slot: int) -> list[str]:
        """What this slot took and never finished (its previous runner died), oldest first."""
        return list(reversed(self.r.lrange(self.k.dispatch_slot(node, slot), 0, -1)))

    def done(self, node: str, slot: int, raw: str) -> None:
        self.r.lrem(self.k.dispatch_slot(node, slot), 1, raw)

    def runners(self, node: str) -> dict[str, str]:
        return self.r.hgetall(self.k.node_runners(node))

    def attempt_status(self, jid: int, attempt: int) -> tuple[str | None, float | None]:
        """(claimed, last heartbeat) of an attempt."""
        claimed, hb = self.r.hmget(self.k.attempt(jid, attempt), ["claimed", "hb"])
        return claimed, float(hb) if hb else None

    def reset_runners(self, node: str) -> None:
        self.r.delete(self.k.node_runners(node))

    def runner_state(self, node: str, slot: int, state: str) -> None:
        """What each runner is doing, for `labq nodes`."""
        self._runner_state(self.r, node, slot, state)

    def _runner_state(self, p, node: str, slot: int, state: str) -> None:
        p.hset(self.k.node_runners(node), str(slot), f"{state} {time.time():.3f}")

    # -- spool of archived jobs (store/archive.py posts them) -----------------------------------------
    def purge_list(self, node: str, n: int = 500) -> list[int]:
        """Up to n archived jobs whose stored script and checkpoints this node's spool still holds."""
        return [int(i) for i in self.r.srandmember(self.k.node_purge(node), n)]

    def purged(self, node: str, ids) -> None:
        if ids:
            self.r.srem(self.k.node_purge(node), *ids)


@dataclass(frozen=True)
class SlotRef:
    """The slot list entry an attempt runner was forked for: it says in its first read that the
    slot runs it, and releases the entry with its last write."""
    node: str
    index: int
    entry: str              # "<job>:<attempt>", as popped
    pid: int                # the slot runner's pid, shown by `labq nodes`

    @property
    def running(self) -> str:
        return f"running {self.entry.replace(':', '.')} pid={self.pid}"

    @property
    def idle(self) -> str:
        return f"idle pid={self.pid}"
