"""Cost reports, pure: grouping, success and failure costs, preemption loss, idle GPUs and
utilisation, forecast accuracy, reconciliation, the spending series of the plot."""
import pytest

from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.money import report
from labq.scheduler.money.ledger import Override

M = 1_000_000


def A(n, node="n1", gpus=("G0",), start=0.0, end=3600.0, outcome="completed", cost=2 * M, **kw):
    return Attempt(n, node, gpus, start_time=start, end_time=end, outcome=outcome, cost=cost, dispatch_time=start, **kw)


def J(jid, state="CD", attempts=(), user="alice", account="eta", gpus=1, **kw):
    return Job(id=jid, user=user, account=account, gpus=gpus, cpus=4, state=state, attempts=tuple(attempts),
               end_time=max((a.end_time for a in attempts), default=None), **kw)


JOBS = [
    J(1, attempts=[A(1)], tags=(("model", "eta"),), qos="normal"),
    J(2, attempts=[A(1, outcome="preempted", end=1800, cost=M, lost_work_s=900.0), A(2, start=2000, end=5600)],
      tags=(("model", "eta"),)),
    J(3, state="F", attempts=[A(1, outcome="exit", end=600, cost=M // 3)], user="bob", tags=(("model", "zeta"),)),
    J(4, state="OOM", attempts=[A(1, node="n2", gpus=("H0", "H1"), outcome="oom", end=1800, cost=4 * M,
                                  usage={"gpu_util_mean": 80.0, "gpu_idle_s": 720.0})], user="bob", gpus=2),
]
MODELS = {"G0": "fake", "H0": "H100", "H1": "H100"}


def test_by_account_sums_everything():
    (row,) = report.by(JOBS, ("account",), MODELS)
    assert row["jobs"] == 4 and row["attempts"] == 5
    assert row["gpu_hours"] == pytest.approx(1 + 0.5 + 1 + 1 / 6 + 1.0, abs=1e-4)
    assert row["cpu_hours"] == pytest.approx(4 * (1 + 0.5 + 1 + 1 / 6 + 0.5), abs=1e-4)
    assert row["cost"] == pytest.approx(2 + 1 + 2 + 1 / 3 + 4, abs=1e-6)
    assert row["success_rate"] == 0.5 and row["cost_per_success"] == pytest.approx(row["cost"] / 2, abs=1e-6)
    assert row["failed_cost"] == pytest.approx(4 + 1 / 3, abs=1e-6)
    assert row["preempt_lost_cost"] == 0.5          # half of the preempted attempt's $1 was lost work
    assert row["idle_gpu_hours"] == 0.2 and row["gpu_util_mean"] == 80.0


def test_by_user_gpu_type_node_status_and_tag():
    rows = {(r["user"], r["gpu_type"]): r for r in report.by(JOBS, ("user", "gpu_type"), MODELS)}
    assert set(rows) == {("alice", "fake"), ("bob", "fake"), ("bob", "H100")}
    assert rows[("bob", "H100")]["gpu_hours"] == 1.0 and rows[("bob", "H100")]["success_rate"] == 0.0
    rows = report.by(JOBS, ("tag:model",), MODELS)
    assert [r["tag:model"] for r in rows] == ["eta", "-", "zeta"]        # highest cost first
    assert [r["node"] for r in report.by(JOBS, ("node",))] == ["n1", "n2"]
    assert {r["status"] for r in report.by(JOBS, ("status",))} == {"CD", "F", "OOM"}
    # The window is on the attempt's end: only what ended in [1000, 4000).
    (row,) = report.by(JOBS, ("account",), MODELS, since=1000, until=4000)
    assert row["attempts"] == 3 and row["jobs"] == 3
    t = report.total(report.by(JOBS, ("user",)), ("user",))
    assert t["user"] == "TOTAL" and t["jobs"] == 4 and t["cost"] == pytest.approx(9.333333, abs=1e-6)


def test_parse_by():
    assert report.parse_by("account,tag:model") == ("account", "tag:model")
    with pytest.raises(ValueError, match="unknown key 'colour'"):
        report.parse_by("account,colour")


def test_forecast_accuracy_per_user():
    jobs = [J(i, attempts=[A(1, end=run)], est=100, user=u) for i, (u, run) in
            enumerate([("a", 50), ("a", 100), ("a", 150), ("a", 200), ("b", 80)], 1)]
    jobs.append(J(9, attempts=[A(1, end=500)]))                  # no --est: not counted
    got = {r["user"]: r for r in report.forecast_accuracy(jobs)}
    assert got["a"] == {"user": "a", "jobs": 4, "p50": 1.0, "p90": 2.0, "margin_90": 1.0}
    assert got["b"]["margin_90"] == 0.0 and got["*"]["jobs"] == 5
    assert list(got) == ["a", "b", "*"]


def test_reconcile_by_day_and_month():
    day = lambda t: "2026-11-01" if t < 3000 else "2026-11-02"   # noqa: E731
    rows = report.reconcile([("2026-11-01", "eta", 5 * M), ("2026-11-02", "tag:model=zeta", M)], JOBS, day)
    got = {(r["date"], r["scope"]): (r["imported"], r["labq"]) for r in rows}
    assert got[("2026-11-01", "eta")] == (5.0, pytest.approx(1 + 1 / 3 + 4, abs=1e-6))
    assert got[("2026-11-02", "eta")] == (0.0, 4.0)                # billed by labq, not on the bill
    assert got[("2026-11-01", "tag:model=zeta")] == (0.0, pytest.approx(1 / 3, abs=1e-6))
    assert got[("2026-11-02", "tag:model=zeta")] == (1.0, 0.0)
    (m,) = report.reconcile([("2026-11", "eta", 9 * M)], JOBS, day)
    assert m["labq"] == pytest.approx(9.333333, abs=1e-6) and m["diff_pct"] == pytest.approx(-3.57, abs=0.01)


def test_spend_series_and_limit_steps():
    e = [{"type": "charge", "budget": "b", "amount": "5", "period": "2026-11", "ts": "20"},
         {"type": "charge", "budget": "b", "amount": "3", "period": "2026-11", "ts": "10"},
         {"type": "charge", "budget": "b", "amount": "7", "period": "2026-10", "ts": "5"},
         {"type": "override", "budget": "b", "amount": "9", "ts": "1"}]
    assert report.spend_series(e, "b", "2026-11") == [(10.0, 3), (20.0, 8)]
    o = [Override(1, "b", 50, "pi", "r", "root", 10, 30), Override(2, "b", 5, "pi", "r", "root", 20, 99, "revoked", 25)]
    assert report.limit_steps(100, o, "b", 0, 40) == [(0, 100), (10, 150), (20, 155), (25, 150), (30, 100), (40, 100)]


def test_node_idle_cost_of_a_rented_node():
    # n1 at $4/h over 0..7200 s = $8; its jobs paid $2 (job 1) + $1 + $2 (job 2) + $1/3 (job 3),
    # of which only what falls inside the window counts.
    rows = report.node_idle(JOBS, {"n1": 4.0, "absent": 9.0}, 0.0, 7200.0)
    [n1] = rows
    assert n1["node"] == "n1" and n1["hours"] == 2.0 and n1["instance_cost"] == 8.0
    assert n1["paid"] == round(2 + 1 + 2 + 1 / 3, 4)
    assert n1["idle_cost"] == round(8 - (2 + 1 + 2 + 1 / 3), 4)
    # A window that cuts job 2's second attempt in half counts half of what it paid.
    [half] = report.node_idle(JOBS, {"n1": 4.0}, 0.0, 3800.0)
    assert half["paid"] == round(2 + 1 + 1 / 3 + 2 * 1800 / 3600, 4)
