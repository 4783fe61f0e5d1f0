"""`labq acct`'s table and CSV, made column by column from plain rows (cli/acct.py), print byte for
byte what the formatter before it printed (`_old_table` below: cli/acct.py as of 1429870, one
AcctJob or Job per row): on a varied workload of archived jobs and jobs still in Redis (one in
both; most with their Redis acct row, some without: ended before an upgrade), every form of the
table and CSV, in zones with DST and half-hour offsets, in three currencies (one lab committing
forecasts); on a real redis-server with the archive in SQLite and in PostgreSQL (`archive_at`).
Then: Redis's rows are what is read, a job archived between the reads is listed once, and the
scheduler back-fills the rows an upgrade lacks."""
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from collections import namedtuple
from dataclasses import replace

import click
import pytest

from labq.cli import render, slurmfmt, statview
from labq.cli.acct import window
from labq.cli.hot import _id_filter, _states
from labq.scheduler.errors import StalePlanError
from labq.scheduler.jobs.model import Gpu, Job
from labq.scheduler.money.report import committed_by_job
from labq.scheduler.settings import config
from labq.scheduler.store import resp, writes
from labq.scheduler.store.acctrows import TABLE
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.archive import Archive, Archiver
from labq.scheduler.store.history import History
from labq.scheduler.store.reads import Reader
from labq.scheduler.store.state import SchedulerStore
from labq.scheduler.store.thinreads import ThinReader
from labq.scheduler.units import MICRO, fmt_duration, fmt_money
from tests.harness import ENDED_FROM, ENDED_TO, ROOT, K, ended_job

FIRST, LAST = ENDED_FROM, ENDED_TO


ROWLESS = range(381, 401)     # ended under an older labq: no Redis acct row (the reader takes the record)


def _shaped(rng, j: Job) -> Job:
    """`j` with what COMMITTED's forecast reads varied: --est, the learned estimate, gangs, QoS (a
    priced one, the default, an unknown one), the requested GPU type, and attempts on GPUs no node
    reports (priced at the job's GPU type)."""
    atts = tuple(replace(a, gpus=tuple(f"MIG-{g}" for g in a.gpus)) if a.gpus and rng.random() < 0.3 else a
                 for a in j.attempts)
    return replace(j, est=rng.choice((None, 60, 3600, 100_000)), learned_est=rng.choice((None, 1200)),
                   nodes=rng.choice((1, 1, 2)), qos=rng.choice(("normal", "low", "gold")),
                   gpu_type=rng.choice(("", "a100", "h100")), attempts=atts)


@pytest.fixture
def lab(redis_server, archive_at, tmp_path):
    """400 jobs: 300 archived, 100 in Redis, one of those in both (a crash between the archive's
    two steps); of Redis's, those in ROWLESS without their acct row (ended before an upgrade); a
    node whose GPU models price the Redis jobs' COMMITTED."""
    r = redis_server.client()
    r.flushall()
    rng, shapes = random.Random(18), random.Random(1818)
    jobs = [_shaped(shapes, ended_job(rng, i)) for i in range(1, 401)]
    Archive(archive_at).put_jobs(jobs[:300] + [jobs[350]])
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, jobs[300:])
    p.execute()
    assert r.hlen(K.acct_rows) == 100, "put_jobs writes an ended job's acct row"
    r.hdel(K.acct_rows, *ROWLESS)
    AgentStore(r, K).register("n0", 64, 512 << 30, 8, [Gpu(f"GPU-{i}", i, "a100") for i in range(8)], "h", 1, 3600)
    return redis_server, archive_at, tmp_path


def _config(tmp_path, archive, currency: str):
    path = tmp_path / f"labq-{currency}.toml"
    # EUR's lab commits forecasts (--est, else the learned estimate, x 1.2) rather than time limits.
    mode = '[scheduler]\nbudget_mode = "forecast"\n[estimate]\nforecast = true\n' if currency == "EUR" else ""
    path.write_text(f'[rates]\ncurrency = "{currency}"\ngpu_hour = 2.5\ncpu_hour = 0.013\n'
                    f'gpu_hour_by_model = {{ a100 = 3.75, h100 = 6.5 }}\n[history]\nurl = "{archive}"\n{mode}')
    return str(path)


QUERIES = [(), ("-o", "csv"), ("-n",), ("-o", "csv", "-n"), ("-u", "bob"), ("-A", "theta", "-s", "F,TO,CA"),
           ("-s", "CD", "-n"), ("-j", "301,302,351,3"), ("--until", "2026-12-01")]


@pytest.mark.parametrize("zone,currency", [("UTC", "USD"), ("America/New_York", "EUR"),
                                           ("Australia/Lord_Howe", "XYZ"), ("Asia/Kolkata", "USD")])
def test_the_table_and_csv_print_what_the_old_formatter_printed(lab, zone, currency, monkeypatch):
    rp, archive, tmp_path = lab
    cfg_path = _config(tmp_path, archive, currency)
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        cfg = config.load(cfg_path)          # its currency is the one the reference prints in
        for q in QUERIES:
            args = ("--since", "2026-12-01", "--until", "2027-05-01", *q) if "--until" not in q else \
                ("--since", "2026-11-01", *q)
            got = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", cfg_path, "acct", *args],
                                 cwd=ROOT, capture_output=True, timeout=120,
                                 env={**os.environ, "LABQ_REDIS_URL": rp.url, "PYTHONPATH": ROOT, "TZ": zone})
            assert got.returncode == 0, got.stderr
            want = _reference(rp.client(), archive, cfg, args)
            assert got.stdout.decode() == want, (zone, currency, q)      # bytes: CSV's \r\n as written
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert "400 jobs" in _reference(rp.client(), archive, cfg, ("--since", "2026-01-01")), "each job once"


def _reference(r, archive, cfg, args) -> str:
    """What the old `labq acct` printed for `args` (its options parsed by hand here)."""
    valued = [a for a in args if a != "-n"]
    opts = dict(zip(valued[::2], valued[1::2]))
    lo, hi = window(opts.get("--since"), opts.get("--until"), None, None, "-j" in opts, time.time())
    picked, wanted = _id_filter(opts.get("-j")), _states(opts.get("-s"))
    read = Reader(r, K, History(archive))
    jobs = [j for j in read.acct_rows(lo, hi, opts.get("-u"), opts.get("-A"), TABLE | {"nodes"})
            if (not wanted or j.state in wanted) and picked(j)]
    jobs.sort(key=lambda j: j.id)
    records = [j for j in jobs if isinstance(j, Job)]
    committed = {j.id: j.committed for j in jobs if not isinstance(j, Job)}
    models = {g.uuid: g.model for n in SchedulerStore(r, K, "reader").nodes(time.time()) for g in n.gpus}
    committed.update(committed_by_job(records, models, cfg))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _old_table(jobs, committed, opts.get("-o", "table"), "-n" in args, cfg.rates.currency)
    return out.getvalue()


# -- cli/acct.py's formatter as of 1429870, verbatim -----------------------------------------------
def _old_table(jobs, committed, fmt, noheader, currency) -> None:
    import csv
    # GPUS: the job's total since issue 37 (a gang's GPUs on all its nodes; the formatter before
    # printed the per-node count)
    headers = ["JOBID", "NAME", "USER", "ACCOUNT", "STATE", "EXIT", "START", "END", "ELAPSED", "GPUS", "ATTEMPTS",
               "COMMITTED", "COST"]
    # A month of a busy lab is ~100k rows: amounts, durations and times repeat, so each is formatted once.
    money = _memo((lambda m: f"{m / MICRO:.6f}") if fmt == "csv" else (lambda m: fmt_money(m, currency=currency)))
    dur, ts = _memo(fmt_duration), _Stamps()
    code = _memo(lambda v: slurmfmt.exit_code(_Ended(*v)))
    rows = [[j.display_id, j.name, j.user, j.account, j.state, code((j.exit_code, j.state)) if fmt != "csv" else
             (j.exit_code if j.exit_code is not None else ""), ts(j.start_time), ts(j.end_time),
             dur(int(render.elapsed(j, j.end_time or 0))), j.gpus * (j.nodes or 1), _attempts(j), money(committed[j.id]),
             money(j.cost)] for j in jobs]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out)
        if not noheader:
            w.writerow(headers)
        w.writerows(rows)
        return click.echo(out.getvalue(), nl=False)
    text = statview.table(rows, headers)
    if noheader:
        text = text.partition("\n")[2]
    if text:
        click.echo(text)
    if not noheader:
        click.echo(f"{len(jobs)} jobs, total cost {fmt_money(sum(j.cost for j in jobs), currency=currency)}")


def _memo(fn):
    seen: dict = {}

    def get(v):
        out = seen.get(v)
        if out is None:
            out = seen[v] = fn(v)
        return out
    return get


_Ended = namedtuple("_Ended", "exit_code state")      # what slurmfmt.exit_code reads of a job


class _Stamps:
    """Local `YYYY-MM-DD HH:MM:SS`, formatted once per minute (every zone's offset is whole minutes)."""

    def __init__(self):
        self.minutes: dict[int, str] = {}

    def __call__(self, t) -> str:
        if not t:
            return "-"
        s = int(t)
        head = self.minutes.get(s // 60)
        if head is None:
            head = self.minutes[s // 60] = time.strftime("%Y-%m-%d %H:%M:", time.localtime(s - s % 60))
        return f"{head}{s % 60:02d}"


def _attempts(j) -> int:
    return len(j.attempts) if isinstance(j, Job) else j.n_attempts


def test_rows_in_both_redis_and_the_archive_are_listed_once(lab):
    rp, archive, tmp_path = lab
    got = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", _config(tmp_path, archive, "USD"),
                          "acct", "-j", "351", "-n", "-o", "csv"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "LABQ_REDIS_URL": rp.url, "PYTHONPATH": ROOT})
    assert got.returncode == 0 and len(got.stdout.splitlines()) == 1, got


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Europe/London"])
def test_times_in_an_hour_whose_offset_changes_are_still_the_zones_local_time(zone, monkeypatch):
    """cli/acct._stamps looks the offset up once per UTC hour: around each DST change of 2027 (and
    in a zone with none) every second of the hours on either side reads as time.localtime says."""
    from labq.cli.acct import _stamps
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        changes = [t for t in range(int(FIRST), int(FIRST) + 366 * 86400, 900)
                   if time.localtime(t).tm_gmtoff != time.localtime(t + 900).tm_gmtoff]
        values = [float(t) + f for c in changes or [int(FIRST)] for t in range(c - 3600, c + 3600, 7)
                  for f in (0, 0.5)] + [None, 0]
        got = _stamps(values, {})
        assert got == {t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(t))) if t else "-" for t in values}
        assert len(changes) == (0 if zone == "Asia/Kolkata" else 2), changes
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


# -- Redis's acct rows: read instead of records; a job archived between the reads -----------------
class _Thin(ThinReader):
    """A thin reader that runs `before(name)` ahead of its first command `name` (HMGET, MGET)."""
    before = None

    def _pipe(self, cmds):
        if self.before is not None:
            self.before(cmds[0][0])
        return super()._pipe(cmds)


class _ArchivingHistory:
    """The archive as a reader sees it, archiving every job still in Redis just before it is read."""

    def __init__(self, history, archive_now):
        self.h, self.archive_now = history, archive_now

    def acct_table(self, *a):
        self.archive_now()
        return self.h.acct_table(*a)


def _table_of(reader, cfg, lo=0.0, hi=float("inf")):
    """cli/acct._table_rows's rows (what the table prints, sorted by id) from `reader`."""
    from types import SimpleNamespace

    from labq.cli.acct import _table_rows
    from labq.scheduler.settings.clientconf import books_of
    ctx = SimpleNamespace(thin=SimpleNamespace(read=reader), cfg=cfg, books=json.loads(json.dumps(books_of(cfg))))
    return _table_rows(ctx, lo, hi, None, None, None, None)


@pytest.fixture
def thin_lab(lab):
    rp, archive, tmp_path = lab
    cfg = config.load(_config(tmp_path, archive, "USD"))
    conn = resp.Connection(rp.url)
    made = []

    def reader(history=None):
        t = _Thin(conn, K, lambda e: AssertionError(e), history if history is not None else History(archive))
        made.append(t)
        return t
    yield rp, archive, cfg, reader
    conn.close()


def test_jobs_with_a_row_are_read_from_their_row_and_only_the_others_from_records(thin_lab):
    rp, archive, cfg, reader = thin_lab
    read = reader()
    asked = []
    read.before = asked.append
    rows, records = read.acct_table(0, float("inf"), committed=lambda fresh: [0] * len(fresh))
    assert sorted(j.id for j in records) == list(ROWLESS)
    assert "MGET" in asked, "the rowless jobs' records"
    assert sorted(v[0] for v in rows) == list(range(1, 381)), "the archive's and Redis's rows; 351 once"
    assert len({v[0] for v in rows}) == len(rows)
    # Without `committed` (a caller that cannot price rows) every Redis job is read from its record.
    rows, records = read.acct_table(0, float("inf"))
    assert sorted(j.id for j in records) == list(range(301, 401)) and 351 not in {v[0] for v in rows}


@pytest.mark.parametrize("when", ["HMGET", "MGET", "archive read"])
def test_jobs_archived_between_the_reads_are_listed_once(thin_lab, when):
    """The archiver (SQLite/PostgreSQL commit, then Redis deletes) moves every Redis job at one
    point of the read: after the ids (before their rows), after the rows (before the rowless jobs'
    records), after Redis (before the archive). Each job is then listed once, and a job read from
    Redis is listed as Redis said."""
    rp, archive, cfg, reader = thin_lab
    want = {v[0]: v for v in _table_of(reader(), cfg)}
    assert len(want) == 400
    r = rp.client()
    arch = Archiver(r, K, Archive(archive), keep=0, batch=1000)
    moved = []

    def archive_now(name=None):
        if (name is None or name == when) and not moved:
            moved.append(arch.step(LAST + 60))
    if when == "archive read":
        read = reader(_ArchivingHistory(History(archive), archive_now))
    else:
        read = reader()
        read.before = archive_now
    got = _table_of(read, cfg)
    assert moved and moved[0][0] == 100 and r.zcard(K.history) == 0 and r.hlen(K.acct_rows) == 0
    assert [v[0] for v in got] == sorted(want), "each job once"
    # Read from Redis (rows before HMGET-time archiving; the rowless records unless archived first):
    # as Redis said. The others come from the archive, which priced COMMITTED when it archived them.
    from_redis = {"HMGET": set(), "MGET": set(range(301, 381)) - {351}, "archive read": set(range(301, 401))}[when]
    assert all(v == want[v[0]] for v in got if v[0] in from_redis or v[0] <= 300)


def test_the_scheduler_back_fills_rows_of_jobs_that_ended_before_the_upgrade(thin_lab):
    """SchedulerStore.acct_rows_missing finds the ended jobs without a row (and drops rows whose job
    has left Redis); backfill_acct_rows makes theirs from the records, a batch at a time, fenced by
    the leader lease; the table is the same before and after."""
    rp, archive, cfg, reader = thin_lab
    r = rp.client()
    before = _table_of(reader(), cfg)
    r.hset(K.acct_rows, "999999", "[999999]")        # an older archiver's leftover: its job is gone
    r.set(K.leader, "me")
    store = SchedulerStore(r, K, "me")
    missing = store.acct_rows_missing()
    assert missing == sorted(ROWLESS, key=lambda i: (r.zscore(K.history, i), i))
    assert not r.hexists(K.acct_rows, "999999")
    rest = store.backfill_acct_rows(missing, batch=7)
    assert rest == missing[7:] and r.hlen(K.acct_rows) == 87
    while rest:
        rest = store.backfill_acct_rows(rest, batch=7)
    assert r.hlen(K.acct_rows) == 100 and store.acct_rows_missing() == []
    read = reader()
    rows, records = read.acct_table(0, float("inf"), committed=lambda fresh: [0] * len(fresh))
    assert records == []
    assert _table_of(reader(), cfg) == before
    r.set(K.leader, "someone else")
    with pytest.raises(StalePlanError):
        r.hdel(K.acct_rows, "301")
        store.backfill_acct_rows([301])
