"""`labq report`'s kept totals on real processes (store/totals.py): the scheduler's loop folds the jobs
that end into the cells, `labq report` (its own process) prints from them what the full read of every
record gives, and a scheduler that restarts (a new leader) rebuilds them from the records and names
itself their keeper."""
import json

from labq.scheduler.money import report as rep
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, wait_for

pytestmark = E2E_MARKS


def _full(e, keys):
    """report.by over every record (as `report` reads without the totals), JSON as --json prints it."""
    read = e.client.read
    return json.loads(json.dumps(rep.by(read.acct_rows(0) + read.active(), keys, {}, 0, float("inf"))))


def test_the_scheduler_keeps_the_report_totals_and_report_prints_from_them():
    e = E2E(E2E_CONFIG)
    try:
        ids = [e.sub("-G", "1", "-t", "5m", "--", "sleep", "0.2") for _ in range(3)]
        ids.append(e.sub("-t", "5m", "--", "false"))
        for jid in ids:
            e.wait_state(jid, {"CD", "F"})
        r, k = e.client.store.r, e.client.k
        wait_for(lambda: r.hlen(k.report_new) == 0 and r.hlen(k.report_folded) == len(ids), 30,
                 what="the loop's fold of the ended jobs")
        assert r.get(k.report_by) == r.get(k.leader)
        cells = r.hgetall(k.report_cells)
        assert cells and sum(int(v.split(" ")[0]) for v in cells.values()) + r.zcard(k.report_split) == len(ids)
        for by in ("account", "user,status"):
            p = e.labq("report", "--by", by, "--json")
            assert p.returncode == 0, p.stderr
            assert json.loads(p.stdout) == _full(e, tuple(by.split(","))) and json.loads(p.stdout)
        # A new leader: the keys rebuilt from the records (every ended job folded again), kept by it.
        was = r.get(k.leader)
        e.stack.stop("scheduler")
        e.stack.start("scheduler", "scheduler")
        wait_for(lambda: r.get(k.report_by) not in (None, was) and r.get(k.report_by) == r.get(k.leader)
                 and r.hlen(k.report_new) == 0 and r.hlen(k.report_folded) == len(ids), 60,
                 what="the new leader's rebuild of the report totals")
        assert r.hgetall(k.report_cells) == cells
        p = e.labq("report", "--json")
        assert p.returncode == 0 and json.loads(p.stdout) == _full(e, ("account",)), p.stderr
    finally:
        e.close()
