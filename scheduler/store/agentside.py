"""What node agents and runners may do in Redis: their own node's keys, attempt status, events.

The scheduler reads these; it never writes them (except to delete a dead node's lease key it found
expired, which is a no-op). Runners never write job records.

A slot runner's store (`open(..., fast=True)`) sends its per-attempt round trips (take, the first
read, claim, started, heartbeat, post, release) over store/resp.py rather than redis-py, whose
command packing and reply parsing were a third of a trivial job's runner CPU (issue 12); they raise
redis-py's exceptions all the same (conn.ERRORS for a lost connection, ResponseError for an error
reply), and everything else still goes through redis-py.
"""
import json
import time
from dataclasses import dataclass

import redis

from ..jobs.model import Gpu, Job
from . import codec, conn, resp, sentinel
from .keys import Keys
from .reads import load_job


def _short(acked, wanted: int, doubt: str = "") -> Exception:
    """A write the replicas did not confirm is as good as not made (the master may be an old one,
    cut off, whose writes Sentinel will discard): the caller retries, on the master Sentinel names.
    `doubt`: why the sentinels did not confirm the master after the WAIT (sentinel.doubt)."""
    if doubt:
        return redis.ConnectionError(f"the write is not acknowledged: {doubt}")
    return redis.ConnectionError(f"the write reached {acked} of the {wanted} replicas it needs within "
                                 f"{conn.WAIT_MS} ms (redis.min_replicas_ack)")


def _error(reply: str) -> Exception:
    """The exception redis-py raises for this error reply (LOADING is a BusyLoadingError, one of
    conn.ERRORS: a runner rides out a restarting Redis as it does a lost connection)."""
    try:
        from redis._parsers.base import BaseParser
    except ImportError:        # another redis-py layout: the base class still says what it is
        return redis.ResponseError(reply)
    return BaseParser.parse_error(reply)


# The schema of the first scheduler that hands scripts and environments over at dispatch (issue 34:
# the node roles since then read nothing else); an older one leaves a runner nothing it may read.
HANDOVER_SCHEMA = 2
DENIED = object()


class AgentStore:
    def __init__(self, r, keys: Keys, fast: "resp.Connection | None" = None):
        self.r, self.k, self.fast = r, keys, fast
        # Behind Sentinel: a claim and an attempt's end are WAITed on (redis.min_replicas_ack) before
        # the runner acts on them, so that a failover cannot lose what it acted on (store/sentinel.py).
        self.replicas = 0

    @classmethod
    def open(cls, url: str, prefix: str, fast: bool = False) -> "AgentStore":
        """A node-side connection. RESP2: no HELLO round trip on connect; nothing here reads a
        RESP3-only reply. `fast`: the hot path on store/resp.py (a slot runner's)."""
        store = cls(conn.connect(url, protocol=2), Keys(prefix), conn.connect_resp(url) if fast else None)
        store.replicas = sentinel.min_replicas_ack(url)
        return store

    def close(self) -> None:
        self.r.close()
        if self.fast is not None:
            self.fast.close()

    def _run(self, cmds: list, multi: bool = False, resend: bool = True, wait: float = 0.0,
             replicated: bool = False) -> list:
        """The replies of `cmds`, sent as one round trip (in MULTI/EXEC with `multi`). On resp.py
        where the store has it; errors as redis-py raises them. `replicated`: then WAIT for
        self.replicas replicas (on the same connection: WAIT counts its own connection's writes)."""
        n = self.replicas if replicated else 0
        if self.fast is None:
            return self._run_redis_py(cmds, multi, n)
        try:
            sent = [("MULTI",), *cmds, ("EXEC",)] if multi else list(cmds)
            got = self.fast.pipeline(sent + [("ROLE",)] if n else sent, wait, resend)
            acked, got = (self._wait(got[-1], n), got[:-1]) if n else (n, got)
        except resp.ConnectionLost as e:
            raise redis.ConnectionError(str(e)) from None
        except resp.RespError as e:       # from the handshake (AUTH, SELECT)
            raise _error(str(e)) from None
        except BaseException:
            self.fast.close()     # interrupted (a signal's exception) mid-reply: the next one would read it
            raise
        if multi:
            got = got[-1] if isinstance(got[-1], list) else [got[-1]]
        for x in got:
            if isinstance(x, resp.RespError):
                raise _error(str(x))
        if not isinstance(acked, int) or acked < n:
            self.fast.close()     # the next try asks Sentinel afresh
            raise _short(acked, n)
        return got

    # -- node registration and lease ----------------------------------------------------------
    def register(self, name: str, cpus: int, mem: int, slots: int, gpus: list[Gpu], host: str, pid: int,
                 lease_s: float, runs: str = "", addr: str = "", epoch: str = "") -> None:
        """The node's record and its lease. `epoch`: the agent incarnation's token, the lease's value
        (renew keeps it) and the record's `epoch`: the scheduler takes a node whose lease names
        another epoch for down, and a runner of an epoch that is over claims nothing."""
        now = time.time()
        p = self.r.pipeline()
        p.hset(self.k.node(name), mapping={
            "cpus": cpus, "mem": mem, "slots": slots, "host": host, "pid": pid, "hb": now, "started": now, "runs": runs,
            "epoch": epoch, "addr": addr or host,     # where a gang's other nodes reach it (MASTER_ADDR when rank 0)
            "gpus": json.dumps([[g.uuid, g.index, g.model, g.mem] for g in gpus])})
        p.sadd(self.k.nodes, name)
        p.set(self.k.node_lease(name), epoch or f"{host}:{pid}", px=int(lease_s * 1000))
        p.lpush(self.k.wake, "node")
        p.execute()

    def renew(self, name: str, lease_s: float, status: str = "") -> bool:
        """Extend the lease only while it still exists (XX): an expired lease must not come back to
        life, because the scheduler may already have declared this node's attempts lost."""
        # Behind Sentinel, a renewal no replica has is not believed (an old master's, cut off): the
        # agent then fences itself as it would with Redis away, before the scheduler requeues.
        got = self._run_redis_py([("SET", self.k.node_lease(name), status or "up", "PX", int(lease_s * 1000), "XX"),
                                  ("HSET", self.k.node(name), "hb", time.time())], False, self.replicas)
        return bool(got[0])

    def release(self, name: str) -> None:
        """Give the lease up now (clean stop), so the scheduler need not wait for it to expire."""
        p = self.r.pipeline()
        p.delete(self.k.node_lease(name))
        p.lpush(self.k.wake, "node")
        p.execute()

    def give_up_lease(self, name: str, epoch: str) -> bool:
        """A runner whose agent died: delete the node's lease if it still names that agent's epoch
        (a new incarnation's lease is left alone), so the scheduler sees the node down at once."""
        key = self.k.node_lease(name)
        with self.r.pipeline() as p:
            try:
                p.watch(key)
                if p.get(key) != epoch:
                    return False
                p.multi()
                p.delete(key)
                p.lpush(self.k.wake, "node")
                p.execute()
                return True
            except redis.WatchError:
                return False

    # -- attempts ------------------------------------------------------------------------------
    def job(self, jid: int) -> Job | None:
        """The record alone (its script is read at first_read, from this node's handover)."""
        return load_job(self.r, self.k, jid)

    def _wait(self, role, n: int):
        """WAIT on the fast connection, for every replica its ROLE listed (conn.replicas_online)."""
        if self.fast.sock is None:      # never on a new connection: WAIT would count none of our writes
            raise resp.ConnectionLost("the connection dropped before WAIT")
        acked = self.fast.raw_roundtrip([("WAIT", max(n, conn.replicas_online(role)), conn.WAIT_MS)])[0]
        if isinstance(acked, int) and acked >= n and self.fast.opts["scheme"] == "sentinel":
            why, _ = sentinel.doubt_thin(self.fast)     # a stale master's replica acknowledges too
            if why:
                raise _short(acked, n, why)     # _run closes the connection: the next try asks Sentinel
        return acked

    def _run_redis_py(self, cmds: list, multi: bool, replicas: int) -> list:
        keep = conn.Keep(self.r.connection_pool)
        try:
            p = self.r.pipeline(transaction=multi)
            p.connection_pool = keep
            for c in cmds:
                p.execute_command(*c)
            got = p.execute()
            acked = keep.wait(replicas, conn.WAIT_MS) if replicas else 0
            if acked < replicas:
                keep.kept.disconnect()
                if keep.stale:      # every connection to the old master: the next ones ask Sentinel
                    self.r.connection_pool.disconnect()
                raise _short(acked, replicas, keep.doubt)
            return got
        finally:
            keep.give_back()

    def claim(self, jid: int, attempt: int, node: str, pid: int, rank: int = 0,
              job: Job | None = None) -> tuple[bool, int, tuple]:
        """(won, the node lease's PTTL in ms, the variables `job`'s submitter exported (job_env),
        () without `job`), in one round trip. The first to claim an attempt wins: a runner that
        takes the same entry again, or the scheduler withdrawing it (dispatch.py), never both run it.
        A gang's part `rank` claims its own part (keys.part)."""
        part, me = self.k.part(jid, attempt, rank), f"{node}:{pid}"
        # claimed_at: the latency split's mark
        cmds = [("HSETNX", part, "claimed", me), ("HSETNX", part, "claimed_at", time.time()),
                ("HGET", part, "claimed"), ("PTTL", self.k.node_lease(node))]
        if job is not None:     # handed over to this node at dispatch (dispatchq.push), always there
            cmds.append(("GET", self.k.handover(node, jid, "env")))
        _, _, holder, pttl, *env = self._run(cmds, replicated=True)
        # Ours also when the claim was sent again after a lost reply (the first one had won).
        won = holder == me
        if job is None:
            return won, int(pttl), ()
        raw = env[0] if env[0] is not None else self._apart(self.k.job_env(codec.env_ref(job)), DENIED)
        digest = codec.env_digest(raw) if raw is not DENIED else None
        if digest:      # a submission's own key names its text (store/envs.py): read where a node may
            raw = self._apart(self.k.env_text(digest), DENIED)
        if raw is DENIED:   # not handed over, and not ours to read: never run without it (env_denied)
            return won, int(pttl), None
        return won, int(pttl), (codec.env_pairs(raw) if raw else job.env)

    def env_denied(self, job: Job, node: str) -> str:
        """Why claim() gave no environment: what the runner says as it fails the attempt. A scheduler
        of a schema before HANDOVER_SCHEMA hands nothing over (docs/admin.md: upgrade it first)."""
        try:
            raw = self._run([("GET", self.k.schema)])[0]
        except redis.ResponseError:
            raw = None
        found = int(raw) if raw is not None else 1
        what = (f"job {job.id}'s exported environment was not handed over ({self.k.handover(node, job.id, 'env')}) "
                f"and this node's role may not read {self.k.job_env(codec.env_ref(job))}")
        if found < HANDOVER_SCHEMA:
            return (f"the scheduler is older than this worker (the data in Redis is schema {found}, this worker "
                    f"needs {HANDOVER_SCHEMA}): upgrade the scheduler first; {what}")
        return (f"{what}: dispatched by a scheduler older than this worker, before its upgrade, or the "
                f"handover expired; requeue the job (labq requeue {job.id})")

    def job_and_control(self, jid: int, slot: "SlotRef | None" = None) -> tuple[Job | None, str | None]:
        """The job record and its control, in one round trip (a runner's first read); with `slot`,
        the slot's runner state says it runs this attempt, in the same round trip."""
        job, control, _ = self.first_read(jid, slot)
        return job, control

    def first_read(self, jid: int, slot: "SlotRef | None" = None, node: str = "",
                   here: str = "") -> tuple[Job | None, str | None, str | None]:
        """job_and_control, and with `node` the value of its lease (the epoch it names), in the same
        round trip: a runner checks its epoch before every claim. `here`: the node whose handover
        holds the script where neither `slot` nor `node` names it (a runner without an epoch)."""
        # The script, handed over to this node at dispatch (keys.handover: what a node role may
        # read), in the same round trip.
        on = slot.node if slot is not None else node or here
        cmds = [("GET", self.k.job(jid)), ("GET", self.k.control(jid)),
                ("GET", self.k.handover(on, jid, "script") if on else self.k.script(jid))]
        if node:
            cmds.append(("GET", self.k.node_lease(node)))
        if slot is not None:
            cmds.append(self._state_cmd(slot.node, slot.index, slot.running))
        raw, control, script, *rest = self._run(cmds)
        scripts = lambda ref: script if script is not None else self._apart(self.k.script(ref))     # noqa: E731
        return (codec.loads(raw, self._spec, scripts) if raw else None), control, (rest[0] if node else None)

    def _spec(self, array_id: int) -> dict | None:
        """An array's shared {argv} (codec.shares_spec): a task of an array whose argv is over
        codec.SHARED_SPEC bytes has a record without it, and one more round trip reads it."""
        raw = self._run([("GET", self.k.spec(int(array_id)))])[0]
        return json.loads(raw) if raw else None

    def _apart(self, key: str, denied=None) -> str | None:
        """A submission's script or environment itself (keys.script, keys.job_env): what a runner
        reads where nothing was handed over (an attempt dispatched by a scheduler before handovers,
        or a Redis without roles); a node role may not read it (`denied`)."""
        try:
            raw = self._run([("GET", key)])[0]
        except redis.ResponseError:      # NOPERM under the roles
            return denied
        return raw.decode() if isinstance(raw, bytes) else raw

    def started(self, jid: int, attempt: int, node: str, pid: int, start: float, rank: int = 0) -> int:
        """The attempt's process runs: its first heartbeat and the `started` event in one round
        trip; returns the node lease's PTTL in ms."""
        cmds = [("HSET", self.k.part(jid, attempt, rank), "hb", time.time(), "pid", pid, "start", start),
                ("PTTL", self.k.node_lease(node)),
                # Used: the handed-over copies go (a claim resent after a lost reply still found them).
                ("DEL", self.k.handover(node, jid, "script"), self.k.handover(node, jid, "env"))]
        # No wake-up: nothing waits on a start (the attempt is R since its admission; billing
        # takes the start from the event's body), so the scheduler reads it with the next event
        # or tick instead of spending a tick and a plan pass on it alone.
        cmds += self._event_cmds("started", jid, attempt, node, {"pid": pid, "start_time": start}, wake=False)
        return int(self._run(cmds)[1])

    def claimed_by(self, jid: int, attempt: int, rank: int = 0) -> str | None:
        """Who claimed the attempt (a gang's part `rank`)."""
        return self.r.hget(self.k.part(jid, attempt, rank), "claimed")

    def heartbeat(self, jid: int, attempt: int, node: str = "", rank: int = 0, **fields) -> int | None:
        """Record the runner's heartbeat; returns the node lease's PTTL in ms (-2: gone) when `node`."""
        cmds = [("HSET", self.k.part(jid, attempt, rank), "hb", time.time(),
                 *(x for kv in fields.items() for x in kv))]
        if node:
            cmds.append(("PTTL", self.k.node_lease(node)))
        got = self._run(cmds, replicated=bool(node))    # the lease's PTTL, as the replicas have it
        return int(got[1]) if node else None

    def publish_master(self, jid: int, attempt: int, addr: str, port: int) -> None:
        """Node rank 0 of a gang: where the other parts find it (worker/gang.py)."""
        self.r.hset(self.k.part(jid, attempt, 0), mapping={"addr": addr, "port": port})

    def master(self, jid: int, attempt: int) -> tuple[str, int] | None:
        addr, port = self.r.hmget(self.k.part(jid, attempt, 0), ["addr", "port"])
        return (addr, int(port)) if addr and port else None

    def control(self, jid: int, attempt: int = 0, rank: int = 0) -> str | None:
        """The job's control; with `attempt`, a gang part's own (dispatchq.mark_parts) first: it
        names that attempt, and stays when the control key is cleared or replaced."""
        if not attempt:
            return self._run([("GET", self.k.control(jid))])[0]
        control, own = self._run([("GET", self.k.control(jid)), ("HGET", self.k.part(jid, attempt, rank), "control")])
        return own or control

    def wait_control(self, node: str, jid: int, timeout: float) -> bool:
        """Block until the scheduler pushes a control for `jid` (True) or `timeout` passes."""
        return self.r.blpop([self.k.node_control(node, jid)], timeout=timeout) is not None

    def post(self, kind: str, jid: int, attempt: int, node: str, body: dict, slot: "SlotRef | None" = None) -> None:
        """Append an event to the node's own stream and wake the scheduler; with `slot`, the
        attempt's entry leaves the slot's list and the slot is idle again, in the same transaction
        (a runner's last round trip: the slot then has nothing to write before its next pop)."""
        cmds = self._event_cmds(kind, jid, attempt, node, body)
        if slot is not None:
            cmds += self._release_cmds(slot)
        self._run(cmds, multi=True, replicated=kind == "finished")

    def release_slot(self, slot: "SlotRef") -> None:
        """The slot's entry is done with (the attempt ran and ended, or was not to run here)."""
        self._run(self._release_cmds(slot), multi=True)

    def _release_cmds(self, slot: "SlotRef") -> list:
        return [("LREM", self.k.dispatch_slot(slot.node, slot.index), 1, slot.entry),
                self._state_cmd(slot.node, slot.index, slot.idle)]

    def _event_cmds(self, kind: str, jid: int, attempt: int, node: str, body: dict, wake: bool = True) -> list:
        cmds = [("XADD", self.k.node_events(node), "MAXLEN", "~", 100_000, "*", "kind", kind, "job", jid,
                 "attempt", attempt, "node", node, "body", json.dumps(body, separators=(",", ":")))]
        if wake:
            cmds.append(("LPUSH", self.k.wake, "events"))
        return cmds

    # -- the node's dispatch list ----------------------------------------------------------------
    def take(self, node: str, slot: int, timeout: float) -> str | None:
        """Block until an attempt is dispatched to `node` and move it to this slot's own list (a
        claim that survives the runner's crash); None after `timeout`. Never sent twice: a move
        whose reply was lost is in the slot's list, where the runner's successor finds it."""
        if self.fast is None:
            return self.r.blmove(self.k.dispatch(node), self.k.dispatch_slot(node, slot), timeout, "RIGHT", "LEFT")
        return self._run([("BLMOVE", self.k.dispatch(node), self.k.dispatch_slot(node, slot), "RIGHT", "LEFT",
                           timeout)], resend=False, wait=timeout)[0]

    def taken(self, node: str, slot: int) -> list[str]:
        """What this slot took and never finished (its previous runner died), oldest first."""
        return list(reversed(self.r.lrange(self.k.dispatch_slot(node, slot), 0, -1)))

    def done(self, node: str, slot: int, raw: str) -> None:
        self.r.lrem(self.k.dispatch_slot(node, slot), 1, raw)

    def runners(self, node: str) -> dict[str, str]:
        return self.r.hgetall(self.k.node_runners(node))

    def attempt_status(self, jid: int, attempt: int, rank: int = 0) -> tuple[str | None, float | None]:
        """(claimed, last sign of life) of an attempt (a gang's part `rank`): its last heartbeat, else
        when it was claimed (a runner silent since its claim is as silent as one whose heartbeats stopped)."""
        claimed, hb, at = self.r.hmget(self.k.part(jid, attempt, rank), ["claimed", "hb", "claimed_at"])
        return claimed, float(hb or at) if (hb or at) else None

    def part_process(self, jid: int, attempt: int, rank: int = 0) -> tuple[int | None, float | None]:
        """(pid, start) of the job process an attempt's part (`rank`) started, as `started` wrote them."""
        pid, start = self.r.hmget(self.k.part(jid, attempt, rank), ["pid", "start"])
        return (int(pid) if pid else None), (float(start) if start else None)

    def reset_runners(self, node: str) -> None:
        self.r.delete(self.k.node_runners(node))

    def runner_state(self, node: str, slot: int, state: str) -> None:
        """What each runner is doing, for `labq nodes`."""
        self._run([self._state_cmd(node, slot, state)])

    def _state_cmd(self, node: str, slot: int, state: str) -> tuple:
        return ("HSET", self.k.node_runners(node), str(slot), f"{state} {time.time():.3f}")

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
