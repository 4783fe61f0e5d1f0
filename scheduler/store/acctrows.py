"""The archive's compact accounting rows: what `labq acct` and `labq report` read of an archived job.

Decoding each archived job's full record (script, argv, every field of every attempt) into a Job
cost ~250 µs a job: 26 s for `acct` over 100,000 archived jobs. A row holds only the columns acct
and report use, as SQL columns, plus the attempts' few report fields as a short JSON list decoded
only when report walks them. It is written in the same SQLite transaction as the record, so the two
never disagree; the record stays the source of truth for `labq show` and `acct --json`.

`AcctJob` and `AcctAttempt` answer the attribute names of model.Job and model.Attempt that acct,
slurmfmt's sacct fields and scheduler/money/report.py read, so those functions take either.
"""
from __future__ import annotations

from collections import namedtuple

# json.dumps(separators=(",", ":")) and json.loads by C alone: `json` imports `re` and `enum` (cjson.py)
from ..cjson import compact as _compact, loads

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: the thin `labq acct` reads rows without the model
    from ..jobs.model import Job

# (column, SQL type) in row order, `id` first; types SQLite and PostgreSQL read alike (PostgreSQL's
# REAL is 4 bytes: no epoch time fits in it).
_F, _I, _B, _T = "DOUBLE PRECISION", "INTEGER", "BIGINT", "TEXT"
COLUMNS = (
    ("id", "BIGINT PRIMARY KEY"), ("end_time", _F), ("user", _T), ("account", _T), ("state", _T), ("name", _T),
    ("project", _T), ("qos", _T), ("array_id", _B), ("array_index", _I), ("submit_time", _F), ("start_time", _F),
    ("exit_code", _I), ("cpus", _I), ("mem", _B), ("gpus", _I), ("nodes", _I), ("gpu_type", _T), ("time_limit", _B),
    ("est", _B), ("node", _T), ("restart_count", _I), ("workdir", _T), ("reason", _T), ("cost", _B),
    ("committed", _B), ("elapsed", _F), ("n_attempts", _I), ("tags", _T), ("attempts", _T))
NAMES = tuple(c for c, _ in COLUMNS)
# `user` is a reserved word in PostgreSQL: quoted, the same SQL serves SQLite and PostgreSQL.
SQL_NAMES = tuple('"user"' if c == "user" else c for c in NAMES)
DDL = ("CREATE TABLE IF NOT EXISTS acct (" + ", ".join(f"{c} {t}" for c, (_, t) in zip(SQL_NAMES, COLUMNS)) + ");\n"
       "CREATE INDEX IF NOT EXISTS acct_end ON acct (end_time);\n"
       'CREATE INDEX IF NOT EXISTS acct_user ON acct ("user", end_time);\n'
       "CREATE INDEX IF NOT EXISTS acct_account ON acct (account, end_time);\n")
# An attempt's report fields, in this order in the row's `attempts` JSON.
_ATTEMPT = ("attempt", "node", "gpus", "dispatch_time", "start_time", "end_time", "outcome", "exit_code",
            "cost", "lost_work_s", "usage", "charges", "parts")
# What the usage report and acct's MaxRSS read; the rest stays in the record.
_USAGE = ("gpu_idle_s", "gpu_util_mean", "max_rss_bytes")


def elapsed(j) -> float:
    """Run time of all ended attempts together (render.elapsed of an ended job, as acct shows it)."""
    return float(sum((a.end_time or j.end_time or 0) - (a.start_time or a.dispatch_time) for a in j.attempts
                     if a.start_time or a.dispatch_time))


def row(j: Job, committed: int) -> tuple:
    """The acct row of an ended job; `committed`: what admission encumbered for its attempts."""
    att = [[a.attempt, a.node, list(a.gpus), a.dispatch_time, a.start_time, a.end_time, a.outcome, a.exit_code,
            a.cost, a.lost_work_s, {k: a.usage[k] for k in _USAGE if k in (a.usage or {})}, a.charges,
            [[n, list(g)] for n, g in a.parts]] for a in j.attempts]
    return (j.id, j.end_time, j.user, j.account, j.state, j.name, j.project, j.qos, j.array_id, j.array_index,
            j.submit_time, j.start_time, j.exit_code, j.cpus, j.mem, j.gpus, j.nodes, j.gpu_type, j.time_limit,
            j.est, j.node, j.restart_count, j.workdir, j.reason, j.cost, committed, elapsed(j), len(j.attempts),
            _compact(j.tags), _compact(att))


class AcctAttempt(namedtuple("AcctAttempt", _ATTEMPT)):
    __slots__ = ()


# Built once per row of a million: a namedtuple is made in C (a class setting 29 attributes cost 2 s).
_Row = namedtuple("_Row", NAMES[:-2] + ("tags_json", "attempts_json"))


class AcctJob(_Row):
    """One archived job as acct and report see it (attributes named as model.Job's)."""
    __slots__ = ()

    @property
    def display_id(self) -> str:
        return f"{self.array_id}_{self.array_index}" if self.array_id is not None else str(self.id)

    @property
    def tags(self) -> tuple:
        return tuple(tuple(t) for t in loads(self.tags_json))

    @property
    def attempts(self) -> tuple:
        # Decoded at each use: acct's columns never need it; report and ledger verify walk it once a job.
        # (A row of schema 3, read before the scheduler migrated it, has no charges: none; a row written
        # before the gangs' parts were kept has none: ().)
        return tuple(AcctAttempt(a[0], a[1], tuple(a[2]), *a[3:11], tuple(tuple(c) for c in a[11:12] and a[11]),
                                 tuple((n, tuple(g)) for n, g in a[12:13] and a[12]))
                     for a in loads(self.attempts_json))


# What acct's table and CSV print (cli/acct.py _table), in the order it reads them: a query for
# them returns plain tuples of these columns (`select(only=TABLE_ORDER)`), no AcctJob per row.
TABLE_ORDER = ("id", "array_id", "array_index", "name", "user", "account", "state", "exit_code", "start_time",
               "end_time", "elapsed", "gpus", "n_attempts", "committed", "cost")
# The table's GPUS is the job's total: a gang's per-node count times its nodes.
_TABLE_SQL = {"gpus": "gpus * COALESCE(nodes, 1)"}
TABLE = frozenset(TABLE_ORDER)
_SQL = dict(zip(NAMES, SQL_NAMES))


def select(since: float, until: float, user: str | None = None, account: str | None = None,
           mark: str = "?", columns=None, after: tuple[float, int] | None = None,
           only: tuple[str, ...] | None = None) -> tuple[str, list]:
    """The query for rows that ended in [since, until], by user/account (indexed), in (end_time, id)
    order; `mark`: the driver's parameter mark (sqlite3 `?`, psycopg `%s`; the dialect maps `?`);
    `columns`: only these (the others NULL, which costs nothing to read), or all; `after`: only rows
    after this (end_time, id), for pages; `only`: just these columns, in this order (not NAMES's)."""
    where, args = [f"end_time >= {mark}", f"end_time <= {mark}"], [since, min(until, 1e300)]
    if user:
        where.append(f'"user" = {mark}')
        args.append(user)
    if account:
        where.append(f"account = {mark}")
        args.append(account)
    if after is not None:
        where.append(f"(end_time > {mark} OR (end_time = {mark} AND id > {mark}))")
        args += [after[0], after[0], after[1]]
    cols = ", ".join(_TABLE_SQL.get(n, _SQL[n]) for n in only) if only is not None else \
        ", ".join(c if columns is None or n in columns else "NULL" for c, n in zip(SQL_NAMES, NAMES))
    return f"SELECT {cols} FROM acct WHERE {' AND '.join(where)} ORDER BY end_time, id", args


# -- the acct rows of ended jobs still in Redis (Keys.acct_rows) -----------------------------------
# `labq acct --since 30d` with a week of ended jobs in Redis (history.keep's default) spent half its
# time decoding their records (json + Job) to print 15 columns. The scheduler therefore writes, in the
# transaction that ends a job (writes.put_jobs), a row of what acct's table reads of it: a short JSON
# array, one `json.loads` for thousands; the archiver removes it with the record. COMMITTED is not
# frozen in it: acct computes it at query time from the client's rates and the nodes' GPU models, as
# it did from the record (report.committed_by_job), so the row keeps the forecast's inputs instead
# (REDIS_FIELDS). A job ended by an older labq has no row until the scheduler back-fills it
# (SchedulerStore.acct_rows_missing / backfill_acct_rows); a reader takes its record meanwhile.
REDIS_FIELDS = TABLE_ORDER[:13] + ("cost", "cpus", "mem", "nodes", "qos", "time_limit", "est", "learned_est",
                                   "gpu_type", "attempt_gpus", "tasks", "task_ids")
# `tasks`, `task_ids`: added for one record that stands for many tasks (Job.array_runs, `del` of a held
# array's rest): their count, and the `[1-10000]` that acct shows for its index (rows before: absent).
# (gpus, cpus, mem, nodes, qos, time_limit, est, learned_est): the job fields ledger.forecast reads
FORECAST = tuple(REDIS_FIELDS.index(f) for f in ("gpus", "cpus", "mem", "nodes", "qos", "time_limit", "est",
                                                 "learned_est"))
GPU_TYPE, ATTEMPT_GPUS = REDIS_FIELDS.index("gpu_type"), REDIS_FIELDS.index("attempt_gpus")
USER, ACCOUNT, STATE = REDIS_FIELDS.index("user"), REDIS_FIELDS.index("account"), REDIS_FIELDS.index("state")


def redis_row(j: Job) -> str:
    """The Redis acct row of an ended job (REDIS_FIELDS): ELAPSED as cli/render.elapsed makes it of an
    ended record; `attempt_gpus`: each attempt's first GPU (null without GPUs), which prices it."""
    now, total = j.end_time or 0, 0.0
    for a in j.attempts:
        start = a.start_time or a.dispatch_time
        if start:
            total += (a.end_time or now) - start
    return _compact((j.id, j.array_id, j.array_index, j.name, j.user, j.account, j.state, j.exit_code,
                        j.start_time, j.end_time, total, j.gpus, len(j.attempts), j.cost, j.cpus, j.mem, j.nodes,
                        j.qos, j.time_limit, j.est, j.learned_est, j.gpu_type,
                        [a.gpus[0] if a.gpus else None for a in j.attempts], j.task_count,
                        j.display_id[len(str(j.array_id)) + 1:] if j.array_runs else None))


def redis_rows(texts) -> list[list]:
    """Decoded Redis acct rows (lists in REDIS_FIELDS order), one json.loads for all."""
    return loads("[" + ",".join(texts) + "]") if texts else []


def finish(rows, committed) -> list[tuple]:
    """Redis acct rows as TABLE_ORDER tuples, `committed[i]` the COMMITTED of rows[i]; GPUS the
    job's total (a gang's per-node count times its nodes)."""
    return [(v[0], v[1], v[24] if len(v) > 24 and v[24] else v[2], *v[3:11], v[11] * (v[16] or 1), v[12], c, v[13])
            for v, c in zip(rows, committed)]


# What ledger.forecast reads of a job (model.Job's names), from a Redis acct row. (collections', not
# typing's NamedTuple: the thin `labq acct` does not import typing.)
_Shape = namedtuple("_Shape", "gpus cpus mem nodes qos time_limit est learned_est")


def committed(rows, models: dict, cfg) -> list[int]:
    """report.committed_by_job's answer for each decoded Redis acct row, in order: the same forecast
    of the same fields (`models`: GPU uuid -> model, as the nodes report them; `cfg`: the config, or
    money/pricing.Prices of it), computed once per distinct (shape, GPU model)."""
    from ..money.pricing import forecast
    memo: dict = {}
    out = []
    for v in rows:
        shape, total = tuple(v[i] for i in FORECAST), 0
        for g in v[ATTEMPT_GPUS]:
            key = (shape, models.get(g, v[GPU_TYPE]) if g is not None else "")
            c = memo.get(key)
            if c is None:
                c = memo[key] = forecast(_Shape(*shape), "usd", key[1], cfg)    # report.committed_cost's
            total += c
        out.append(total)
    return out


def acct_table(ids: list[int], texts, load, history, since: float, until: float, user, account,
               committed=None) -> tuple[list, list]:
    """reads.Reader.acct_table for either client (here, not in reads.py: the thin `labq acct` then
    imports neither the model nor the codec): `ids` the ended jobs in Redis in the window; `texts` their
    Redis acct rows (redis_row; None for a job that has none: ended under an older labq), or
    None; `load(ids)` their records; `history` the archive (or None); `committed(rows) -> [micro]`
    prices decoded Redis rows (committed()), without which only records are read.

    Redis is read before the archive, and the archiver commits a job to the archive before it leaves
    Redis: a job found in neither Redis step (archived meanwhile) is in the archive's answer, and one
    found in Redis is dropped from that answer (in both after a crash between the archive's steps)."""
    fresh, no_row = [], ids
    if committed is not None and texts is not None:
        no_row = [i for i, t in zip(ids, texts) if t is None]
        fresh = redis_rows([t for t in texts if t is not None])
    loaded = load(no_row) if no_row else []
    have = {v[0] for v in fresh} | {j.id for j in loaded}
    if user or account:
        fresh = [v for v in fresh if (not user or v[USER] == user) and (not account or v[ACCOUNT] == account)]
    recent = [j for j in loaded if (not user or j.user == user) and (not account or j.account == account)]
    done = finish(fresh, committed(fresh)) if fresh else []
    if history is None:
        return done, recent
    rows = history.acct_table(since, until, user, account)
    if have:
        rows = [v for v in rows if v[0] not in have]
    # An older archive answers with records (model.Job), the others with plain tuples of TABLE_ORDER.
    return (done, rows + recent) if rows and not isinstance(rows[0], tuple) else (rows + done, recent)
