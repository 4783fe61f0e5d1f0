"""`labq nodes`, `labq share`, `labq prio` and `labq show` read jobs as views (store/jobview.py,
ThinReader.on_node, active_views, job_view) instead of model.Job records (issue 39 item 4): what they print
from them is what the records give, and none imports the job model (nor prio the planner or the config
once the client settings cache holds its weights: tests/unit/test_prio_books.py)."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from labq.cli import render, share as share_view
from labq.cli.ctx import thin_client
from labq.scheduler.client import current_user
from labq.scheduler.jobs import states
from labq.scheduler.store.keys import Keys
from tests.harness import ROOT, BudgetBench, push

MODEL = re.compile(r"\|\s+(labq\.scheduler\.(jobs\.model|policy|settings\.config)|dataclasses|tomllib)$", re.M)


def _running(bench, **body) -> int:
    """A job the bench's scheduler has started on n1 and that stays there."""
    rid = f"r{time.monotonic_ns()}"
    b = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "cpus": 2, "mem": 1 << 30, "time_limit": 60, "est": 10,
         "account": "eta", **body}
    push(bench.r, current_user(), {"rid": rid, "op": "submit", "body": json.dumps(b)})
    bench.r.delete(Keys().wake)
    bench.s.tick(time.time(), [f"user:{current_user()}"])
    return json.loads(bench.r.lrange(Keys().reply(rid), 0, -1)[-1])["job_id"]


@pytest.mark.redis
def test_nodes_and_share_read_running_jobs_as_the_records_give_them(redis_server, tmp_path, monkeypatch):
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)
    jid = _running(bench)
    _running(bench, gpus=0, cpus=1)
    held = _running(bench, hold=True)
    env = {**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT,
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("LABQ_CONFIG", None)
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    c = thin_client(str(bench.cfg_path))
    views, records = c.read.on_node(), c.read.active()
    assert [j.id for j in views] == [j.id for j in records if j.state in states.ON_NODE] and jid in [j.id for j in
                                                                                                  views]
    now = time.time()
    for view, record in zip(views + [c.read.job_view(held)], records):
        assert render.job_dict(view, now) == render.job_dict(record, now)
    assert [j.id for j in c.resolve(str(jid), views=True)] == [jid] and c.resolve("999999", views=True) == []
    for n in c.read.nodes():
        assert render.node_dict(n, views) == render.node_dict(n, records)
    usage = c.fairshare(now, views, 3600.0)
    assert usage == c.fairshare(now, records, 3600.0) and usage["eta"] > 0
    assert share_view.rows(usage, {"eta": 2.0}) == share_view.rows(c.fairshare(now, records, 3600.0), {"eta": 2.0})

    def labq(*argv):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", "--config", str(bench.cfg_path), *argv],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-800:]
        return p

    assert str(jid) in json.loads(labq("nodes", "--json").stdout)[0]["jobs"]
    labq("share")       # the first fills the client settings cache with the shares (clientcache.books)
    assert [j["job_id"] for j in json.loads(labq("prio", "--json").stdout)["jobs"]] == [held] == \
        [j.id for j in c.read.active_views() if j.state == states.PENDING]
    for argv, shown in ((["nodes"], "n1 "), (["share"], "eta "), (["prio"], f"{held} "), (["show", str(jid)], "state: R\n"),
                        (["show", str(held), "--json"], '"Held"')):
        p = labq(*argv)
        assert shown in p.stdout, p.stdout
        assert not MODEL.findall(p.stderr), (argv, sorted(set(MODEL.findall(p.stderr))))


@pytest.mark.redis
def test_nodes_share_and_budget_read_only_the_live_jobs_records(redis_server, tmp_path, monkeypatch):
    """on_node() (`nodes`, `share`) and holdings() (`budget`) read the records of the jobs in Keys.ran, or
    where it is not trusted those whose `stat` row is live (on a node, or an attempt open), not every
    active job's: at 10,000 held jobs that was ~3.5 MB of records for one running job. Where neither says
    (a scheduler that predates them) they read every active record, with the same answers."""
    bench = BudgetBench(redis_server, tmp_path)
    run = _running(bench)
    for _ in range(3):
        _running(bench, hold=True)
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    c = thin_client(str(bench.cfg_path))
    asked = []
    pipe = c.read._pipe

    def counting(cmds):
        asked.extend(len(cmd) - 1 for cmd in cmds if cmd[0] == "MGET")
        return pipe(cmds)
    monkeypatch.setattr(c.read, "_pipe", counting)
    assert [j.id for j in c.read.on_node()] == [run] and len(c.read.holdings()) == 1
    assert asked == [1, 1], "the running job's record, once each (Keys.ran's ids)"
    bench.r.set(Keys().ran_by, "another leader")      # not trusted: the live parts of the `stat` rows say
    asked.clear()
    assert [j.id for j in c.read.on_node()] == [run] and len(c.read.holdings()) == 1
    assert asked == [1, 1], "the running job's record, once each (the rows' live parts)"
    bench.r.delete(Keys().stat_rows)
    asked.clear()
    assert [j.id for j in c.read.on_node()] == [run] and len(c.read.holdings()) == 1
    assert asked == [4, 4], "every active record"


@pytest.mark.redis
def test_prio_from_the_stat_rows_prints_what_the_records_give(redis_server, tmp_path, monkeypatch):
    """`labq prio` reads pending jobs from their `stat` rows (statrows.py's `prio` field) and the records
    of only the jobs on a node; where the index lacks rows (a scheduler that predates this row shape)
    it reads the records: the same jobs, order and factors either way (age aside: time passes)."""
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)
    _running(bench)
    held = [_running(bench, hold=True, est=e) for e in (5, 50, 500)]
    arr = _running(bench, hold=True, array=[0, 9, 1])
    env = {**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT,
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("LABQ_CONFIG", None)

    def prio(*argv):
        p = subprocess.run([sys.executable, "-m", "labq", "--config", str(bench.cfg_path), "prio", *argv],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-800:]
        return p.stdout

    def shown(got):
        return [(j["id"], j["job_id"], j["user"], j["account"], j["qos"], j["factors"]["fairshare"],
                 j["factors"]["burst"], j["factors"]["qos"]) for j in json.loads(got)["jobs"]]

    rows, table = prio("--json"), prio("-r")
    assert {j[1] for j in shown(rows)} >= set(held) | {arr} and f"{arr}_9 " in table
    assert sorted(json.loads(rows)["usage"]) == ["eta"]
    bench.r.delete(Keys().stat_rows)
    records = prio("--json")
    assert shown(rows) == shown(records) and sorted(json.loads(records)["usage"]) == ["eta"]
    assert [line.split()[:4] for line in prio("-r").splitlines()] == [line.split()[:4] for line in table.splitlines()]
