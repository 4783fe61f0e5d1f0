"""The budget, alerts, report and ledger commands as a user runs them (`python -m labq.cli.main`), against
the real redis-server fixture, with the scheduler ticking in this process while each command runs."""
import json
import os
import time

import pytest

from labq.scheduler.client import current_user
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import ROOT, BudgetBench as Bench, job, push

pytestmark = pytest.mark.redis
K = Keys()


@pytest.fixture
def bench(redis_server, tmp_path):
    return Bench(redis_server, tmp_path)


def test_override_set_and_the_balance(bench):
    code, out, err = bench.labq("budget", "override", "eta-sweep", "--amount", "0.5", "--approver", "pi",
                                "--expires", "2h", "--reason", "paper deadline")
    assert code == 0 and "override 1 on budget eta-sweep: +$0.50" in out, err
    code, out, _ = bench.labq("budget", "override", "--list", "--json", scheduler=False)
    (o,) = json.loads(out)
    assert (o["id"], o["amount"], o["approver"], o["reason"], o["active"]) == (1, 0.5, "pi", "paper deadline", True)
    code, out, _ = bench.labq("budget", "set", "eta-sweep", "--limit", "2")
    assert code == 0 and "$1.00 -> $2.00" in out
    code, out, _ = bench.labq("budget", "--json", scheduler=False)
    (b,) = json.loads(out)
    assert (b["limit"], b["overrides"], b["available"]) == (2.0, 0.5, 2.5)
    assert [a["kind"] for a in b["alerts"]] == ["override", "limit"]
    code, out, _ = bench.labq("budget", "override", "--revoke", "1")
    assert code == 0 and "revoked" in out
    code, out, err = bench.labq("budget", "override", "--revoke", "1")
    assert code == 2 and "already revoked" in err and err.count("\n") == 1
    code, out, err = bench.labq("budget", "override", "eta-sweep", "--amount", "1", scheduler=False)
    assert code == 2 and "missing --approver, --expires, --reason" in err
    code, out, err = bench.labq("budget", "override", "nope", "--amount", "1", "--approver", "x", "--expires", "1h",
                                "--reason", "y")
    assert code == 2 and "no such budget 'nope'" in err
    code, out, _ = bench.labq("alerts", "--json", scheduler=False)
    assert [a["kind"] for a in json.loads(out)] == ["override", "limit", "override_revoked"]
    code, out, _ = bench.labq("budget", scheduler=False)
    assert "eta-sweep" in out and "$2.00" in out and "ALERTS" in out
    code, out, err = bench.labq("budget", "--period", "2026-11", scheduler=False)
    assert code == 2 and "no budget has a period named '2026-11'" in err
    code, out, err = bench.labq("budget", "set", "eta-sweep", scheduler=False)
    assert code == 2 and "give --limit AMOUNT or --reset" in err


def test_reports_in_every_format_and_the_plot(bench, tmp_path):
    for secs in (20, 40):
        bench.run_job(secs, tags=[["model", "eta"]])
    code, out, err = bench.labq("report", "--by", "user,gpu_type", "--format", "json", scheduler=False)
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["gpu_type"], row["jobs"], row["success_rate"]) == ("fake", 2, 1.0)
    assert row["cost"] == pytest.approx(0.6, abs=1e-4) and row["gpu_hours"] == pytest.approx(60 / 3600, abs=1e-4)
    code, out, _ = bench.labq("report", "--by", "tag:model", "--format", "csv", scheduler=False)
    assert out.splitlines()[0].startswith("tag:model,jobs,attempts,gpu_hours") and out.splitlines()[1].startswith("eta,2,2")
    code, out, _ = bench.labq("report", "--by", "status", scheduler=False)
    assert "TOTAL" in out and "CD" in out
    code, out, err = bench.labq("report", "--by", "colour", scheduler=False)
    assert code == 2 and "unknown key 'colour'" in err
    code, out, _ = bench.labq("report", "--forecast-accuracy", "--json", scheduler=False)
    assert [(r["user"], r["p50"], r["p90"]) for r in json.loads(out)][-1] == ("*", 2.0, 4.0)
    code, out, _ = bench.labq("acct", "--json", scheduler=False)
    assert [(r["committed_cost"], r["final_cost"]) for r in json.loads(out)] == [(0.12, 0.2), (0.12, 0.4)]
    png = tmp_path / "spend.png"
    code, out, err = bench.labq("report", "--plot", str(png), scheduler=False)
    if code == 2 and "needs matplotlib" in err:
        pytest.skip("matplotlib (the plot extra) is not installed")
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err


def test_plot_without_matplotlib_is_one_line_exit_2(bench, tmp_path):
    fake = tmp_path / "nomatplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    code, out, err = bench.labq("report", "--plot", str(tmp_path / "x.png"), scheduler=False,
                                env={"PYTHONPATH": f"{fake.parent}{os.pathsep}{ROOT}"})
    assert code == 2 and "pip install 'labq[plot]'" in err and err.count("\n") == 1 and "Traceback" not in err


def test_ledger_import_reconcile_and_verify(bench, tmp_path):
    bench.run_job(30)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    bill = tmp_path / "bill.csv"
    bill.write_text(f"date,account,amount\n{day},eta,0.25\n{day},tag:model=x,1.00\n")
    code, out, err = bench.labq("ledger", "import", str(bill))
    assert code == 0 and "imported 2 rows" in out, err
    code, out, err = bench.labq("ledger", "import", str(bill))
    assert code == 0 and "imported 0 rows" in out and "2 already imported" in out
    code, out, err = bench.labq("report", "--reconcile", "--format", "json", scheduler=False)
    got = {r["scope"]: r for r in json.loads(out)}
    assert got["eta"]["imported"] == 0.25 and got["eta"]["labq"] == pytest.approx(0.3) and got["eta"]["diff"] == pytest.approx(-0.05)
    assert got["tag:model=x"]["labq"] == 0.0
    bad = tmp_path / "bad.csv"
    bad.write_text("2026-11-01,eta\n")
    code, out, err = bench.labq("ledger", "import", str(bad), scheduler=False)
    assert code == 2 and "row 1: expected 3 columns" in err
    code, out, err = bench.labq("ledger", "verify", scheduler=False)
    assert code == 0 and "ledger ok" in out, err
    bench.r.hincrby(K.spent(), "eta-sweep", 7)          # corrupt the cached balance
    code, out, err = bench.labq("ledger", "verify", scheduler=False)
    assert code == 1 and "balance eta-sweep: cached 300007, the entries add up to 300000" in err


def test_report_node_idle_of_a_rented_node(bench):
    code, out, err = bench.labq("report", "--node-idle", scheduler=False)
    assert code == 2 and err.strip() == "labq: no rented nodes: rates.node_hour gives no whole-instance prices"
    bench.run_job(30)
    text = bench.cfg_path.read_text().replace("gpu_hour = 36.0", 'gpu_hour = 36.0\nnode_hour = { "n1" = 72.0 }')
    bench.cfg_path.write_text(text)
    code, out, err = bench.labq("report", "--node-idle", "--json", scheduler=False)
    assert code == 0, err
    [row] = json.loads(out)
    # The job paid 30 s × $36/h = $0.30 of an instance that costs $72/h over the window since it started.
    assert row["node"] == "n1" and row["paid"] == pytest.approx(0.3, abs=1e-3)
    assert row["idle_cost"] == pytest.approx(row["instance_cost"] - row["paid"], abs=1e-3)


def test_acct_duplicates_gives_each_attempt_its_own_row_and_cost(bench):
    """Issue 35: `labq acct --duplicates` (sacct's -D): a requeued job's attempts each a row, each
    with its own cost; --json adds `attempt` and keeps every key acct's objects have."""
    me, agent = current_user(), AgentStore(bench.r, K)
    b = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 3600, "est": 10, "account": "eta"}
    push(bench.r, me, {"rid": "dup", "op": "submit", "body": json.dumps(b)})
    bench.r.delete(K.wake)               # as the run loop drains it: the tick plans at once
    bench.s.tick(time.time(), [f"user:{me}"])
    jid = json.loads(bench.r.lrange(K.reply("dup"), 0, -1)[-1])["job_id"]
    for outcome, code, seconds in (("node_failure", None, 20), ("completed", 0, 30)):
        a = bench.s.jobs[jid].current
        agent.post("finished", jid, a.attempt, "n1", {"outcome": outcome, "exit_code": code,
                                                      "start_time": a.dispatch_time,
                                                      "end_time": a.dispatch_time + seconds})
        bench.r.delete(K.wake)
        bench.s.tick(a.dispatch_time + seconds + 0.5)
        bench.s.tick(a.dispatch_time + seconds + 1)
    done = job(bench.r, jid)
    assert done.state == "CD" and [a.outcome for a in done.attempts] == ["node_failure", "completed"]
    code, out, err = bench.labq("acct", "-j", str(jid), "--json", scheduler=False)
    plain = json.loads(out)
    assert code == 0 and [r["final_cost"] for r in plain] == [pytest.approx(0.5)], err
    code, out, err = bench.labq("acct", "-j", str(jid), "--duplicates", "--json", scheduler=False)
    rows = json.loads(out)
    assert code == 0 and [(r["attempt"], r["state"], r["final_cost"]) for r in rows] == [
        (1, "NF", pytest.approx(0.2)), (2, "CD", pytest.approx(0.3))], err
    assert all(set(plain[0]) <= set(r) for r in rows), "add, don't rename"
    code, out, _ = bench.labq("acct", "-j", str(jid), "-D", "-P", "--format", "JobID,State,Restarts,Cost",
                              scheduler=False)
    assert out.splitlines() == ["JobID|State|Restarts|Cost", f"{jid}|NODE_FAIL|0|$0.20", f"{jid}|COMPLETED|1|$0.30"]
    code, out, _ = bench.labq("acct", "-j", str(jid), "-D", scheduler=False)
    lines = out.splitlines()
    assert code == 0 and "ATTEMPT " in lines[0] and len(lines) == 4 and lines[-1] == "2 attempts, total cost $0.50"
    assert lines[1].split()[4:5] == ["NF"] and lines[2].split()[4:5] == ["CD"]


def test_sub_hold_until_budget_takes_what_the_budget_cannot_pay_now(bench):
    # forecast mode, no --est: 10 min + kill_wait 30 s at $0.01 a second = $6.30 of a $1 budget
    code, out, err = bench.labq("sub", "-G", "1", "-t", "10", "-A", "eta", "--", "true")
    assert code == 3 and "would cost $6.30" in err and err.count("\n") == 1, err
    code, out, err = bench.labq("sub", "--hold-until-budget", "-G", "1", "-t", "10", "-A", "eta", "--", "true")
    assert code == 0 and out.startswith("Submitted job "), err
    assert "waits (BudgetExhausted): budget eta-sweep: job would cost $6.30" in err
    jid = int(out.split()[-1])
    bench.r.delete(K.wake)               # as the run loop drains it: the tick plans at once
    bench.s.tick(time.time())
    assert job(bench.r, jid).state == "PD" and job(bench.r, jid).reason == "BudgetExhausted"
