"""Kill -9 of the scheduler in the middle of an archive batch, on real processes.

The scheduler's archiver announces a step's SQLite commit in a directory (LABQ_TEST_ARCHIVE_PAUSE) and
waits there, before its Redis deletes; the test kills it at that exact point (after the jobs'
commit, or after the ledger's), restarts it without the hook, and checks that every job and every
charge is archived exactly once, gone from Redis, and that `labq ledger verify` is clean."""
import json
import os
import signal
import sqlite3
import tempfile

import pytest

from labq.scheduler.jobs import states
from labq.scheduler.store.history import History
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, wait_for

pytestmark = E2E_MARKS
JOBS = 6


@pytest.mark.parametrize("step", ["jobs", "ledger"])
def test_kill_9_between_the_sqlite_commit_and_the_redis_delete(step):
    pause = tempfile.mkdtemp(prefix="labq-pause-", dir="/tmp")
    open(os.path.join(pause, f"pause-{step}"), "w").close()
    os.environ["LABQ_TEST_ARCHIVE_PAUSE"] = pause          # the first scheduler's only: see the restart
    try:
        e = E2E(E2E_CONFIG + '[history]\nkeep = "0s"\n[security]\nadmins = ["{user}"]\n')
    finally:
        del os.environ["LABQ_TEST_ARCHIVE_PAUSE"]
    db_path = os.path.join(e.dir, "history.db")
    e.client.read.history = History(db_path)               # e.job() finds archived jobs too
    try:
        ids = [e.sub("-G", "1", "-t", "5m", "--", "true") for _ in range(JOBS)]
        committed = os.path.join(pause, f"{step}-committed")
        wait_for(lambda: os.path.exists(committed), 120, what=f"the archiver to commit a batch of {step}")
        r, k = e.client.store.r, e.client.k
        db = sqlite3.connect(db_path)
        if step == "jobs":
            archived = [i for (i,) in db.execute("SELECT id FROM jobs")]
            assert archived and all(r.exists(k.job(i)) for i in archived), "committed in SQLite, still in Redis"
        else:
            sids = [s for (s,) in db.execute("SELECT stream_id FROM ledger")]
            assert sids and len(r.xrange(k.ledger, sids[0], sids[-1])) == len(sids), "in both places"
        db.close()
        e.stack.procs["scheduler"].send_signal(signal.SIGKILL)
        e.stack.procs["scheduler"].wait(10)
        e.stack.start("scheduler", "scheduler")             # no hook now: it archives the rest
        for jid in ids:
            wait_for(lambda jid=jid: (j := e.job(jid)) is not None and j.state in states.TERMINAL, 180,
                     what=f"job {jid} to end")
        wait_for(lambda: r.zcard(k.history) == 0 and r.xlen(k.ledger) == 0, 120, what="the archive to drain")
        db = sqlite3.connect(db_path)
        jobs = db.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM jobs").fetchone()
        rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM acct").fetchone()
        ledger = db.execute("SELECT COUNT(*), COUNT(DISTINCT stream_id), COUNT(DISTINCT key) FROM ledger "
                            "WHERE fields LIKE '%\"charge\"%'").fetchone()
        assert jobs == rows == (JOBS, JOBS), "each job archived once, with its acct row"
        assert ledger == (JOBS, JOBS, JOBS), "each charge archived once"
        assert not any(r.exists(k.job(i)) for i in ids), "none left in Redis"
        ver = e.labq("ledger", "verify")
        assert ver.returncode == 0 and "ledger ok" in ver.stdout and f"{JOBS} charges" in ver.stdout, \
            ver.stdout + ver.stderr
        acct = e.labq("acct", "--json")
        assert sorted(int(j["id"]) for j in json.loads(acct.stdout)) == sorted(ids), acct.stderr
        table = e.labq("acct")
        assert f"{JOBS} jobs" in table.stdout, table.stdout + table.stderr
        now = e.labq("admin", "archive", "--now")       # through the inbox: nothing is left to move
        assert now.returncode == 0 and now.stdout.startswith("archived 0 jobs and 0 ledger entries"), \
            now.stdout + now.stderr
    finally:
        open(os.path.join(pause, "go"), "w").close()       # a scheduler still waiting there goes on
        e.close()
