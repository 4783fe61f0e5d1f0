"""The rare commands on a live queue import neither `json`, `re` nor `enum` (issue 39 item 4: a rare
command costs what `labq sub` costs; those three were ~20 M of the ~80-105 M instructions of each,
`sub` ~62 M): `prio` printing the published ranking with the user's own change patched in
(priopatch.py), `acct`'s table of an ended job, `show` of it (its log paths: logpath._sub), `budget`
of a monthly budget (periods._parse), `report`, `alerts`, `nodes` and `share`. The C encoder and
scanner (scheduler/cjson.py), the plain state codes (jobs/codes.py) and parsing by hand stand in."""
import os
import re
import subprocess
import sys
import time

import pytest

from labq.scheduler.client import current_user
from labq.scheduler.daemon import ranking
from labq.scheduler.store.keys import Keys
from tests import harness
from tests.harness import ROOT, BudgetBench

K = Keys()
LEAN = re.compile(r"\|\s+(json|re|enum)$", re.M)
MONTHLY = '[[budgets]]\nname = "eta-month"\naccount = "eta"\nlimit = 5.0\nperiod = "month"\n'


def _labq(bench, tmp_path, *argv) -> tuple[str, list[str]]:
    """(stdout, the lean-breaking modules it imported) of `labq ARGV`, as a user runs it (the settings cache kept)."""
    env = {**os.environ, "LABQ_REDIS_URL": bench.rp.url, "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PYTHONPROFILEIMPORTTIME": "1"}
    env.pop("LABQ_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "labq", "--config", str(bench.cfg_path), *argv], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "import time:" in p.stderr, (argv, p.stderr[-800:])
    return p.stdout, sorted(set(LEAN.findall(p.stderr)))


@pytest.mark.redis
def test_rare_commands_on_a_live_queue_import_no_json_re_or_enum(redis_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    monkeypatch.setattr(harness, "BUDGET_CONFIG", harness.BUDGET_CONFIG + MONTHLY)
    bench = BudgetBench(redis_server, tmp_path)
    ended = bench.run_job(20)
    now = time.time()
    for est in (5, 50):
        bench.submit_at(now - est, est=est, hold=True)
    rank = bench.s.planner.ranking = ranking.Ranking(bench.s)
    assert rank.after_pass(now + 0.5)
    new = bench.submit_at(now + 2, hold=True)        # within ranking.GAP: the ranking stays, this user's change counts
    assert bench.r.hget(K.ranking_since, current_user()), "the submitter's change since the ranking"
    for argv in (("stat",), ("prio", "-r"), ("budget",)):   # the client settings cache and its books filled, as after a first command
        _labq(bench, tmp_path, *argv)
    out, heavy = _labq(bench, tmp_path, "prio")
    assert "; as of " in out.split("\n", 1)[0] and f"\n{new} " in out, out     # the ranking, patched
    assert not heavy, ("prio", heavy)
    for argv, shown in ((("acct",), f"\n{ended} "), (("show", str(ended)), f"labq-{ended}.out"),
                        (("budget",), "eta-month"), (("report",), "eta "), (("alerts",), ""), (("nodes",), "n1"),
                        (("share",), "eta")):
        out, heavy = _labq(bench, tmp_path, *argv)
        assert shown in out, (argv, out)
        assert not heavy, (argv, heavy)
