"""The archive on real processes: with history.keep = 0 the scheduler moves ended jobs and their
ledger entries out of Redis within one archive pass, and `labq show`, `labq acct` and `labq ledger
verify` (each its own process, finding the archive in the stack's state directory) answer as
before."""
import json

from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, wait_for

pytestmark = E2E_MARKS


def test_ended_jobs_leave_redis_and_every_command_still_sees_them():
    e = E2E(E2E_CONFIG + '[history]\nkeep = "0s"\n')
    try:
        ids = [e.sub("-G", "1", "-t", "5m", "--", "true") for _ in range(3)]
        for jid in ids:
            e.wait_state(jid, {"CD"})
        r = e.client.r
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
    finally:
        e.close()
