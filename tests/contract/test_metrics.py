"""scheduler.metrics: the gauges from one instant (pure), and a real scheduler's endpoint scraped and
parsed with prometheus_client's own parser while a worker runs jobs."""
import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from labq.scheduler.daemon import metrics
from labq.scheduler.errors import ConfigError
from labq.scheduler.jobs import states
from labq.scheduler.settings import config as config_mod
from tests.harness import ROOT, ClusterBuilder, cfg, wait_for


def _rows(fams, name):
    return {tuple(sorted(labels.items())): v for n, _, rows in fams if n == name for labels, v in rows}


def test_gauges_count_the_queue_gpus_and_budgets_of_one_instant():
    c = cfg('[rates]\ngpu_hour = 3.6\n[accounts.eta]\nusers = ["alice"]\n'
            '[[budgets]]\nname = "eta"\naccount = "eta"\nlimit = 100.0\n')
    snap = (ClusterBuilder().node("n1", gpus=2).node("n2", gpus=1, state="drain")
            .running("n1", gpus=1, account="eta").job(gpus=1, account="eta", state=states.PENDING, reason="Resources")
            .job(gpus=8, account="eta", reason="BudgetExhausted").build())
    fams = metrics.gauges(snap.jobs, snap.nodes, c.budgets, {"eta": 7_000_000}, snap.now, True, 3,
                          currency=c.rates.currency)
    assert _rows(fams, "labq_jobs_pending") == {(("account", "eta"), ("reason", "Resources")): 1,
                                                (("account", "eta"), ("reason", "BudgetExhausted")): 1}
    assert _rows(fams, "labq_jobs_running") == {(("account", "eta"), ("node", "n1")): 1}
    assert _rows(fams, "labq_gpus") == {(("model", "fake"), ("node", "n1")): 2,
                                              (("model", "fake"), ("node", "n2")): 1}
    assert _rows(fams, "labq_gpus_allocated")[(("model", "fake"), ("node", "n1"))] == 1
    assert _rows(fams, "labq_node")[(("node", "n2"), ("state", "drain"))] == 1
    (lab, spent), = _rows(fams, "labq_budget_spent").items()
    assert dict(lab)["budget"] == "eta" and spent == 7.0
    assert _rows(fams, "labq_dead_letters") == {(): 3}


def test_the_address_is_checked():
    assert config_mod.loads('[scheduler]\nmetrics = "127.0.0.1:9464"').metrics == "127.0.0.1:9464"
    for bad in ('"9464"', '"host:0"', '"host:99999"', "9464", '":9464"'):
        with pytest.raises(ConfigError, match="scheduler.metrics"):
            config_mod.loads(f"[scheduler]\nmetrics = {bad}")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_a_running_scheduler_serves_metrics_prometheus_can_parse(real_redis, redis_server, tmp_path):
    port = _port()
    conf = tmp_path / "labq.toml"
    conf.write_text(f'[redis]\nurl = "{redis_server.url}"\nprefix = "met"\n[scheduler]\ntick = 0.2\n'
                    f'metrics = "127.0.0.1:{port}"\n[rates]\ngpu_hour = 3.6\n'
                    f'[[budgets]]\nname = "lab"\naccount = "default"\nlimit = 50.0\n'
                    f'[worker]\nname = "mnode"\ngpus = 2\nslots = 4\nspool = "{tmp_path}/spool"\n'
                    f'run_as = "self"\nallow_root = true\n')
    env = dict(os.environ, PYTHONPATH=ROOT)
    labq = [sys.executable, "-m", "labq", "--config", str(conf)]
    log = open(tmp_path / "daemons.log", "w")
    procs = [subprocess.Popen(labq + [role], stdout=log, stderr=subprocess.STDOUT, env=env)
             for role in ("scheduler", "worker")]
    try:
        def scrape():
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return None
            return {s.name: s for f in text_string_to_metric_families(text) for s in f.samples
                    if not s.labels} | {(s.name, tuple(sorted(s.labels.items()))): s
                                        for f in text_string_to_metric_families(text) for s in f.samples}

        wait_for(lambda: (m := scrape()) and m.get(("labq_gpus", (("model", "fake"), ("node", "mnode")))),
                 60, what="the node's GPUs in the metrics")
        for _ in range(3):
            p = subprocess.run(labq + ["sub", "-G", "1", "-t", "1h", "--", "sleep", "600"], env=env,
                               capture_output=True, text=True, cwd=tmp_path, timeout=60)
            assert p.returncode == 0, p.stderr
        m = wait_for(lambda: (m := scrape()) and m.get(("labq_jobs_running", (("account", "default"),
                                                                               ("node", "mnode"))))
                     and m[("labq_jobs_running", (("account", "default"), ("node", "mnode")))].value == 2
                     and m.get(("labq_jobs_pending", (("account", "default"), ("reason", "Resources")))) and m,
                     60, what="two running and one pending")
        assert m[("labq_gpus_allocated", (("model", "fake"), ("node", "mnode")))].value == 2
        assert m["labq_leader"].value == 1
        assert m["labq_requests_total"].value >= 3
        assert m["labq_plan_seconds_count"].value >= 1 and m["labq_tick_seconds_count"].value >= 1
        committed = [s for k, s in m.items() if isinstance(k, tuple) and k[0] == "labq_budget_committed"]
        assert committed and committed[0].labels["budget"] == "lab" and committed[0].value > 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert lint(text) == [], lint(text)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        log.close()


def lint(text: str) -> list[str]:
    """What `promtool check metrics` says of a scrape about names (issue 36: a gauge named
    labq_gpus_total, `_created` series); promtool itself too, where it is installed."""
    out = []
    for f in text_string_to_metric_families(text):
        if f.type != "counter":
            out += [f"{s.name}: non-counter metrics should not have \"_total\" suffix" for s in f.samples
                    if s.name.endswith("_total")]
        out += [f"{s.name}: a _created series" for s in f.samples if s.name.endswith("_created")]
    import shutil
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        out += [line for line in (p.stdout + p.stderr).splitlines() if line.strip()]
    return out


def test_the_lint_catches_what_the_issue_found():
    bad = ("# HELP labq_gpus_total GPUs.\n# TYPE labq_gpus_total gauge\nlabq_gpus_total 2.0\n"
           "# HELP labq_requests_total Requests.\n# TYPE labq_requests_total counter\nlabq_requests_total 1.0\n"
           "labq_requests_created 1.7e9\n")
    assert [x.split(":")[0] for x in lint(bad)] == ["labq_gpus_total", "labq_requests_created"], lint(bad)


def test_the_grafana_dashboard_queries_only_metrics_the_scheduler_serves():
    import json
    import re
    dash = json.load(open(os.path.join(ROOT, "docs", "grafana-labq.json")))
    served = {"labq_jobs_pending", "labq_jobs_running", "labq_gpus", "labq_gpus_allocated", "labq_node",
              "labq_leader", "labq_budget_limit", "labq_budget_spent", "labq_budget_committed",
              "labq_budget_available", "labq_dead_letters", "labq_tick_seconds_bucket", "labq_plan_seconds_bucket",
              "labq_requests_total", "labq_alerts_total"}
    used = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"labq_\w+", t["expr"])}
    assert used and used <= served, used - served


def test_a_money_budgets_unit_label_is_the_configured_currency():
    c = cfg('[rates]\ncurrency = "EUR"\n[[budgets]]\nname = "eta"\nlimit = 100.0\n')
    fams = metrics.gauges([], [], c.budgets, {}, 1_000_000.0, True, 0, currency=c.rates.currency)
    (lab, _), = _rows(fams, "labq_budget_limit").items()
    assert dict(lab)["unit"] == "eur"


def test_the_pending_gauge_counts_a_held_array_kept_as_one_rest():
    """A held array kept as one record (jobs/rest.py) is as many pending jobs as its tasks still resting."""
    from labq.scheduler.jobs import rest
    from labq.scheduler.jobs.model import Job
    t = Job(id=0, user="alice", account="eta", held=True, reason=states.HELD)
    _, made = rest.made(t, 10, list(range(1, 2001)), None)
    held = Job(id=3, user="alice", account="eta", held=True, reason=states.HELD)
    fams = metrics.gauges([held], [], [], {}, 1_000_000.0, True, 0, rests={10: made[10].without([4, 5])}, currency="USD")
    assert _rows(fams, "labq_jobs_pending") == {(("account", "eta"), ("reason", "Held")): 1 + 1998}
