"""Periods in a time zone, effective budgets, the stop policy's choice of jobs, ledger verification."""
from dataclasses import replace
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from labq.scheduler.jobs import states
from labq.scheduler.money import budgetwatch, ledger, periods, pricing
from labq.scheduler.money.ledger import Budget, Override
from labq.scheduler.settings import config
from tests.harness import ClusterBuilder

UTC = timezone.utc


def ts(*a, tz=UTC):
    return datetime(*a, tzinfo=tz).timestamp()


@pytest.mark.parametrize("period,at,label", [
    ("month", ts(2026, 11, 30, 23, 59, 59), "2026-11"), ("month", ts(2026, 12, 1), "2026-12"),
    ("quarter", ts(2026, 9, 30, 12), "2026-Q3"), ("quarter", ts(2026, 10, 1), "2026-Q4"),
    ("week", ts(2026, 11, 22, 23), "2026-W47"), ("week", ts(2026, 11, 23), "2026-W48"),
    ("week", ts(2027, 1, 1), "2026-W53"), ("none", ts(2026, 1, 1), ""),
])
def test_labels(period, at, label):
    assert periods.label(period, at) == label


def test_bounds_are_local_midnights_across_dst():
    berlin = ZoneInfo("Europe/Berlin")
    lo, hi = periods.bounds("month", "2026-10", "Europe/Berlin")
    assert lo == ts(2026, 10, 1, tz=berlin) and hi == ts(2026, 11, 1, tz=berlin)
    assert hi - lo == 31 * 86400 + 3600                  # the night clocks go back is 25 hours
    lo, hi = periods.bounds("week", "2026-W13", "Europe/Berlin")   # 2026-03-29: clocks go forward
    assert hi - lo == 7 * 86400 - 3600 and datetime.fromtimestamp(lo, berlin).hour == 0
    lo, hi = periods.bounds("quarter", "2026-Q4", "UTC")
    assert (lo, hi) == (ts(2026, 10, 1), ts(2027, 1, 1))
    assert periods.label("month", ts(2026, 11, 30, 23, 30), "Europe/Berlin") == "2026-12"   # 00:30 there
    for bad in ("2026-13", "26-11", "2026-Q5", ""):
        with pytest.raises(ValueError):
            periods.bounds("month" if "Q" not in bad else "quarter", bad)


def test_spent_now_reads_the_current_period_field():
    b = [Budget("m", "usd", 10, period="month"), Budget("n", "usd", 10)]
    spent = {"m@2026-11": "5", "m@2026-12": "7", "n": "3"}
    assert periods.spent_now(b, spent, ts(2026, 12, 2)) == {"m": 7, "n": 3}
    assert periods.history(b[0], spent) == [("2026-11", 5), ("2026-12", 7)]


def test_timezone_key_is_validated():
    base = "[[budgets]]\nname = 'x'\nlimit = 1\nperiod = 'month'\n"
    assert config.loads(base + "timezone = 'Asia/Tokyo'\n").budgets[0].timezone == "Asia/Tokyo"
    with pytest.raises(config.ConfigError) as e:
        config.loads(base + "timezone = 'Mars/Olympus'\n")
    assert e.value.key == "budgets.x.timezone"
    with pytest.raises(config.ConfigError) as e:
        config.loads("[alerts]\nwebhook = 'ftp://x'\n")
    assert e.value.key == "alerts.webhook"


def test_effective_budgets_take_limits_and_active_overrides():
    b = (Budget("a", "usd", 100, reserve=0.1), Budget("z", "usd", 5))
    os_ = [Override(1, "a", 20, "pi", "r", "root", 0, 50), Override(2, "a", 7, "pi", "r", "root", 0, 500),
           Override(3, "a", 9, "pi", "r", "root", 0, 500, state="revoked")]
    got = ledger.effective(b, {"z": 50}, os_, 60)
    assert [(x.limit, x.overrides) for x in got] == [(100, 7), (50, 0)]
    assert ledger.cap(got[0]) == 90 + 7 and ledger.hard_limit(got[0]) == 107


STOP = """
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "45s"
[qos.mid]
priority = 50
preemptible = true
grace = "90s"
max_preemptions = 1
[[budgets]]
name = "p"
account = "eta"
limit = 1.0
on_exhaust = "preempt"
[[budgets]]
name = "c"
project = "x"
limit = 1.0
on_exhaust = "cancel"
"""


def test_stop_preempts_preemptible_jobs_lowest_priority_first_and_cancels_all():
    cfg = config.loads(STOP)
    rate = (("p", 36_000_000),)
    cb = ClusterBuilder().node("n", gpus=8)
    for qos, ago in (("mid", 50), ("low", 30), ("low", 10), ("normal", 20)):
        cb.running("n", gpus=1, qos=qos, account="eta", started_ago=ago, commit=(("p", 1),), rates=rate)
    cb.running("n", gpus=1, qos="mid", account="eta", started_ago=60, commit=(("p", 1),), rates=rate,
               preempt_count=1)                                          # preempted max_preemptions times
    snap = cb.build()
    running = [j for j in snap.jobs if j.state in states.ON_NODE]
    # 170 s at $0.01/s: $1.70 of $1.00. Nothing stops before it is reached, counting the lead.
    assert budgetwatch.stop(cfg.budgets, {}, running, cfg, snap.now - 120).preempts == ()
    s = budgetwatch.stop(cfg.budgets, {}, running, cfg, snap.now)
    assert [(p.job_id, p.grace, p.for_job) for p in s.preempts] == [(3, 45, None), (2, 45, None), (1, 90, None)]
    assert s.cancels == () and "exhausted" in s.preempts[0].detail
    # A job already stopping is not asked again; one running since before the limit was lowered is left alone.
    again = [replace(j, state=states.PREEMPTING) if j.id == 3 else j for j in running]
    assert [p.job_id for p in budgetwatch.stop(cfg.budgets, {}, again, cfg, snap.now).preempts] == [2, 1]
    assert budgetwatch.stop(cfg.budgets, {}, running, cfg, snap.now, protected={"p": snap.now}).preempts == ()
    # cancel: every running job of the budget, preemptible or not.
    cb = ClusterBuilder().node("n", gpus=4)
    cb.running("n", gpus=1, project="x", started_ago=200, commit=(("c", 1),), rates=(("c", 36_000_000),))
    cb.running("n", gpus=1, project="x", started_ago=5, commit=(("c", 1),), rates=(("c", 36_000_000),))
    snap = cb.build()
    s = budgetwatch.stop(cfg.budgets, {}, list(snap.jobs), cfg, snap.now)
    assert [jid for jid, _ in s.cancels] == [1, 2] and s.preempts == ()


def test_verify_finds_a_corrupted_balance_and_bad_keys():
    e = [{"type": "charge", "key": "1.1", "budget": "b", "amount": "5", "period": ""},
         {"type": "charge", "key": "2.1", "budget": "m", "amount": "3", "period": "2026-11"},
         {"type": "period", "key": "period:m:2026-12", "budget": "m", "amount": "0"}]
    keys = {"1.1", "2.1", "period:m:2026-12"}
    assert ledger.verify(e, {"b": "5", "m@2026-11": "3"}, keys) == []
    assert ledger.verify(e, {"b": "6", "m@2026-11": "3"}, keys) == [
        "balance b: cached 6, the entries add up to 5 (micro-units)"]
    got = ledger.verify(e + [e[0]], {"b": "10", "m@2026-11": "3"}, keys | {"9.9"})
    assert got == ["attempt 1.1 is charged twice to b", "idempotency key 9.9 has no entry"]
    assert ledger.verify(e, {"b": "5", "m@2026-11": "3"}, keys - {"2.1"}) == [
        "entry 2.1 is missing from the idempotency keys"]


def test_billing_per_started_hour():
    from labq.scheduler.jobs.model import Job
    c = config.loads("[rates]\ngpu_hour = 2.0\nbilling = 'started_hour'\n")
    assert ledger.charge(2_000_000, 0, 1, "usd", c) == 2_000_000          # one second: one started hour
    assert ledger.charge(2_000_000, 0, 3600, "usd", c) == 2_000_000
    assert ledger.charge(2_000_000, 0, 3601, "usd", c) == 4_000_000
    assert ledger.charge(2_000_000, 0, 0, "usd", c) == 0
    assert ledger.charge(2_000_000, 0, 3601, "usd", config.loads("")) == 2_000_555
    j = Job(id=1, user="a", account="x", gpus=1, time_limit=5400)
    assert pricing.forecast(j, "usd", "fake", c) == 4_000_000             # 1 h 30 m commits two hours
    with pytest.raises(config.ConfigError) as e:
        config.loads("[rates]\nbilling = 'minute'\n")
    assert e.value.key == "rates.billing"


def test_utc_without_zoneinfo_gives_zoneinfos_labels_and_bounds():
    """periods.zone("UTC") is datetime's own UTC (zoneinfo's import cost every `labq budget` ~3 ms): the
    same labels and period bounds as ZoneInfo("UTC"), around year, quarter, month and week edges."""
    from datetime import datetime as dt, timezone

    from labq.scheduler.money import periods
    assert periods.zone("UTC") is periods.zone("") is timezone.utc
    for t in (dt(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp() + d for d in (-1e6, 0, 0.5, 1, 86400 * 3)):
        for period in ("week", "month", "quarter"):
            lab = dt.fromtimestamp(t, ZoneInfo("UTC"))
            want = {"week": lambda: "%d-W%02d" % lab.isocalendar()[:2], "month": lambda: f"{lab.year}-{lab.month:02d}",
                    "quarter": lambda: f"{lab.year}-Q{(lab.month - 1) // 3 + 1}"}[period]()
            assert periods.label(period, t, "UTC") == want
            start, end = periods.bounds(period, want, "UTC")
            assert start <= t < end
