"""The archive on real processes: with history.keep = 0 the scheduler moves ended jobs and their
ledger entries out of Redis within one archive pass, and `labq show`, `labq acct` and `labq ledger
verify` (each its own process, finding the archive in the stack's state directory) answer as
before."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, current_user, start_redis, wait_for

pytestmark = E2E_MARKS


def test_ended_jobs_leave_redis_and_every_command_still_sees_them():
    e = E2E(E2E_CONFIG + '[history]\nkeep = "0s"\n')
    try:
        # Long enough to cost something (billing runs from the process's start to its end: `true` can round to $0).
        ids = [e.sub("-G", "1", "-t", "5m", "--", "sleep", "0.2") for _ in range(3)]
        for jid in ids:
            e.wait_state(jid, {"CD"})
        r = e.client.store.r
        wait_for(lambda: r.zcard(e.client.k.history) == 0 and r.xlen(e.client.k.ledger) == 0, 60,
                 what="the archive pass")
        assert not any(r.exists(e.client.k.job(j)) for j in ids), "the records left Redis"
        show = e.labq("show", str(ids[0]), "--json")
        assert show.returncode == 0, show.stderr
        d = json.loads(show.stdout)
        assert d["state"] == "CD" and d["attempts"][0]["cost"] > 0
        acct = e.labq("acct", "--json")
        assert acct.returncode == 0, acct.stderr
        assert sorted(int(row["id"]) for row in json.loads(acct.stdout)) == ids
        ver = e.labq("ledger", "verify")
        assert ver.returncode == 0 and "ledger ok" in ver.stdout, ver.stdout + ver.stderr
        assert "3 charges" in ver.stdout, ver.stdout
        _elsewhere_the_same(e, ids)
        _another_cluster_is_refused(e)
    finally:
        e.close()


def _elsewhere_the_same(e, ids):
    """Issue 36: a client whose own state directory is not the scheduler's (every user but the
    scheduler's, under systemd) saw 0 jobs, "no such job" and a ledger that did not add up."""
    other = tempfile.mkdtemp(prefix="labq-client-", dir="/tmp")
    try:
        env = {k: v for k, v in e.stack.env().items() if k not in ("XDG_STATE_HOME", "STATE_DIRECTORY")}
        env.update(LABQ_STATE_DIR=other, HOME="/dev/null", XDG_CACHE_HOME=other)

        def labq(*args):
            p = subprocess.run(e.stack.command(*args), env=env, cwd=e.work, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, (args, p.stderr)
            return p.stdout
        assert sorted(int(row["id"]) for row in json.loads(labq("acct", "--json"))) == ids
        assert json.loads(labq("show", str(ids[0]), "--json"))["state"] == "CD"
        assert "3 charges" in labq("ledger", "verify")
        assert not glob.glob(os.path.join(other, "**", "history.db"), recursive=True)
    finally:
        shutil.rmtree(other, ignore_errors=True)


def _another_cluster_is_refused(e):
    """An archive belongs to one cluster: a scheduler on a fresh Redis (another cluster, ids from 1
    again) pointed at it refuses to start rather than mix the two clusters' jobs."""
    archive = glob.glob(os.path.join(e.dir, "**", "history.db"), recursive=True)
    assert archive, "the archive is in the stack's state directory"
    rp = start_redis()
    try:
        cfg = os.path.join(rp.dir, "labq.toml")
        with open(cfg, "w") as f:
            f.write(f'[redis]\nurl = "{rp.url}"\n[history]\nurl = "sqlite://{archive[0]}"\n')
        env = {k: v for k, v in e.stack.env().items() if k != "LABQ_REDIS_URL"}    # the stack's (it beats --config's)
        p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", cfg, "scheduler"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 3 and "archive of cluster" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    finally:
        rp.proc.terminate()
        rp.proc.wait(10)
        shutil.rmtree(rp.dir, ignore_errors=True)


def test_a_scheduler_on_postgresql_archives_and_every_answer_stays_the_same(postgres):
    """The daemons with history.url = "postgresql://…" (a private cluster; skipped with the reason
    where PostgreSQL or psycopg is missing): jobs run with history.keep = 30 days; every answer is
    taken; the scheduler restarts with keep = 0 and moves them all to PostgreSQL; acct (table, CSV,
    JSON), report, show of each job and ledger verify answer byte for byte as before, and no SQLite
    file appears."""
    import os

    import psycopg
    url = postgres.new_database("e2e_scheduler")
    text = E2E_CONFIG + f'[history]\nkeep = "30d"\nurl = "{url}"\n'
    e = E2E(text)
    try:
        # Long enough to cost something (billing runs from the process's start to its end: `true` can round to $0).
        ids = [e.sub("-G", "1", "-t", "5m", "--", "sleep", "0.2") for _ in range(3)]
        ids.append(e.sub("-t", "5m", "--", "false"))
        held = e.sub("-H", "-t", "5m", "--", "true")
        assert e.labq("del", str(held)).returncode == 0
        ids.append(held)
        for jid, want in zip(ids, ["CD", "CD", "CD", "F", "CA"]):
            e.wait_state(jid, {want})
        r, k = e.client.store.r, e.client.k
        wait_for(lambda: r.xlen(k.ledger) >= 4, 60, what="the 4 attempts' charges")
        queries = [("acct", "--since", "2000-01-01"), ("acct", "--since", "2000-01-01", "-o", "csv"),
                   ("acct", "--since", "2000-01-01", "--json"), ("report", "--by", "account,user,status", "--json"),
                   ("ledger", "verify"), *[("show", str(j), "--json") for j in ids]]

        def answers():
            out = [e.labq(*q) for q in queries]
            assert all(p.returncode == 0 for p in out), [(q, p.stderr) for q, p in zip(queries, out) if p.returncode]
            return [p.stdout for p in out]
        before = answers()
        assert "5 jobs" in before[0] and "ledger ok" in before[4], before
        assert r.zcard(k.history) == 5, "keep = 30 days: nothing archived yet"
        entries = r.xlen(k.ledger)

        e.stack.stop("scheduler")
        with open(e.cfg_path, "w") as f:
            f.write(text.replace('keep = "30d"', 'keep = "0s"').format(user=current_user(),
                                                                       spool=os.path.join(e.dir, "spool")))
        e.stack.start("scheduler", "scheduler")
        wait_for(lambda: r.zcard(k.history) == 0 and r.xlen(k.ledger) == 0, 90, what="the archive pass")
        assert not any(r.exists(k.job(j)) for j in ids), "the records left Redis"
        with psycopg.connect(url) as c:
            n_jobs, n_rows = c.execute("SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM acct)").fetchone()
            n_ledger = c.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
        assert (n_jobs, n_rows, n_ledger) == (5, 5, entries)
        after = answers()
        for q, b, a in zip(queries, before, after):
            assert a == b, q
        assert not os.path.exists(os.path.join(e.dir, "history.db")), "the archive is PostgreSQL, not a file"
    finally:
        e.close()
