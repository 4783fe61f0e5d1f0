"""The accounting archive: ended jobs and old ledger entries leave Redis for SQLite, and every answer
— the ended jobs, one job by id, the ledger, its idempotency keys, `verify` — is the same before and
after; a crash between the two steps neither loses nor duplicates a row; an edited archived
ledger row is detected. On fakeredis and on a real redis-server (the `conns` fixture), with the archive in
SQLite and in a private PostgreSQL cluster (the `archive_at` fixture; skipped with the reason where
PostgreSQL or psycopg is missing)."""

import json
import os

import pytest
import redis

from labq.scheduler.money.ledger import verify
from labq.scheduler.store.archive import Archive, Archiver
from labq.scheduler.store.history import History
from labq.scheduler.store.reads import Reader
from tests.harness import BODY, K, finish, push, setup, submit, woke

T0 = 1_800_000_000.0


def _workload(r, raw):
    """Eight jobs through the daemon: six complete, one fails, one is cancelled while pending."""
    s = setup(r, raw, T0)
    for i in range(8):
        submit(r, "alice", {**BODY, "time_limit": 600}, f"r{i}")
    s.tick(T0 + 1, woke(r))
    for jid in (1, 2, 3, 4):
        finish(r, jid, 1, "completed" if jid != 3 else "failed", 0 if jid != 3 else 1, T0 + 100 + jid)
    s.tick(T0 + 200)
    s.tick(T0 + 201)
    for jid in (5, 6):
        finish(r, jid, 1, "completed", 0, T0 + 300)
    s.tick(T0 + 400)
    return s


def _answers(reader: Reader):
    ended = sorted(reader.ended(), key=lambda j: j.id)
    return {"ended": ended, "jobs": [reader.job(j) for j in range(1, 10)],
            "ledger": reader.ledger_all(), "keys": reader.ledger_keys(), "spent": reader.spent(),
            "verify": verify(reader.ledger_all(), reader.spent(), reader.ledger_keys(), reader.ended() + reader.active())}


def test_answers_are_the_same_before_and_after_archiving(conns, archive_at):
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    reader = Reader(r, K, History(path))
    before = _answers(reader)
    assert len(before["ended"]) == 6 and before["verify"] == [] and any(e["type"] == "charge" for e in before["ledger"])
    moved = Archiver(r, K, Archive(path), keep=0, batch=4).step(T0 + 500)
    assert moved == (4, 4), "one batch at a time"
    Archiver(r, K, Archive(path), keep=0).step(T0 + 500)
    assert r.zcard(K.history) == 0 and r.xlen(K.ledger) == 0 and not r.exists(K.job(1)), "gone from Redis"
    assert _answers(Reader(r, K, History(path))) == before
    assert Reader(r, K).job(1) is None, "without the archive the old job is not in Redis"


def test_a_crash_between_the_two_steps_loses_and_doubles_nothing(conns, archive_at):
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    before = _answers(Reader(r, K, History(path)))
    # The scheduler died after the SQLite commit and before the Redis deletes: rows are in both.
    db = Archive(path)
    db.put_jobs(Reader(r, K).ended())
    db.put_ledger(r.xrange(K.ledger))
    assert _answers(Reader(r, K, History(path))) == before, "a row in both places counts once"
    Archiver(r, K, Archive(path), keep=0).step(T0 + 500)         # the next leader's pass
    assert _answers(Reader(r, K, History(path))) == before
    n = Archive(path).db.execute("SELECT COUNT(*), COUNT(DISTINCT stream_id) FROM ledger").fetchone()
    assert n[0] == n[1] == len(before["ledger"])
    assert Archive(path).broken_chain() == []


def test_only_what_is_older_than_keep_moves(conns, archive_at):
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    Archiver(r, K, Archive(path), keep=250).step(T0 + 400)       # ended at T0+101..104: older than 250 s
    assert sorted(int(i) for i in r.zrange(K.history, 0, -1)) == [5, 6]
    assert r.exists(K.job(5)) and not r.exists(K.job(1))


def test_an_edited_archived_ledger_row_is_detected(conns, archive_at):
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    Archiver(r, K, Archive(path), keep=0).step(T0 + 500)
    db = Archive(path).db
    db.execute("UPDATE ledger SET fields = replace(fields, '\"amount\": \"', '\"amount\": \"9') "
               "WHERE seq = (SELECT MIN(seq) FROM ledger WHERE fields LIKE '%charge%')")
    db.commit()
    assert any("hash does not match" in p for p in Archive(path).broken_chain())


def test_an_edited_row_with_its_chain_recomputed_is_caught_by_the_anchor(conns, archive_at):
    """Issue 36: edit an archived row and recompute the chain after it: the chain alone verifies;
    the head anchored in Redis at the archive pass does not match any more."""
    from labq.scheduler.store.archive import GENESIS, row_hash
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    Archiver(r, K, Archive(path), keep=0).step(T0 + 500)
    anchor = Reader(r, K).ledger_anchor()
    assert anchor and anchor["rows"] == Archive(path).head()["rows"] > 0
    assert Archive(path).broken_chain(anchor) == []
    db = Archive(path).db
    rows = db.execute("SELECT seq, stream_id, fields FROM ledger ORDER BY seq").fetchall()
    prev = GENESIS
    for seq, sid, f in rows:
        fields = json.loads(f)
        if fields.get("type") == "charge":
            fields["amount"] = "1"
            f = json.dumps(fields, sort_keys=True)
        prev = row_hash(prev, sid, json.loads(f))
        db.execute("UPDATE ledger SET fields = ?, hash = ? WHERE seq = ?", (f, prev, seq))
    db.commit()
    assert Archive(path).broken_chain() == [], "a recomputed chain passes on its own"
    got = Archive(path).broken_chain(anchor)
    assert len(got) == 1 and "anchored" in got[0], got


def test_history_that_cannot_be_read_is_an_error_not_an_empty_answer(tmp_path):
    """Run as `nobody`: an archive it may not read (a 0600 file, or a directory it cannot enter) must
    say so, or acct/report would silently answer without the archived rows."""
    import os
    import subprocess
    import sys
    import tempfile

    import pytest
    if os.geteuid() != 0:
        pytest.skip("needs root to run a check as another user")
    d = tempfile.mkdtemp(prefix="labq-hist-", dir="/tmp")
    os.chmod(d, 0o755)
    locked = os.path.join(d, "locked")
    os.mkdir(locked, 0o700)
    for p in (os.path.join(d, "history.db"), os.path.join(locked, "history.db")):
        Archive(p).close()
        os.chmod(p, 0o600)
    code = ("import sys; from labq.scheduler.store.history import History\n"
            "try:\n    print(History(sys.argv[1]).ended(0, float('inf')))\n"
            "except Exception as e:\n    print(type(e).__name__, e)")
    try:
        for p in (os.path.join(d, "history.db"), os.path.join(locked, "history.db")):
            out = subprocess.run([sys.executable, "-c", code, p], user=65534, group=65534, extra_groups=[],
                                 capture_output=True, text=True, cwd="/", timeout=60)
            assert out.stdout.startswith("UsageError") and "cannot read" in out.stdout, out.stdout + out.stderr
        out = subprocess.run([sys.executable, "-c", code, os.path.join(d, "none.db")], user=65534, group=65534,
                             extra_groups=[], capture_output=True, text=True, cwd="/", timeout=60)
        assert out.stdout.strip() == "[]", "no archive yet: nothing archived"
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


# -- acct and report read compact rows (store/acctrows.py), not the records --------------------------
ACCT_QUERIES = [("acct", "-S", "2027-01-01"), ("acct", "-S", "2027-01-01", "-o", "csv"),
                ("acct", "-S", "2027-01-01", "-P", "--format=JobID,JobName,User,State,ExitCode,Elapsed,AllocCPUS,"
                 "ReqMem,Timelimit,Restarts,NodeList,Cost,Committed"),
                ("acct", "-S", "2027-01-01", "-u", "alice", "-A", "eta", "-s", "CD"),
                ("report", "--by", "account,user,status,gpu_type,node,tag:x", "--format", "json"),
                ("report", "--forecast-accuracy", "--json"), ("ledger", "verify")]


def _cli(rp, cfg_path, *args):
    import os
    import subprocess
    import sys

    from tests.harness import ROOT
    env = {**os.environ, "LABQ_REDIS_URL": rp.url, "PYTHONPATH": ROOT}
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", str(cfg_path), *args], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def test_acct_and_report_read_the_archived_rows_and_answer_the_same(redis_server, tmp_path, archive_at):
    """Every acct/report form gives the same text before and after archiving; after it, the records
    are made unreadable in SQLite and the answers still do not change: rows, not records, are read."""
    import redis

    from labq.scheduler.store.archive import committed_fn
    from tests.harness import CFG, SWEEP_TOML
    r = redis_server.client()
    r.flushall()
    _workload(r, redis.Redis(unix_socket_path=redis_server.sock))
    path = archive_at
    cfg_path = tmp_path / "labq.toml"
    cfg_path.write_text(SWEEP_TOML + f'\n[history]\nurl = "{path}"\n')
    before = [_cli(redis_server, cfg_path, *q) for q in ACCT_QUERIES]
    assert "6 jobs" in before[0] and before[4].count('"jobs"') >= 2, before
    Archiver(r, K, Archive(str(path), committed=committed_fn(r, K, CFG)), keep=0).step(T0 + 500)
    assert r.zcard(K.history) == 0, "everything archived"
    db = Archive(str(path)).db
    db.execute("UPDATE jobs SET record = 'not a record'")
    db.commit()
    after = [_cli(redis_server, cfg_path, *q) for q in ACCT_QUERIES]
    for q, b, a in zip(ACCT_QUERIES, before, after):
        assert a == b, q


def _older(path, version):
    """Turn an archive into what an older labq wrote: schema 1 (no acct rows), 2 (no acct.nodes), 3 (no
    charges in the rows' attempts)."""
    db = Archive(path).db
    if version == 3:
        db.execute("UPDATE acct SET attempts = '[]'")
    else:
        db.script("DROP TABLE acct" if version == 1 else "ALTER TABLE acct DROP COLUMN nodes")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))
    db.commit()
    db.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_archive_gets_its_rows_when_the_scheduler_opens_it(conns, archive_at, version):
    r, raw = conns
    _workload(r, raw)
    path = archive_at
    Archiver(r, K, Archive(path), keep=0).step(T0 + 500)
    want = [(j.id, j.user, j.state, j.cost, j.committed, j.elapsed, j.nodes, [(a.cost, a.charges) for a in j.attempts])
            for j in Archive(path, readonly=True).acct(0, float("inf"))]
    assert len(want) == 6 and all(w[3] > 0 and w[7][0][1] for w in want if w[2] == "CD"), "costs and charges"
    _older(path, version)
    if version == 1:
        old = Archive(path, readonly=True)         # a reader before the scheduler migrated it: the records
        assert sorted(j.id for j in old.acct(0, float("inf"), user="alice")) == [w[0] for w in want]
        assert Archive(path, readonly=True).acct(0, float("inf"), user="bob") == []
    Archive(path).close()                          # the scheduler's open migrates it
    db = Archive(path, readonly=True).db
    assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("4",)
    got = [(j.id, j.user, j.state, j.cost, j.committed, j.elapsed, j.nodes, [(a.cost, a.charges) for a in j.attempts])
           for j in Archive(path, readonly=True).acct(0, float("inf"))]
    assert got == want


# -- labq admin archive --now (a request to the leader) and labq admin export --------------------------
def _ask(r, s, user, op, rid):
    import json

    from tests.harness import reply
    push(r, user, {"rid": rid, "op": op, "body": json.dumps({})})
    r.lpush(K.wake, f"user:{user}")
    s.tick(T0 + 500, woke(r))
    return reply(r, rid)


def test_archive_now_runs_passes_in_the_leader_for_admins_only(conns, archive_at):
    from labq.scheduler.daemon.loop import Scheduler
    from labq.scheduler.settings import config
    from tests.harness import SWEEP_TOML
    r, raw = conns
    _workload(r, raw)
    n_ledger = r.xlen(K.ledger)
    s = Scheduler(r, config.loads(SWEEP_TOML + '\n[security]\nadmins = ["alice"]\n'), me="s1",
                  clock=lambda: T0 + 500)
    got = _ask(r, s, "alice", "archive", "a0")
    assert got["ok"] is False and "keeps no archive" in got["error"], got
    path = archive_at
    s.archiver, s.history = Archiver(r, K, path, keep=0, batch=4), History(path)
    s.archiver.next = T0 + 10_000          # the ticks would not archive before then: only the request does
    got = _ask(r, s, "bob", "archive", "a1")
    assert got["ok"] is False and got["code"] == 3 and "only admins" in got["error"], got
    assert r.zcard(K.history) == 6
    got = _ask(r, s, "alice", "archive", "a2")
    assert got == {"ok": True, "jobs": 6, "ledger": n_ledger, "more": False, "keep": 0}, got
    assert r.zcard(K.history) == 0 and r.xlen(K.ledger) == 0
    assert sorted(Archive(path, readonly=True).jobs(range(1, 9))) == [1, 2, 3, 4, 5, 6]


def test_export_streams_every_ended_job_once_archived_or_not(redis_server, tmp_path, archive_at):
    import csv
    import io
    import json
    import os
    import subprocess
    import sys

    import redis

    from tests.harness import ROOT, SWEEP_TOML
    r = redis_server.client()
    r.flushall()
    _workload(r, redis.Redis(unix_socket_path=redis_server.sock))
    path = archive_at
    from labq.scheduler.store.archive import committed_fn
    from tests.harness import CFG
    Archiver(r, K, Archive(str(path), committed=committed_fn(r, K, CFG)), keep=0, batch=4).step(T0 + 500)
    assert r.zcard(K.history) == 2, "four archived, two in Redis"
    cfg_path = tmp_path / "labq.toml"
    cfg_path.write_text(SWEEP_TOML + f'\n[history]\nurl = "{path}"\n')
    rows = list(csv.DictReader(io.StringIO(_cli(redis_server, cfg_path, "admin", "export", "--since", "2027-01-01"))))
    assert sorted(int(x["id"]) for x in rows) == [1, 2, 3, 4, 5, 6]
    assert {x["state"] for x in rows} == {"CD", "F"} and all(float(x["cost"]) > 0 for x in rows)
    assert len({x["committed"] for x in rows}) == 1, "archived rows and Redis's agree on committed"
    js = json.loads(_cli(redis_server, cfg_path, "admin", "export", "--since", "2027-01-01", "--format", "json"))
    assert [d["id"] for d in js] == [int(x["id"]) for x in rows] and js[0]["tags"] == {}
    assert _cli(redis_server, cfg_path, "admin", "export", "--since", "2027-01-01", "--until", "2027-01-02",
                "--format", "json") == "[\n]\n"
    for bad, why in ((["--since", "30d", "--format", "xml"], "--format: expected csv or json"),
                     ([], "--since: expected a date"), (["--since", "yesterday"], "--since")):
        p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", str(cfg_path), "admin", "export", *bad],
                           cwd=ROOT, env={**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT},
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and why in p.stderr and p.stderr.count("\n") == 1 and not p.stdout, (bad, p.stderr)


def test_export_of_the_ledger_streams_every_entry_once_archived_or_not(redis_server, tmp_path, archive_at):
    """`labq admin export --what ledger`: every entry of the window, the archive's then Redis's, one
    in both (a crash between the archive's two steps) once, in stream order; amounts in their unit."""
    import csv
    import io
    import json
    import os
    import subprocess
    import sys

    import redis

    from labq.scheduler.units import MICRO
    from tests.harness import ROOT, SWEEP_TOML
    r = redis_server.client()
    r.flushall()
    _workload(r, redis.Redis(unix_socket_path=redis_server.sock))
    entries = r.xrange(K.ledger)
    assert len(entries) >= 6 and all(f["type"] == "charge" for _, f in entries)
    Archiver(r, K, Archive(archive_at), keep=0, batch=4).step(T0 + 500)
    Archive(archive_at).put_ledger(r.xrange(K.ledger, count=1))      # archived, not yet gone from Redis
    assert 0 < r.xlen(K.ledger) < len(entries)
    cfg_path = tmp_path / "labq.toml"
    cfg_path.write_text(SWEEP_TOML + f'\n[history]\nurl = "{archive_at}"\n')
    export = lambda *a: _cli(redis_server, cfg_path, "admin", "export", "--what", "ledger", *a)  # noqa: E731
    rows = list(csv.DictReader(io.StringIO(export("--since", "2000-01-01"))))
    assert [x["id"] for x in rows] == [i for i, _ in entries], "each entry once, in stream order"
    assert [float(x["amount"]) for x in rows] == [int(f["amount"]) / MICRO for _, f in entries]
    assert {x["type"] for x in rows} == {"charge"} and [x["job"] for x in rows] == [f["job"] for _, f in entries]
    assert all(x["other"] == "" for x in rows) and all(float(x["time"]) > 0 for x in rows)
    js = json.loads(export("--since", "2000-01-01", "--format", "json"))
    assert [(d["id"], d["job"], d["amount"], d["budget"]) for d in js] == \
        [(i, int(f["job"]), int(f["amount"]) / MICRO, f["budget"]) for i, f in entries]
    assert export("--since", "2000-01-01", "--until", "2001-01-01", "--format", "json") == "[\n]\n"
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", str(cfg_path), "admin", "export",
                        "--since", "30d", "--what", "budgets"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT})
    assert p.returncode == 2 and "--what: expected jobs or ledger" in p.stderr and p.stderr.count("\n") == 1


def test_history_url_takes_sqlite_or_postgresql_and_names_what_else_is_wrong():
    import pytest

    from labq.scheduler.errors import LabqError
    from labq.scheduler.settings import config
    from labq.scheduler.store.history import default_path
    for url in ("sqlite:////var/lib/x/history.db", "postgresql://labq@db/labq", "postgres://labq@db/labq"):
        assert config.loads(f'[history]\nurl = "{url}"\n').history["url"] == url
    assert default_path("postgresql://labq@db/labq") == "postgresql://labq@db/labq"
    with pytest.raises(LabqError, match=r"history.url.*expected sqlite:///ABSOLUTE/PATH, postgresql://"):
        config.loads('[history]\nurl = "mysql://db/labq"\n')


def test_archived_jobs_leave_the_nodes_spool(conns, archive_at, tmp_path):
    """The archive pass lists each archived job for the nodes it ran on; the agent removes its stored
    script and checkpoint directory (a link there goes, what it names stays) and takes it off the list."""
    import os

    from labq.scheduler.store.agentside import AgentStore
    from labq.worker.agent import purge_spool
    r, raw = conns
    _workload(r, raw)
    spool = tmp_path / "spool"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.pt").write_text("x")
    for jid in (1, 2, 7):
        (spool / "scripts").mkdir(parents=True, exist_ok=True)
        (spool / "scripts" / f"{jid}.sh").write_text("#!/bin/bash\n")
        (spool / "checkpoints").mkdir(exist_ok=True)
    (spool / "checkpoints" / "1").mkdir()
    (spool / "checkpoints" / "1" / "step-10.pt").write_text("w")
    os.symlink(outside, spool / "checkpoints" / "2")
    Archiver(r, K, Archive(archive_at), keep=0).step(T0 + 500)
    assert sorted(int(i) for i in r.smembers(K.node_purge("n1"))) == [1, 2, 3, 4, 5, 6]
    assert purge_spool(AgentStore(r, K), "n1", str(spool)) == 6
    assert sorted(os.listdir(spool / "scripts")) == ["7.sh"], "job 7 is not archived: its script stays"
    assert os.listdir(spool / "checkpoints") == [] and (outside / "keep.pt").exists()
    assert r.scard(K.node_purge("n1")) == 0


def test_a_pass_is_sized_to_its_time_budget(conns, archive_at):
    """pass_s: a full pass that took longer than the budget shrinks the next (to 50 at least), a
    quicker one grows it (to `batch` at most); without a budget the batch stays."""
    r, raw = conns
    _workload(r, raw)
    slow = Archiver(r, K, Archive(archive_at), keep=0, batch=1000, pass_s=1e-9)
    slow.size = 3                                   # as if earlier passes had shrunk it
    assert slow.step(T0 + 500)[0] == 3 and slow.size == 50, "over budget: down to the floor"
    quick = Archiver(r, K, Archive(archive_at), keep=0, batch=1000, pass_s=1000.0)
    quick.size = 2
    assert quick.step(T0 + 500)[0] == 2 and quick.size == 1000, "well within budget: up to the batch"
    fixed = Archiver(r, K, Archive(archive_at), keep=0, batch=1)
    assert fixed.step(T0 + 500)[0] == 1 and fixed.size == 1


def test_a_client_that_cannot_open_the_archive_asks_the_scheduler_page_by_page(conns, archive_at, monkeypatch):
    """Every answer through the scheduler's pages (store/histpages.py, pages of 2 rows here) equals
    the answer read from the archive directly; History switches to it when the file is unreadable."""
    import json
    import os

    from labq.scheduler.daemon.loop import Scheduler
    from labq.scheduler.settings import config
    from labq.scheduler.store import histpages
    from tests.harness import SWEEP_TOML, reply
    monkeypatch.setattr(histpages, "PAGE", {k: 2 for k in histpages.PAGE})
    r, raw = conns
    _workload(r, raw)
    s = Scheduler(r, config.loads(SWEEP_TOML), me="s1", clock=lambda: T0 + 500)
    s.archiver = Archiver(r, K, archive_at, keep=0, batch=3)
    s.archiver.step(T0 + 500)                      # 3 jobs archived, 3 still in Redis
    asked = []

    def ask(op, body):
        rid = os.urandom(8).hex()
        push(r, "bob", {"rid": rid, "op": op, "body": json.dumps(body)})
        r.lpush(K.wake, "user:bob")
        s.tick(T0 + 500, woke(r))
        got = reply(r, rid)
        assert got["ok"], got
        asked.append(body["what"])
        return got
    direct, remote = History(archive_at), History(archive_at, ask=ask)
    if not archive_at.startswith("postgresql://"):
        remote._readable = lambda: False           # as an ordinary user finds the scheduler's 0600 file
    else:
        remote._db = histpages.Remote(ask)         # PostgreSQL users read directly; the pages serve it too
    a, b = Reader(r, K, direct), Reader(r, K, remote)
    assert _answers(b) == _answers(a)
    rows = lambda rd, **kw: sorted(tuple(getattr(j, n) for n in ("id", "user", "state", "cost", "end_time"))  # noqa: E731
                                    for j in rd.acct_rows(0, float("inf"), **kw))
    assert rows(b) == rows(a) and len(rows(a)) == 6 and rows(b, user="bob") == []
    table = lambda rd, **kw: (sorted(rd.acct_table(0, float("inf"), **kw)[0]),  # noqa: E731 - acct's table
                              [j.id for j in rd.acct_table(0, float("inf"), **kw)[1]])
    assert table(b) == table(a) and len(table(a)[0]) == 3 and table(b, user="bob") == ([], [])
    stream = lambda rd, lo=0: list(rd.ledger_stream(lo, float("inf")))  # noqa: E731 - admin export --what ledger
    assert stream(b) == stream(a) and len(stream(a)) == 6 and stream(b, 4e9) == []
    assert list(b.acct_stream(0, float("inf"), lambda jobs: {})) == list(a.acct_stream(0, float("inf"), lambda jobs: {}))
    assert remote.broken_chain() == direct.broken_chain() == []
    assert {"acct", "ended", "jobs", "ledger", "keys", "verify"} <= set(asked) and asked.count("acct") >= 2
    bad = histpages.Remote(ask)
    with pytest.raises(AssertionError, match="what: expected one of"):
        list(bad._pages("everything"))


def test_pages_follow_a_cursor_so_rows_archived_meanwhile_repeat_nothing(conns, archive_at, monkeypatch):
    """Rows archived between two pages, ending before the cursor, neither shift the next page back
    (an OFFSET would repeat job 5) nor appear twice."""
    from labq.scheduler.store import histpages
    monkeypatch.setattr(histpages, "PAGE", {k: 1 for k in histpages.PAGE})
    r, raw = conns
    _workload(r, raw)
    jobs = {j.id: j for j in Reader(r, K).ended()}
    db = Archive(archive_at)
    db.put_jobs([jobs[5], jobs[6]])
    first = histpages.answer(db, {"what": "acct"})
    assert [v[0] for v in first["rows"]] == [5] and first["more"]
    db.put_jobs([jobs[1], jobs[2]])                     # ended before job 5: behind the cursor
    seen, after = [5], first["next"]
    while True:
        got = histpages.answer(db, {"what": "acct", "after": after})
        seen += [v[0] for v in got["rows"]]
        if not got["more"]:
            break
        after = got["next"]
    assert seen == [5, 6]
    from labq.scheduler.errors import UsageError
    with pytest.raises(UsageError, match="not a cursor of acct"):
        histpages.answer(db, {"what": "acct", "after": ["soon", 1]})


def test_ended_jobs_keep_an_acct_row_in_redis_until_they_are_archived(conns, archive_at):
    """The transaction that ends a job (through the daemon: completed, failed) writes its Redis acct
    row (store/acctrows.redis_row); the archive pass removes it with the record."""
    from labq.scheduler.store import acctrows
    r, raw = conns
    _workload(r, raw)
    ended = {j.id: j for j in Reader(r, K).ended()}
    assert len(ended) == 6 and r.hgetall(K.acct_rows) == {str(i): acctrows.redis_row(j) for i, j in ended.items()}
    assert Archiver(r, K, Archive(archive_at), keep=0, batch=4).step(T0 + 500)[0] == 4
    assert sorted(r.hkeys(K.acct_rows), key=int) == r.zrange(K.history, 0, -1) and r.hlen(K.acct_rows) == 2
    Archiver(r, K, Archive(archive_at), keep=0).step(T0 + 500)
    assert r.hlen(K.acct_rows) == 0


def test_a_pass_over_jobs_that_ran_on_several_nodes_takes_each_out_of_the_history(conns, archive_at):
    """Each job of a pass leaves the history index and its acct row goes, whatever node it ran on
    (the spool lists per node once reused the pass's `ids`: only the last node's jobs left the
    index, and the pass counted those)."""
    import random

    from labq.scheduler.store import writes
    from tests.harness import ENDED_TO, ended_job
    r, _ = conns
    rng = random.Random(5)
    jobs = [ended_job(rng, i) for i in range(1, 61)]
    assert len({a.node for j in jobs for a in j.attempts}) == 3
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, jobs)
    p.execute()
    assert Archiver(r, K, Archive(archive_at), keep=0).step(ENDED_TO + 60) == (60, 0)
    assert r.zcard(K.history) == 0 and r.hlen(K.acct_rows) == 0


def test_an_archived_gang_leaves_no_part_behind_on_any_node(conns, archive_at):
    """A multi-node attempt keeps a status hash per part (rank >= 1 beside the attempt's own) and a
    script on each part's node: archiving the job removes every one and lists it for every node."""
    import dataclasses
    import random

    from labq.scheduler.store import writes
    from tests.harness import ENDED_TO, ended_job
    r, _ = conns
    rng = random.Random(1)
    job = next(j for j in (ended_job(rng, 1) for _ in range(50)) if j.attempts)
    parts = (("n0", ("GPU-0",)), ("n1", ("GPU-1",)), ("n2", ("GPU-2",)))
    job = dataclasses.replace(job, attempts=tuple(dataclasses.replace(a, node="n0", parts=parts)
                                                  for a in job.attempts))
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, [job])
    for a in job.attempts:
        for rank in range(len(parts)):
            p.hset(K.part(job.id, a.attempt, rank), "claimed", "1")
    p.execute()
    assert r.exists(K.part(1, job.attempts[0].attempt, 2))
    assert Archiver(r, K, Archive(archive_at), keep=0).step(ENDED_TO + 60) == (1, 0)
    assert [k for k in r.scan_iter(f"{K.job(1)}*")] == []
    assert [sorted(int(i) for i in r.smembers(K.node_purge(n))) for n in ("n0", "n1", "n2")] == [[1]] * 3


def test_a_new_leader_back_fills_the_acct_rows_an_older_labq_did_not_write(conns):
    """Jobs that ended under an older labq have no Redis acct row: the leader finds them at its start
    (and drops rows whose job is gone) and writes theirs from the records in its loop, a batch at a
    time, as that labq's end would have."""
    from labq.scheduler.daemon.loop import Scheduler
    from labq.scheduler.store import acctrows
    from tests.harness import CFG, FROZEN
    r, raw = conns
    s = _workload(r, raw)
    want = r.hgetall(K.acct_rows)
    r.hdel(K.acct_rows, "1", "2", "5")
    r.hset(K.acct_rows, "77", "[77]")
    s.store.release_leader()
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    s2.tick(T0 + 500)
    assert sorted(s2.acct_backlog) == [1, 2, 5] and not r.hexists(K.acct_rows, "77")
    r.lpush(K.wake, "events")          # the loop's wait returns at once
    s2._loop(iter([False, True]).__next__)
    assert r.hgetall(K.acct_rows) == want and s2.acct_backlog == []
    assert want == {str(j.id): acctrows.redis_row(j) for j in Reader(r, K).ended()}


def test_a_cancelled_pending_array_gets_one_acct_row_a_task_as_each_alone_would(conns):
    """writes.put_jobs splices the records of a run of alike array tasks from one template; an ended
    run (a pending array cancelled) gets its acct rows the same way: each equal to redis_row's."""
    from dataclasses import replace

    from labq.scheduler.jobs import states
    from labq.scheduler.jobs.model import Job
    from labq.scheduler.store import acctrows, writes
    r, _ = conns
    base = Job(id=100, user="alice", account="eta", argv=("python", "x.py"), workdir="/tmp", name="sweep", gpus=1,
               cpus=4, mem=8 << 30, time_limit=3600, state=states.CANCELLED, array_id=100, array_count=1200,
               submit_time=T0, end_time=T0 + 5, est=600, qos="low")
    tasks = [replace(base, id=100 + i, array_index=i) for i in range(1200)]     # ids and indices cross 3 -> 4 digits
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, tasks)
    p.execute()
    assert r.hgetall(K.acct_rows) == {str(j.id): acctrows.redis_row(j) for j in tasks}
    assert r.zcard(K.history) == 1200 and r.hlen(K.stat_rows) == 0


def test_a_lease_lost_during_the_back_fill_reloads_instead_of_stopping_the_loop(conns):
    from labq.scheduler.daemon.loop import Scheduler
    from tests.harness import CFG, FROZEN
    r, raw = conns
    s = _workload(r, raw)
    r.hdel(K.acct_rows, "1", "2")
    s.store.release_leader()
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    s2.tick(T0 + 500)
    assert sorted(s2.acct_backlog) == [1, 2] and s2.leading
    r.set(K.leader, "s3")                # another scheduler took the lease after this tick
    s2._backfill_acct()
    assert not s2.leading and not r.hexists(K.acct_rows, "1"), "nothing written without the lease"
    r.delete(K.leader)
    s2.tick(T0 + 501)                    # leads again: finds the same two
    assert sorted(s2.acct_backlog) == [1, 2]
    s2._backfill_acct()
    assert s2.acct_backlog == [] and r.hexists(K.acct_rows, "1") and r.hexists(K.acct_rows, "2")


def test_an_array_cancelled_through_the_daemon_gets_an_acct_row_a_task(conns, monkeypatch):
    """A held 1,500-task array (written ahead: put_new_jobs), then `labq cancel` of the array: each
    task ends in that change's transaction with its acct row, the tasks alike but for id and index
    (spliced), each equal to what acctrows.redis_row makes of its record."""
    import json

    from labq.scheduler.jobs import rest
    from labq.scheduler.store import acctrows
    from tests.harness import submit
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # as records (test_array_record: as one rest)
    r, raw = conns
    s = setup(r, raw, T0)
    submit(r, "alice", {**BODY, "array": [0, 1499, 1], "hold": True}, "arr")
    s.tick(T0 + 1, woke(r))
    assert r.zcard(K.active) == 1500 and r.hlen(K.acct_rows) == 0
    push(r, "alice", {"rid": "c", "op": "cancel", "body": json.dumps({"ids": ["1"]})})
    r.lpush(K.wake, "user:alice")
    s.tick(T0 + 2, woke(r))
    ended = Reader(r, K).ended()
    assert len(ended) == 1500 and {j.state for j in ended} == {"CA"}
    assert r.hgetall(K.acct_rows) == {str(j.id): acctrows.redis_row(j) for j in ended}


def test_clients_find_the_archive_through_redis_and_never_read_another_clusters(tmp_path, fake_redis):
    """Issue 36: clients guessed the archive's path (their own state directory) and saw nothing; and
    an archive is one cluster's (its id, set in Redis at the first start, is written into it)."""
    from labq.scheduler.errors import RefusedError, UsageError
    from labq.scheduler.store.keys import Keys
    k, path = Keys(), str(tmp_path / "history.db")

    def never(op, body):
        raise AssertionError("nothing archived: the scheduler is not asked")
    assert History(None, ask=never, get=fake_redis.get, keys=k).jobs([1]) == {}
    db = Archive(path)
    db.claim_cluster("aaaa")
    db.claim_cluster("aaaa")                        # its own cluster: no change
    with pytest.raises(RefusedError, match="archive of cluster aaaa.*cluster bbbb"):
        db.claim_cluster("bbbb")
    db.close()
    fake_redis.set(k.archive, path)
    fake_redis.set(k.cluster, "bbbb")
    with pytest.raises(UsageError, match="archive of cluster aaaa"):
        History(None, ask=never, get=fake_redis.get, keys=k).jobs([1])
    fake_redis.set(k.cluster, "aaaa")
    assert History(None, ask=never, get=fake_redis.get, keys=k).jobs([1]) == {}     # opened where Redis says


def test_migrate_moves_the_archive_row_for_row_chain_and_cluster_included(conns, archive_at, tmp_path):
    """`labq admin history migrate --to URL` (issue 36): SQLite -> PostgreSQL (or another file); every
    answer read from the new archive is the old one's, the chain verifies against Redis's anchor,
    the cluster id moves with it; a target that holds rows is refused."""
    from labq.scheduler.errors import RefusedError
    from labq.scheduler.store.migrate import migrate
    r, raw = conns
    _workload(r, raw)
    source = str(tmp_path / "old-history.db")
    Archiver(r, K, source, keep=0, cluster="c1").step(T0 + 500)
    before = _answers(Reader(r, K, History(source)))
    got = migrate(source, archive_at)
    assert got["jobs"] == len(Archive(source).jobs(range(1, 100))) and got["ledger"] == Archive(source).head()["rows"]
    assert _answers(Reader(r, K, History(archive_at))) == before
    moved = Archive(archive_at)
    assert moved.broken_chain(Reader(r, K).ledger_anchor()) == [] and moved.cluster() == "c1"
    with pytest.raises(RefusedError, match="already holds archived rows"):
        migrate(source, archive_at)


def test_the_migrate_command_refuses_while_a_scheduler_leads_then_moves_the_archive(redis_server, tmp_path):
    import subprocess
    import sys

    from tests.harness import ROOT
    r = redis_server.client()
    r.flushall()
    _workload(r, redis.Redis(unix_socket_path=redis_server.sock))
    source = str(tmp_path / "history.db")
    Archiver(r, K, source, keep=0, cluster="c1").step(T0 + 500)
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[redis]\nurl = "{redis_server.url}"\n')
    target = tmp_path / "new.db"

    def migrate():
        return subprocess.run([sys.executable, "-m", "labq", "--config", str(cfg), "admin", "history", "migrate",
                               "--to", f"sqlite://{target}"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": ROOT})
    r.set(K.leader, "sched-1")
    p = migrate()
    assert p.returncode == 2 and "stop it first" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    r.delete(K.leader)
    p = migrate()
    assert p.returncode == 0 and "copied" in p.stdout, p.stderr
    assert Archive(str(target)).cluster() == "c1" and not Archive(str(target)).broken_chain(Reader(r, K).ledger_anchor())
