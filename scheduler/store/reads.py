"""Read-only queries for the CLI and the Python client. Nothing here writes."""
import json
from typing import NamedTuple

from ..jobs.model import Job
from ..money.fairshare import usage_from
from . import codec, rests
from .acctrows import acct_table
from .keys import Keys


def load_jobs(r, k: Keys, ids, chunk: int = 1000) -> list[Job]:
    """The job records of `ids` that exist, in order: the one job reader of the client, the
    scheduler and the agent (one MGET per `chunk` ids)."""
    out = []
    ids = list(ids)
    specs = Specs(r, k)
    for i in range(0, len(ids), chunk):
        out += [codec.loads(raw, specs) for raw in r.mget([k.job(int(j)) for j in ids[i:i + chunk]]) if raw]
    return out


def load_job(r, k: Keys, jid: int, scripts: bool = False) -> Job | None:
    """One job record; with `scripts`, its script kept apart too (the scheduler and nodes may read it)."""
    raw = r.get(k.job(jid))
    if not raw:
        return None
    specs = Specs(r, k)
    return codec.loads(raw, specs, specs.script if scripts else None)


def private(r, k: Keys, job: Job) -> tuple[str | None, tuple]:
    """(script text or None, exported (name, value) pairs) of `job` (scheduler/security/private.py): from the
    keys kept apart, else what the record itself holds (archived, or written before issue 34)."""
    ref = codec.env_ref(job)
    script, env = r.mget([k.script(ref), k.job_env(ref)])
    if isinstance(script, bytes):
        script = script.decode()
    digest = codec.env_digest(env)
    if digest:      # stored once for every submission that exported the same (store/envs.py)
        env = r.get(k.env_text(digest))
    return (script or job.script or None), (codec.env_pairs(env) if env else job.env)


class Run(NamedTuple):
    """An ended job as the estimator reads it (model.Job's attribute names for those fields)."""
    id: int
    user: str
    name: str
    tags: tuple
    end_time: float | None
    current: "RunAttempt | None"


class RunAttempt(NamedTuple):
    outcome: str | None
    start_time: float | None
    dispatch_time: float | None
    end_time: float | None


def _run(d: dict) -> Run:
    """A record's Run; a field left out of it is at model.Job's default (codec.dumps)."""
    atts = d.get("attempts")
    a = atts[-1] if atts else None
    return Run(d["id"], d["user"], d.get("name", ""), tuple(tuple(t) for t in d.get("tags", ())), d.get("end_time"),
               RunAttempt(a.get("outcome"), a.get("start_time"), a.get("dispatch_time"), a.get("end_time"))
               if a is not None else None)


class Reader:
    """`history`: the accounting archive (store/archive.History) that ended jobs and old ledger
    entries move to; reads take the union, so answers do not change when rows move there."""

    def __init__(self, r, keys: Keys, history=None):
        self.r, self.k, self.history = r, keys, history

    def jobs(self, ids) -> list[Job]:
        ids = [int(i) for i in ids]
        found = rests.fill(load_jobs(self.r, self.k, ids), ids, self.rests)
        if self.history is not None and len(found) < len(ids):
            have = {j.id for j in found}
            old = self.history.jobs([i for i in ids if i not in have])
            by_id = {**old, **{j.id: j for j in found}}
            found = [by_id[i] for i in ids if i in by_id]
        return found

    def runners(self, nodes) -> dict[str, dict[str, str]]:
        """node -> {slot: "idle pid=…", "running <job>.<attempt> pid=…", … with the time it was set},
        as each node's persistent runners report themselves."""
        nodes = list(nodes)
        p = self.r.pipeline(transaction=False)
        for n in nodes:
            p.hgetall(self.k.node_runners(n))
        return dict(zip(nodes, p.execute()))

    def active(self) -> list[Job]:
        jobs = self.jobs(self.r.zrange(self.k.active, 0, -1))
        resting = rests.every_task(self.rests()) if self.r.hlen(self.k.rests) else []
        return sorted(jobs + resting, key=lambda j: j.id) if resting else jobs

    def rests(self) -> dict:
        """Held arrays' tasks not yet records (store/rests.py), by array id."""
        return rests.load(self.r, self.k, Specs(self.r, self.k))

    def _recent_ids(self, since: float, until: float) -> list[int]:
        return [int(i) for i in self.r.zrangebyscore(self.k.history, since, "+inf" if until == float("inf") else until)]

    def _recent(self, since: float, until: float) -> list[Job]:
        return load_jobs(self.r, self.k, self._recent_ids(since, until))

    def ended(self, since: float = 0, until: float = float("inf")) -> list[Job]:
        recent = self._recent(since, until)
        if self.history is None:
            return recent
        have = {j.id for j in recent}
        return [j for j in self.history.ended(since, until) if j.id not in have] + recent

    def recent_ended(self, count: int) -> list[Job]:
        """The `count` jobs that ended last and are still in Redis, oldest end first (the run-time
        estimator's history at start: bounded, one ZRANGE and an MGET per 1,000)."""
        if count <= 0:
            return []
        return load_jobs(self.r, self.k, self.r.zrange(self.k.history, -count, -1))

    def recent_runs(self, count: int) -> list:
        """recent_ended's jobs as the run-time estimator reads them (estimate.keys, run_seconds): id,
        user, name, tags, end_time and the last attempt, without decoding whole records (a leader's
        start relearns 20,000 of them: most of its start-up time)."""
        if count <= 0:
            return []
        ids = self.r.zrange(self.k.history, -count, -1)
        out = []
        for i in range(0, len(ids), 1000):
            out += [_run(json.loads(raw)) for raw in self.r.mget([self.k.job(int(j)) for j in ids[i:i + 1000]]) if raw]
        return out

    def attempt_ends(self, since: float, count: int) -> list[tuple]:
        """(end time, user, outcome) of each attempt of the newest `count` jobs that ended since
        `since`, read from the records' JSON without decoding whole records (the crash guard's
        rebuild at a leader's start: bounded, whatever ended meanwhile)."""
        ids = self.r.zrevrangebyscore(self.k.history, "+inf", since, start=0, num=count) if count > 0 else []
        out: list[tuple] = []
        for i in range(0, len(ids), 1000):
            for raw in self.r.mget([self.k.job(int(j)) for j in ids[i:i + 1000]]):
                if raw:
                    d = json.loads(raw)
                    out += [(a.get("end_time"), d["user"], a.get("outcome")) for a in d.get("attempts") or ()]
        return out

    def acct_rows(self, since: float = 0, until: float = float("inf"), user=None, account=None,
                  columns=None) -> list:
        """Ended jobs as `acct` and `report` read them: Redis's records, and the archive's compact
        rows (store/acctrows.AcctJob, with only `columns` read where given) of the others, filtered
        by user and account where given."""
        ids = self._recent_ids(since, until)
        recent = [j for j in load_jobs(self.r, self.k, ids)
                  if (not user or j.user == user) and (not account or j.account == account)]
        if self.history is None:
            return recent
        have = set(ids)          # in Redis and in the archive (a crash between the two steps): once
        return [j for j in self.history.acct(since, until, user, account, columns) if j.id not in have] + recent

    def acct_table(self, since: float, until: float = float("inf"), user=None, account=None,
                   committed=None) -> tuple[list, list]:
        """What `labq acct`'s table prints of the ended jobs: (tuples of store/acctrows.TABLE_ORDER:
        the archive's, and with `committed` (acctrows.acct_table) Redis's acct rows; the records of the
        others: Redis's jobs without a row, and an older archive's)."""
        ids = self._recent_ids(since, until)
        texts = None
        if committed is not None and ids:
            p = self.r.pipeline(transaction=False)
            for i in range(0, len(ids), 2000):
                p.hmget(self.k.acct_rows, ids[i:i + 2000])
            texts = [t for part in p.execute() for t in part]
        return acct_table(ids, texts, lambda ids: load_jobs(self.r, self.k, ids), self.history,
                          since, until, user, account, committed)

    def acct_stream(self, since: float, until: float, committed):
        """Every ended job of [since, until] as an acct row (tuples in store/acctrows.NAMES order),
        one at a time: the archive's, then Redis's (rows made here; `committed(jobs) -> {id: micro}`)."""
        from . import acctrows
        ids = self._recent_ids(since, until)
        if self.history is not None:
            have = set(ids)
            yield from (v for v in self.history.acct_iter(since, until) if v[0] not in have)
        for i in range(0, len(ids), 1000):
            jobs = load_jobs(self.r, self.k, ids[i:i + 1000])
            cost = committed(jobs)
            yield from (acctrows.row(j, cost.get(j.id, 0)) for j in jobs)

    def job(self, jid: int) -> Job | None:
        j = load_job(self.r, self.k, jid)
        if j is None:
            j = rests.tasks_of(self.rests(), [int(jid)]).get(int(jid))
        if j is None and self.history is not None:
            j = self.history.jobs([jid]).get(int(jid))
        return j

    def private(self, job: Job) -> tuple[str | None, tuple]:
        """A job's script and exported environment (module private(); security/private.py)."""
        return private(self.r, self.k, job)

    def text(self, key: str) -> str | None:
        """One string key (store/history.py reads the cluster id and the archive's path so)."""
        return self.r.get(key)

    def dead(self, count: int) -> list[dict]:
        """The newest `count` dead letters (labq:dead), oldest first, each with its entry id."""
        return [{"id": i, **f} for i, f in reversed(self.r.xrevrange(self.k.dead, count=count))]

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
        from ..money.ledger import Override
        return sorted((Override.loads(v) for v in self.r.hvals(self.k.overrides)), key=lambda o: o.id)

    def limits(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.r.hgetall(self.k.limits).items()}

    def alerts(self, count: int = 1000) -> list[dict]:
        """The newest `count` alerts, oldest first."""
        return [f for _, f in self.r.xrevrange(self.k.alerts, count=count)][::-1]

    def ledger_all(self, page: int = 10_000) -> list[dict]:
        """Every ledger entry, oldest first, read in pages: the archived ones, then Redis's (an
        entry in both — a crash between the archive's two steps — counts once)."""
        archived = self.history.ledger() if self.history is not None else []
        seen = {i for i, _ in archived}
        out, start = [f for _, f in archived], "-"
        while True:
            got = self.r.xrange(self.k.ledger, start, "+", count=page)
            out += [f for i, f in got if i not in seen]
            if len(got) < page:
                return out
            start = "(" + got[-1][0]

    def ledger_stream(self, since: float, until: float, page: int = 10_000):
        """(stream id, fields) of every ledger entry written in [since, until] (its stream id's time),
        oldest first, one at a time: the archive's, then Redis's; an entry in both (a crash between
        the archive's two steps) once. The archiver moves the oldest first, so the archive's entries
        that Redis no longer holds all come before Redis's."""
        lo, hi = int(since * 1000), int(min(until, 1e15) * 1000)
        recent, start = [], str(lo)
        while True:
            got = self.r.xrange(self.k.ledger, start, str(hi), count=page)
            recent += got
            if len(got) < page:
                break
            start = "(" + got[-1][0]
        if self.history is not None:
            have = {i for i, _ in recent}
            yield from ((i, f) for i, f in self.history.ledger_window(lo, hi) if i not in have)
        yield from recent

    def leader_and_archive(self) -> tuple[str, str]:
        """(the leading scheduler's id, where it published its archive); "" where none."""
        leader, archive = self.r.mget([self.k.leader, self.k.archive])
        return leader or "", archive or ""

    def ledger_anchor(self) -> dict | None:
        """The archived chain's head as the last archive pass left it (store/archive.py)."""
        import json
        raw = self.r.get(self.k.ledger_anchor)
        return json.loads(raw) if raw else None

    def ledger_keys(self) -> set[str]:
        keys = set(self.r.smembers(self.k.ledger_keys))
        return keys | self.history.keys() if self.history is not None else keys


class Specs:
    """Arrays' shared specs, each read once (codec.loads calls this per task that refers to one);
    `script`: a submission's script kept apart (keys.script), likewise (the archiver's, the agent's)."""

    def __init__(self, r, keys: Keys):
        self.r, self.k, self.seen, self.scripts = r, keys, {}, {}

    def __call__(self, array_id: int) -> dict | None:
        if array_id not in self.seen:
            raw = self.r.get(self.k.spec(int(array_id)))
            self.seen[array_id] = json.loads(raw) if raw else None
        return self.seen[array_id]

    def script(self, ref: int) -> str | None:
        if ref not in self.scripts:
            raw = self.r.get(self.k.script(int(ref)))
            self.scripts[ref] = raw.decode() if isinstance(raw, bytes) else raw
        return self.scripts[ref]
