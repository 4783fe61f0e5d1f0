"""The reads of the thin client (thinclient.py), over store/resp.py. Nothing here writes. Job records decode
into model.Job (imported only then); `stat` reads its index instead (statrows.py) and nodes come back as light
NodeView objects with the fields `stat` sums."""
import time
from collections import namedtuple
from itertools import compress
from operator import itemgetter
from types import SimpleNamespace

from .. import cjson
from . import resp
from .keys import Keys
from .rankreads import RankingReads

_STATE = '"state":'     # a record's state key (ThinReader.on_node)
# A record's attempts, none and some (ThinReader.ran); the second should an attempt's usage hold the first.
_NEVER_RAN, _RAN = '"attempts":[]', '"attempts":[{'
_COMMIT = '"commit":'     # a record's commitment (ThinReader.holdings)
# model.Gpu's fields by name, and by position as the node record lists them ([uuid, index, model, mem])
GpuView = namedtuple("GpuView", "uuid index model mem")


class NodeView:
    """A node as `stat`'s capacity line and `labq nodes` see it (model.Node's names for the same fields)."""
    __slots__ = ("name", "cpus", "mem", "slots", "gpus", "state", "lease_expiry", "last_heartbeat", "reason")

    def __init__(self, name, h: dict, pttl, admin, now: float, health: dict | None = None, holder=None):
        self.name, self.cpus, self.mem, self.slots = name, int(h["cpus"]), int(h["mem"]), int(h["slots"])
        self.gpus = [GpuView(u, int(ix), m, int(mem)) for u, ix, m, mem in cjson.loads(h.get("gpus", "[]"))]
        # As SchedulerStore.nodes: a lapsed lease is down, and so is one that names another epoch than
        # the registered agent's (that agent is not alive in it); otherwise the admin mark (drain) or up.
        self.lease_expiry = now + pttl / 1000 if pttl and pttl > 0 and (not h.get("epoch") or holder == h["epoch"]) \
            else 0.0
        self.state = "down" if self.lease_expiry <= now else (admin or "up")
        self.reason = (health or {}).get("reason", "")
        if self.state == "up" and health:
            self.state = "unhealthy"
        self.last_heartbeat = float(h.get("hb", 0))


def _hash(reply) -> dict:
    """HGETALL's reply as a dict: a map in RESP3, a flat list in RESP2."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def noperm(e) -> Exception | None:
    """A NOPERM reply as one line that says what to do (exit 3), or None for any other error. Roles
    generated before this labq's keys (e.g. the held arrays' labq:rests) refuse them: Redis answers,
    so "does not answer" would send the user after the wrong fault."""
    text = str(e)
    if not text.startswith("NOPERM"):
        return None
    from ..errors import RefusedError
    return RefusedError(f"Redis refused a read ({text.splitlines()[0]}): the Redis ACL roles predate "
                        "this labq's keys; an admin runs `labq admin acl --apply`")


class ThinReader(RankingReads):
    def __init__(self, conn, keys: Keys, unreachable, history=None):
        self.c, self.k, self._unreachable = conn, keys, unreachable
        self.history = history      # store/archive.History: where ended jobs go after history.keep
        self._specs: dict = {}      # array id -> its shared spec, read once (a spec never changes)

    def _pipe(self, cmds) -> list:
        try:
            out = self.c.pipeline(cmds)
        except resp.ConnectionLost as e:
            raise self._unreachable(e) from None
        for r in out:
            if isinstance(r, resp.RespError):
                raise noperm(r) or self._unreachable(r)
        return out

    def text(self, key: str) -> str | None:
        """One string key (store/history.py reads the cluster id and the archive's path so)."""
        v = self._pipe([("GET", key)])[0]
        return v.decode() if isinstance(v, bytes) else v

    def aof_enabled(self) -> bool | None:
        """INFO persistence, as SchedulerStore.aof_enabled; None where the role may not run INFO (the
        generated labq-client role may not: a user's `labq stat` cannot tell, and says nothing)."""
        try:
            info = self.c.pipeline([("INFO", "persistence")])[0]
        except resp.ConnectionLost as e:
            raise self._unreachable(e) from None
        if isinstance(info, resp.RespError):
            return None
        return False if "aof_enabled:0" in str(info) else True if "aof_enabled:1" in str(info) else None

    def job(self, jid: int):
        raw = self._pipe([("GET", self.k.job(jid))])[0]
        if not raw:
            from .rests import tasks_of
            got = tasks_of(self.rests(), [int(jid)]).get(int(jid))
            if got is not None:
                return got
            return self.history.jobs([jid]).get(int(jid)) if self.history is not None else None
        from . import codec
        return codec.loads(raw, self._spec)

    def jobs(self, ids) -> list:
        from .rests import fill
        ids = [int(j) for j in ids]
        out = fill(self.jobs_in_redis(ids), ids, self.rests)
        if self.history is not None and len(out) < len(ids):
            by_id = {**self.history.jobs(sorted(set(ids) - {j.id for j in out})), **{j.id: j for j in out}}
            out = [by_id[i] for i in ids if i in by_id]
        return out

    def acct_table(self, since: float, until: float = float("inf"), user=None, account=None,
                   committed=None) -> tuple[list, list]:
        """reads.Reader.acct_table's answer, without redis-py (`labq acct`'s table): the window's ids,
        then (with `committed`) their Redis acct rows, one HMGET per 2,000 in one round trip."""
        from .acctrows import acct_table
        ids = self._pipe([("ZRANGEBYSCORE", self.k.history, since, "+inf" if until == float("inf") else until)])[0]
        texts = None
        if committed is not None and ids:
            texts = [t for part in self._pipe([("HMGET", self.k.acct_rows, *ids[i:i + 2000])
                                              for i in range(0, len(ids), 2000)]) for t in part]
        return acct_table([int(i) for i in ids], texts, lambda ids: self.jobs_in_redis(ids, specs=False),
                          self.history, since, until, user, account, committed)

    def acct_rows(self, since: float = 0, until: float = float("inf"), user=None, account=None,
                  columns=None, views: bool = False) -> list:
        """reads.Reader.acct_rows's answer, without redis-py (`labq report`): Redis's records of the jobs
        that ended in the window (with `views`, jobview.JobView), and the archive's rows of the others."""
        ids = [int(i) for i in self._pipe([("ZRANGEBYSCORE", self.k.history, since,
                                            "+inf" if until == float("inf") else until)])[0]]
        recent = [j for j in (self.views(ids) if views else self.jobs_in_redis(ids))
                  if (not user or j.user == user) and (not account or j.account == account)]
        if self.history is None:
            return recent
        have = set(ids)          # in Redis and in the archive (a crash between the two steps): once
        return [j for j in self.history.acct(since, until, user, account, columns) if j.id not in have] + recent

    # -- the books: reads.Reader's, for `labq budget` and `labq report` -------------------------
    def spent(self) -> dict[str, int]:
        return {k: int(v) for k, v in _hash(self._pipe([("HGETALL", self.k.spent())])[0]).items()}

    def usage(self) -> dict[str, tuple[float, float]]:
        """reads.Reader.usage: the fair-share usage hash, account -> (decayed value, as of epoch)."""
        from ..money.fairshare import usage_from
        return usage_from(_hash(self._pipe([("HGETALL", self.k.usage)])[0]))

    def limits(self) -> dict[str, dict]:
        return {k: cjson.loads(v) for k, v in _hash(self._pipe([("HGETALL", self.k.limits)])[0]).items()}

    def overrides(self) -> list:
        from ..money.ledger import Override
        return sorted((Override.loads(v) for v in self._pipe([("HVALS", self.k.overrides)])[0]), key=lambda o: o.id)

    def override_records(self) -> list:
        """Every override with ledger.Override's fields, without the ledger module (money/balance.py)."""
        return [SimpleNamespace(**cjson.loads(v)) for v in self._pipe([("HVALS", self.k.overrides)])[0]]

    def holdings(self) -> list:
        """The active jobs that hold a commitment (model.Job.commit), each with what the balances read
        of it (money/balance.py): commit, rates and current (.start_time, .dispatch_time), taken from
        the record as codec.dumps writes it (fields at their default left out, attempts whole)
        without the job model (~14 ms of CPU with dataclasses, issue 39 item 4). Only the live jobs'
        records are read (_live: admission opens the attempt a commitment is for, its end clears both)."""
        ids = self._live()
        out = []
        for i in range(0, len(ids), 2000):
            for raw in self._pipe([("MGET", *[self.k.job(j) for j in ids[i:i + 2000]])])[0]:
                # A record without a commitment has no commit key (codec.dumps leaves the empty default
                # out): not decoded, as at 10,000 held jobs (~70 ms of json.loads for none of them).
                d = cjson.loads(raw) if raw and _COMMIT in raw else {}
                if d.get("commit"):
                    a = (d.get("attempts") or [None])[-1]
                    out.append(SimpleNamespace(commit=d["commit"], rates=d.get("rates", ()), current=None if a is None
                                               else SimpleNamespace(start_time=a.get("start_time"),
                                                                    dispatch_time=a.get("dispatch_time"))))
        return out

    def alerts(self, count: int = 1000) -> list[dict]:
        """The newest `count` alerts, oldest first."""
        got = self._pipe([("XREVRANGE", self.k.alerts, "+", "-", "COUNT", count)])[0]
        return [_hash(f) for _, f in got][::-1]

    def ledger_all(self, page: int = 10_000) -> list[dict]:
        """Every ledger entry, oldest first (reads.Reader.ledger_all): the archived ones, then Redis's
        (an entry in both counts once)."""
        archived = self.history.ledger() if self.history is not None else []
        seen = {i for i, _ in archived}
        out, start = [f for _, f in archived], "-"
        while True:
            got = self._pipe([("XRANGE", self.k.ledger, start, "+", "COUNT", page)])[0]
            out += [_hash(f) for i, f in got if i not in seen]
            if len(got) < page:
                return out
            start = "(" + got[-1][0]

    def jobs_in_redis(self, ids, specs: bool = True) -> list:
        """The records of `ids` that Redis holds (the archive is not asked); without `specs`, an
        array task's shared script and argv are not read (codec.loads leaves them empty)."""
        from . import codec
        out = []
        for i in range(0, len(ids), 2000):
            raws = self._pipe([("MGET", *[self.k.job(j) for j in ids[i:i + 2000]])])[0]
            out += [codec.loads(raw, self._spec if specs else None) for raw in raws if raw]
        return out

    def _spec(self, array_id: int) -> dict | None:
        """An array's shared {script, argv} (codec.shares_spec), for the records that refer to it:
        one GET per array, not per task."""
        if array_id not in self._specs:
            raw = self._pipe([("GET", self.k.spec(int(array_id)))])[0]
            self._specs[array_id] = cjson.loads(raw) if raw else None
        return self._specs[array_id]

    def active(self) -> list:
        ids, n = self._pipe([("ZRANGE", self.k.active, 0, -1), ("HLEN", self.k.rests)])
        jobs = self.jobs(ids)
        if not n:
            return jobs
        from .rests import every_task
        return sorted(jobs + every_task(self.rests()), key=lambda j: j.id)

    def ran(self) -> list:
        """The active jobs `labq report` counts, as active() gives them (by id; jobview.JobView where Redis
        holds them): all but those pending that never ran (a held queue's 10,000). Those in Keys.ran where
        it is trusted (_kept_ran); else as the `stat` rows say (a pending job's `prio` ends with its attempt
        count; ~0.8 MB at 10,000 held jobs); else every record (_ran_records). Resting tasks never ran."""
        from .statrows import ID, PRIO, TAIL
        kept = self._kept_ran()
        if kept is not None:
            return self._ran_records(kept)
        texts, n_active = self._multi(("HVALS", self.k.stat_rows), ("ZCARD", self.k.active))
        if len(texts) != n_active:
            return self._ran_records(self._pipe([("ZRANGE", self.k.active, 0, -1)])[0])
        return self._ran_records(sorted(int(r[ID]) for r in (t.split("\t", TAIL) for t in texts)
                                        if not r[PRIO].endswith(",0")))

    def _kept_ran(self) -> list | None:
        """Keys.ran's ids in order; None where it is absent (an older scheduler), kept by a leader not
        leading now (a downgrade; no leader this instant) or holds more ids than active jobs."""
        kept, n_active, by, leader = self._multi(("SMEMBERS", self.k.ran), ("ZCARD", self.k.active),
                                                 ("GET", self.k.ran_by), ("GET", self.k.leader))
        ok = "-" in kept and by is not None and by == leader and len(kept) - 1 <= n_active
        return sorted(int(i) for i in kept if i != "-") if ok else None

    def _ran_records(self, ids) -> list:
        """The records of `ids` (in order) but those pending that never ran, as ran() gives them. They
        are not decoded: no state key (pending is the default, left out: codec.dumps) and
        `"attempts":[]` in their text (~0.1 ms each)."""
        from .jobview import loads_many
        texts, gone = [], []
        for i in range(0, len(ids), 2000):
            part = ids[i:i + 2000]
            raws = self._pipe([("MGET", *[self.k.job(j) for j in part])])[0]
            for jid, raw in zip(part, raws):
                if not raw:
                    gone.append(jid)       # archived between the two reads: jobs() finds it there
                elif _STATE in raw or _NEVER_RAN not in raw or _RAN in raw:
                    texts.append(raw)
        out = loads_many(texts, self._spec)
        return sorted(out + self.jobs(gone), key=lambda j: j.id) if gone else out

    def on_node(self) -> list:
        """The active jobs on a node (states.ON_NODE) as jobview.JobView, in active()'s order (by id):
        what `labq nodes` and `labq share` read of active() (a held array's resting tasks are pending),
        without the model. Only the records that name a state are decoded: a record leaves out the
        fields at their default (codec.dumps), a pending job's its state, so at 10,000 pending jobs
        these decode the few that run, not 10,000. (The key's quotes are JSON's own: a string value
        holding that text has them escaped.)"""
        from ..jobs.codes import ON_NODE
        from .jobview import loads
        ids = self._live()
        out = []
        for i in range(0, len(ids), 2000):
            raws = self._pipe([("MGET", *[self.k.job(j) for j in ids[i:i + 2000]])])[0]
            out += [j for j in (loads(raw, self._spec) for raw in raws if raw and _STATE in raw) if j.state in ON_NODE]
        return out

    def _live(self) -> list:
        """The ids, in order, of active jobs among which are all those on a node or with an attempt open
        (on_node(), holdings()): Keys.ran's (_kept_ran: few more, requeued ones); else those whose `stat`
        row has a live part (statrows.py; ~0.6 MB at 10,000 pending jobs); else every active id."""
        kept = self._kept_ran()
        if kept is not None:
            return kept
        from .statrows import LIVE, TAIL
        texts, n_active = self._multi(("HVALS", self.k.stat_rows), ("ZCARD", self.k.active))
        if len(texts) < n_active:
            return self._pipe([("ZRANGE", self.k.active, 0, -1)])[0]
        # A live part is a JSON list: only a row with "\t[" in it can have one (the rest are not split).
        return sorted(int(r[0]) for r in (t.split("\t", TAIL) for t in texts if "\t[" in t) if r[LIVE])

    def active_views(self) -> list:
        """active() as jobview.JobView records, without the model (`labq prio`); active() itself where a
        held array rests (jobs/rest.py makes its tasks) or a record went between the two reads (to the
        archive, where active() finds it)."""
        ids, n = self._pipe([("ZRANGE", self.k.active, 0, -1), ("HLEN", self.k.rests)])
        out = [] if n else self.views(ids)
        return out if len(out) == len(ids) and not n else self.active()

    def pending_rows(self):
        """(the pending jobs' `stat` rows, the jobs on a node as jobview.JobView) for `labq prio`: the
        rows (statrows.py: a pending job's carries its submit time and expected run time) in stat_rows()'s
        one MULTI, and the records of only the few jobs on a node (fair share counts their use so far),
        not every pending job's (~3.5 MB at 10,000 held jobs). None where the index lacks rows (a
        scheduler that predates this row shape): the caller reads active_views() instead. The rows
        are picked by C loops (compress), not a Python test per row."""
        from ..jobs.codes import ON_NODE
        from .statrows import ID, LIVE, PRIO, STATE, TAIL, cells
        # In id order, though multifactor orders them itself: the jobs' objects are then made in about
        # the order prio walks them (the oldest first); in the hash's order they lay scattered over the
        # heap and ranking and the table took ~1.5-2.5x longer at 10,000 jobs (82595ce, reverted).
        rows, _ = self.stat_rows()
        if rows is None:
            return None
        live = compress(rows, map(itemgetter(LIVE), rows))
        on = [int(r[ID]) for r in live if cells(r[TAIL])[STATE] in ON_NODE]
        return list(compress(rows, map(itemgetter(PRIO), rows))), [j for j in self.views(on) if j.state in ON_NODE]

    def job_view(self, jid: int):
        """job(jid) as a jobview.JobView where Redis holds its record; job(jid) itself (a resting task,
        an archived job) where it does not."""
        raw = self._pipe([("GET", self.k.job(jid))])[0]
        if not raw:
            return self.job(jid)
        from .jobview import loads
        return loads(raw, self._spec)

    def jobs_view(self, ids) -> list:
        """jobs(ids) as jobview.JobView records where Redis holds them all; jobs(ids) itself otherwise."""
        ids = [int(j) for j in ids]
        out = self.views(ids)
        return out if len(out) == len(ids) else self.jobs(ids)

    def views(self, ids) -> list:
        """jobs_in_redis(ids) as jobview.JobView records."""
        if not ids:
            return []       # not even jobview's import (~1 ms of `labq prio` where no job runs)
        from .jobview import loads_many
        out = []
        for i in range(0, len(ids), 2000):
            raws = self._pipe([("MGET", *[self.k.job(j) for j in ids[i:i + 2000]])])[0]
            out += loads_many([raw for raw in raws if raw], self._spec)
        return out

    def rests(self) -> dict:
        """Held arrays' tasks not yet records (store/rests.py), by array id."""
        from .rests import loads
        ids = sorted(int(a) for a in self._pipe([("HKEYS", self.k.rests)])[0])
        texts = self._pipe([("MGET", *[self.k.rest(a) for a in ids])])[0] if ids else []
        return {a: loads(t, self._spec) for a, t in zip(ids, texts) if t}

    def stat_rows(self):
        """(rows, node names), rows and the active index read in one MULTI so that they agree.
        Rows come split and sorted by id (statrows.parse). Rows of jobs not in the index (written
        ahead of a big array's transaction, or left by a crash before it) are skipped; rows is None
        when some active job has no row (a scheduler that predates this row shape has not
        restarted yet): the caller reads the records instead."""
        from .statrows import parse, rest_texts
        texts, n_active, names, resting = self._multi(("HVALS", self.k.stat_rows), ("ZCARD", self.k.active),
                                                      ("SMEMBERS", self.k.nodes), ("HVALS", self.k.rests))
        # A held array kept as one rest (store/rests.py): its tasks' rows are spread from its one row.
        tasks = [t for v in resting for t in rest_texts(v)]
        if len(texts) == n_active:
            return parse(texts + tasks if tasks else texts), names
        if len(texts) < n_active:
            return None, names
        texts, ids = self._multi(("HVALS", self.k.stat_rows), ("ZRANGE", self.k.active, 0, -1))
        active = {int(i) for i in ids}
        rows = parse(texts, keep=active)
        if tasks:
            rows = sorted(rows + parse(tasks), key=lambda r: int(r[0]))
            return (rows if len(rows) == len(active) + len(tasks) else None), names
        return (rows if len(rows) == len(active) else None), names

    def _multi(self, *cmds) -> list:
        return self._pipe([("MULTI",), *cmds, ("EXEC",)])[-1]

    def nodes(self, names=None) -> list[NodeView]:
        now = time.time()
        if names is None:
            names = self._pipe([("SMEMBERS", self.k.nodes)])[0]
        names = sorted(names)
        cmds = []
        for n in names:
            cmds += [("HGETALL", self.k.node(n)), ("PTTL", self.k.node_lease(n)), ("GET", self.k.node_admin(n)),
                     ("HGETALL", self.k.node_health(n)), ("GET", self.k.node_lease(n))]
        res = self._pipe(cmds) if cmds else []
        out = []
        for i, n in enumerate(names):
            h, pttl, admin, health, holder = res[5 * i:5 * i + 5]
            h = _hash(h)
            if h:
                out.append(NodeView(n, h, pttl, admin, now, _hash(health), holder))
        return out

    def runners(self, nodes) -> dict[str, dict[str, str]]:
        """reads.Reader.runners: node -> {slot: what its persistent runner last said}."""
        nodes = list(nodes)
        return dict(zip(nodes, map(_hash, self._pipe([("HGETALL", self.k.node_runners(n)) for n in nodes])))) \
            if nodes else {}
