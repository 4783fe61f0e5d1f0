"""Budgets in the daemon, on fakeredis and on the real redis-server fixture, with an injected clock:
alerts fire exactly once (also across a scheduler restart), each on_exhaust acts within one tick,
overrides admit a job held by budget and expire, `budget set` never kills running jobs, and a
monthly budget rolls over at midnight in its time zone."""
import json
from datetime import datetime, timezone

import pytest

from labq.scheduler.client import Client
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.money.ledger import verify
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.reads import Reader
from tests.harness import FROZEN, K, job, push, reply, woke

T0 = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc).timestamp()


# $36 per GPU-hour = $0.01 per GPU-second: a $1 budget lasts 100 GPU-seconds.
FAST = """
[scheduler]
budget_mode = "forecast"
[rates]
gpu_hour = 36.0
forecast_margin = 0.2
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "30s"
min_runtime = "0s"
rate_factor = 0.5
[accounts.eta]
users = ["alice"]
[security]
admins = ["root"]
[[budgets]]
name = "b"
account = "eta"
limit = 1.0
warn = [0.7, 0.9]
on_exhaust = "{on_exhaust}"
"""

BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "mem": 1 << 30,
        "time_limit": 3600, "est": 10, "account": "eta"}


def request(r, user, op, body, rid):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps(body)})
    r.lpush(K.wake, f"user:{user}")


def start(r, raw, cfg, now, gpus=8, me="s1"):
    AgentStore(r, K).register("n1", 64, 256 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(gpus)], "h", 1,
                              10 ** 9)
    s = Scheduler(r, cfg, me=me, clock=FROZEN)
    s.tick(now)
    return s


def alerts_of(r):
    return [f for _, f in r.xrange(K.alerts)]


def test_each_alert_fires_exactly_once_also_across_restarts(conns):
    r, raw = conns
    s = start(r, raw, config.loads(FAST.format(on_exhaust="hold")), T0)
    request(r, "alice", "submit", BODY, "a")
    s.tick(T0, woke(r))
    assert job(r, 1).state == states.RUNNING            # forecast: $0.01/s × 10 s × 1.2 = $0.12 committed
    for t in (60, 69):
        s.tick(T0 + t)
    assert alerts_of(r) == []
    s.tick(T0 + 70)                                      # $0.70 accrued: 70 %
    s.tick(T0 + 71)
    assert [a["kind"] for a in alerts_of(r)] == ["warn"]
    # The scheduler dies; the next leader reads the fired set back and raises nothing twice.
    r.delete(K.leader)
    s = Scheduler(r, s.books.base, me="s2", clock=FROZEN)
    s.tick(T0 + 80)
    assert len(alerts_of(r)) == 1
    s.tick(T0 + 95)
    s.tick(T0 + 101)
    s.tick(T0 + 150)
    got = alerts_of(r)
    assert [(a["kind"], json.loads(a["data"]).get("threshold")) for a in got] == [
        ("warn", 0.7), ("warn", 0.9), ("exhausted", None)]
    assert got[2]["level"] == "critical" and "exhausted" in got[2]["message"]
    assert r.smembers(K.alerts_fired) == {"b||warn:0.7", "b||warn:0.9", "b||exhausted"}
    # hold: the running job is left alone, nothing new starts.
    assert job(r, 1).state == states.RUNNING and not r.exists(K.control(1))
    request(r, "alice", "submit", BODY, "b")
    s.tick(T0 + 151, woke(r))
    assert job(r, 2).state == states.PENDING and job(r, 2).reason in (states.BUDGET_EXHAUSTED, states.BUDGET_RESERVED)


@pytest.mark.parametrize("on_exhaust", ["preempt", "cancel"])
def test_exhaustion_stops_running_jobs_within_one_tick(conns, on_exhaust):
    r, raw = conns
    s = start(r, raw, config.loads(FAST.format(on_exhaust=on_exhaust)), T0)
    request(r, "alice", "submit", {**BODY, "qos": "low"}, "low")     # $0.005/s (rate_factor 0.5), preemptible
    request(r, "alice", "submit", BODY, "normal")                    # $0.01/s, not preemptible
    s.tick(T0, woke(r))
    assert [job(r, i).state for i in (1, 2)] == [states.RUNNING] * 2
    # $0.015/s together: the limit of $1 is reached at T0 + 66.7 s; the scheduler looks one tick ahead.
    s.tick(T0 + 64)
    assert not r.exists(K.control(1)) and not r.exists(K.control(2))
    s.tick(T0 + 66)
    if on_exhaust == "preempt":
        assert r.get(K.control(1)) == "preempt:30" and job(r, 1).state == states.PREEMPTING
        assert not r.exists(K.control(2)) and job(r, 2).state == states.RUNNING   # not preemptible: finishes
    else:
        assert r.get(K.control(1)) == r.get(K.control(2)) == "cancel"
        assert job(r, 1).cancel_requested and job(r, 2).cancel_requested
    s.tick(T0 + 67)       # nothing is sent twice
    assert [a["kind"] for a in alerts_of(r)].count("exhausted") <= 1
    # The runner ends the attempt after the grace (preempt) or kill_wait (cancel).
    end = T0 + 66 + (30 if on_exhaust == "preempt" else 30)
    outcome = "preempted" if on_exhaust == "preempt" else "cancelled"
    AgentStore(r, K).post("finished", 1, 1, "n1", {"outcome": outcome, "start_time": T0, "end_time": end})
    s.tick(end + 1)
    j1 = job(r, 1)
    if on_exhaust == "preempt":
        assert j1.state == states.PENDING and j1.reason in (states.BUDGET_EXHAUSTED, states.BUDGET_RESERVED)
        assert j1.restart_count == 1 and len(j1.attempts) == 1      # requeued, and not started again
    else:
        assert j1.state == states.CANCELLED
    # Overshoot of the preempted attempt: what it cost after the stop, bounded by grace × its rate.
    assert j1.attempts[0].charges[0][1] <= 5_000 * (66 + 30) + 1


def test_budget_set_lowers_the_limit_but_never_kills_running_jobs(conns):
    r, raw = conns
    cfg = config.loads(FAST.format(on_exhaust="cancel").replace('budget_mode = "forecast"', 'budget_mode = "safe"')
                       .replace("limit = 1.0", "limit = 100.0"))
    s = start(r, raw, cfg, T0)
    request(r, "alice", "submit", BODY, "a")              # safe: commits $36 (the hour's limit)
    s.tick(T0, woke(r))
    request(r, "alice", "budget_set", {"budget": "b", "limit": 10}, "no")
    request(r, "root", "budget_set", {"budget": "b", "limit": 10}, "yes")
    s.tick(T0 + 1, woke(r))
    assert reply(r, "no")["code"] == 3 and "only admins" in reply(r, "no")["error"]
    assert reply(r, "yes") == {"ok": True, "budget": "b", "limit": 10.0, "prev": 100.0, "unit": "usd"}
    s.tick(T0 + 2)
    assert "forecast" in [a["kind"] for a in alerts_of(r)]          # $36 committed > $10
    s.tick(T0 + 1200)                                                # $12 spent > $10: exhausted
    assert "exhausted" in [a["kind"] for a in alerts_of(r)]
    assert job(r, 1).state == states.RUNNING and not r.exists(K.control(1)) and not job(r, 1).cancel_requested
    request(r, "alice", "submit", {**BODY, "time_limit": 60}, "b")
    s.tick(T0 + 1201, woke(r))
    assert job(r, 2).state == states.PENDING
    entries = [f for f in Reader(r, K).ledger_all() if f["type"] == "limit"]
    assert len(entries) == 1 and entries[0]["amount"] == "10000000" and entries[0]["prev"] == "100000000"
    assert Client(cfg, r=r, user="alice").budgets(T0)[0].limit == 10_000_000


SAFE = """
[scheduler]
kill_wait = "0s"     # the amounts below are rate × time limit (safe mode adds kill_wait)
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["alice"]
[security]
admins = ["root"]
[[budgets]]
name = "eta-sweep"
account = "eta"
limit = 120.0
reserve = 0.1
"""


def test_an_override_admits_a_job_held_by_budget_and_expires(conns):
    r, raw = conns
    cfg = config.loads(SAFE)
    s = start(r, raw, cfg, T0)
    big = {**BODY, "gpus": 4, "time_limit": 12 * 3600}            # $96 committed of the $108 cap
    request(r, "alice", "submit", big, "a")
    request(r, "alice", "submit", {**big, "gpus": 1}, "b")       # $24 more: over the cap
    s.tick(T0, woke(r))
    assert job(r, 1).state == states.RUNNING
    assert job(r, 2).state == states.PENDING and job(r, 2).reason == states.BUDGET_RESERVED
    over = {"budget": "eta-sweep", "amount": 20, "approver": "pi-carol", "expires": 3600, "reason": "deadline"}
    request(r, "alice", "budget_override", over, "o-no")
    request(r, "root", "budget_override", over, "o-yes")
    s.tick(T0 + 10, woke(r))
    assert reply(r, "o-no")["code"] == 3
    o = reply(r, "o-yes")["override"]
    assert o["id"] == 1 and o["expires"] == T0 + 10 + 3600 and o["approver"] == "pi-carol"
    assert job(r, 2).state == states.RUNNING                      # cap $108 + $20 = $128 ≥ $120
    c = Client(cfg, r=r, user="alice")
    assert c.balances(T0 + 11)[0].overrides == 20_000_000
    s.tick(T0 + 3611)                                             # expired
    kinds = [f["type"] for f in Reader(r, K).ledger_all()]
    assert kinds == ["override", "override_expired"]
    assert [a["kind"] for a in alerts_of(r)] == ["override", "override_expired"]
    assert job(r, 2).state == states.RUNNING                      # expiry never stops what it admitted
    assert c.balances(T0 + 3612)[0].overrides == 0 and Reader(r, K).overrides()[0].state == "expired"
    request(r, "alice", "submit", {**BODY, "gpus": 1, "time_limit": 3600}, "c")
    s.tick(T0 + 3613, woke(r))
    assert job(r, 3).state == states.PENDING
    # A second override, revoked at once; revoking twice is an error.
    request(r, "root", "budget_override", {**over, "amount": 50}, "o2")
    s.tick(T0 + 3614, woke(r))
    assert job(r, 3).state == states.RUNNING
    request(r, "root", "budget_revoke", {"id": 2}, "rv")
    request(r, "root", "budget_revoke", {"id": 2}, "rv2")
    s.tick(T0 + 3615, woke(r))
    assert reply(r, "rv")["ok"] and reply(r, "rv2")["code"] == 2 and "already revoked" in reply(r, "rv2")["error"]
    kinds = [f["type"] for f in Reader(r, K).ledger_all()]
    assert kinds == ["override", "override_expired", "override", "override_revoked"]
    assert verify(Reader(r, K).ledger_all(), Reader(r, K).spent(), Reader(r, K).ledger_keys()) == []


MONTHLY = """
[scheduler]
kill_wait = "0s"     # the amounts below are rate × time limit (safe mode adds kill_wait)
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["alice"]
[[budgets]]
name = "m"
account = "eta"
limit = 10.0
period = "month"
timezone = "Europe/Berlin"
warn = [0.5]
"""


def test_monthly_rollover_at_midnight_in_the_budget_time_zone(conns):
    r, raw = conns
    cfg = config.loads(MONTHLY)
    # 2026-11-30 22:00 UTC is 23:00 in Berlin: still November there.
    s = start(r, raw, cfg, T0)
    request(r, "alice", "submit", {**BODY, "gpus": 2, "time_limit": 2 * 3600}, "a")   # $8 committed
    s.tick(T0, woke(r))
    AgentStore(r, K).post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "start_time": T0,
                                                   "end_time": T0 + 1800})
    s.tick(T0 + 1800)                                     # $2 spent in November (23:30 Berlin)
    assert r.hgetall(K.spent()) == {"m@2026-11": "2000000"}
    request(r, "alice", "submit", {**BODY, "gpus": 2, "time_limit": 3 * 3600}, "b")   # $12 > $10 - $2: never fits
    s.tick(T0 + 1801, woke(r))
    assert reply(r, "b")["code"] == 3
    request(r, "alice", "submit", {**BODY, "gpus": 2, "time_limit": 2 * 3600}, "c")   # $8 committed; $2 + $8 fits
    s.tick(T0 + 1802, woke(r))
    assert job(r, 2).state == states.RUNNING
    AgentStore(r, K).post("started", 2, 1, "n1", {"pid": 7, "start_time": T0 + 1802})
    s.tick(T0 + 1803, woke(r))
    # Midnight in Berlin is 23:00 UTC: November closes with job 2's 1,798 s in it booked ($4/h:
    # $1.997777), and December starts from zero spent, holding only the rest of job 2's commitment.
    s.tick(T0 + 3600 + 5)
    nov_part = 4_000_000 * 1_798_000 // 3_600_000
    periods = [f for f in Reader(r, K).ledger_all() if f["type"] == "period"]
    assert [(p["period"], p["prev"], p["closed"]) for p in periods] == [
        ("2026-11", "", "0"), ("2026-12", "2026-11", str(2_000_000 + nov_part))]
    assert r.hgetall(K.spent()) == {"m@2026-11": str(2_000_000 + nov_part)}
    c = Client(cfg, r=r, user="alice")
    dec = c.balances(T0 + 3605)[0]
    assert dec.period == "2026-12" and dec.spent == 0
    assert dec.committed + dec.accrued == 4_000_000 * 5_402_000 // 3_600_000, "December holds its part only (5,402 s)"
    AgentStore(r, K).post("finished", 2, 1, "n1", {"outcome": "completed", "exit_code": 0, "start_time": T0 + 1802,
                                                   "end_time": T0 + 1802 + 3600})
    s.tick(T0 + 1802 + 3601)                              # its hour: $4, split at midnight
    assert r.hgetall(K.spent()) == {"m@2026-11": str(2_000_000 + nov_part), "m@2026-12": str(4_000_000 - nov_part)}
    assert job(r, 2).attempts[0].charges == (("m", 4_000_000),), "the attempt's own record keeps its total"
    nov = c.balances(T0 + 9999, period="2026-11")[0]
    assert (nov.period, nov.spent, nov.committed, nov.accrued) == ("2026-11", 2_000_000 + nov_part, 0, 0)
    # Each period has its own warn alert (50 % = $5 is not reached in either): none fired.
    assert alerts_of(r) == []
    assert verify(Reader(r, K).ledger_all(), Reader(r, K).spent(), Reader(r, K).ledger_keys(),
                  Reader(r, K).ended()) == []


def test_agent_alert_events_are_recorded_once_and_delivered(conns, tmp_path):
    r, raw = conns
    out = tmp_path / "hook.txt"
    cfg = config.loads(SAFE + f'[alerts]\ncommand = "echo $LABQ_ALERT_KIND $LABQ_ALERT_SCOPE >> {out}"\n')
    s = start(r, raw, cfg, T0)
    agent = AgentStore(r, K)
    agent.post("alert", 0, 0, "n1", {"kind": "idle_gpu", "scope": "node:n1", "level": "warn",
                                     "message": "GPU-0 idle for 10m", "data": {"gpu": "GPU-0"}})
    r.xadd(K.events, {"kind": "alert", "job": "0", "attempt": "0", "node": "n1", "body": "{not json"})
    s.tick(T0 + 1)
    s.hooks.join()
    got = alerts_of(r)
    assert len(got) == 1 and got[0]["kind"] == "idle_gpu" and json.loads(got[0]["data"])["gpu"] == "GPU-0"
    assert out.read_text() == "idle_gpu node:n1\n"
    assert r.xpending(K.events, "scheduler")["pending"] == 0      # both acknowledged, the bad one dropped


# $120 per GPU-hour and a $10 budget; each job commits (210 s + kill_wait 30 s) × $1/30 a second = $8.
SCENARIO = """
[rates]
gpu_hour = 120.0
[accounts.eta]
users = ["alice"]
[[budgets]]
name = "b"
account = "eta"
limit = 10.0
"""


def test_the_second_job_starts_the_instant_the_first_settles(conns):
    """Issue 35: the first ran 60 s and was charged from dispatch ($2.0013 with the start latency),
    so the second waited BudgetExhausted with "needs $8.00 ... available $8.00" all period."""
    r, raw = conns
    s = start(r, raw, config.loads(SCENARIO), T0)
    for rid in ("a", "b"):
        request(r, "alice", "submit", {**BODY, "time_limit": 210, "est": None}, rid)
    s.tick(T0, woke(r))
    assert job(r, 1).state == states.RUNNING and job(r, 1).commit == (("b", 8_000_000),)
    assert job(r, 2).state == states.PENDING and job(r, 2).reason in (states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED)
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"pid": 42, "start_time": T0 + 0.04})       # the node's start latency
    s.tick(T0 + 1, woke(r))
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "start_time": T0 + 0.04,
                                        "end_time": T0 + 60.04})
    s.tick(T0 + 61, woke(r))                                   # the tick that settles job 1 starts job 2
    assert job(r, 1).attempts[0].charges == (("b", 2_000_000),)
    assert r.hgetall(K.spent()) == {"b": "2000000"}
    assert job(r, 2).state == states.RUNNING, job(r, 2).detail
    assert verify(Reader(r, K).ledger_all(), Reader(r, K).spent(), Reader(r, K).ledger_keys(), [job(r, 1)]) == []


@pytest.mark.parametrize("room", ["override", "limit"])
def test_hold_until_budget_waits_for_room_instead_of_a_refusal(conns, room):
    """Issue 35: --hold-until-budget (SLURM's DenyOnLimit off): a job the budget could never pay
    today is taken PD BudgetExhausted and starts when an override or a raised limit makes room;
    without the flag the refusal stays."""
    r, raw = conns
    s = start(r, raw, config.loads(SCENARIO + '[security]\nadmins = ["root"]\n'), T0)
    big = {**BODY, "time_limit": 330, "est": None}                 # (330 s + 30 s) × $1/30 a second = $12
    request(r, "alice", "submit", big, "no")
    request(r, "alice", "submit", {**big, "hold_until_budget": True}, "yes")
    request(r, "alice", "submit", {**big, "hold_until_budget": "yes"}, "bad")
    s.tick(T0, woke(r))
    assert reply(r, "no")["code"] == 3 and "would cost $12.00" in reply(r, "no")["error"]
    assert reply(r, "bad")["code"] == 2 and "hold_until_budget: expected true or false" in reply(r, "bad")["error"]
    got = reply(r, "yes")
    assert got["ok"] and "would cost $12.00" in got["budget_hold"]
    jid = got["job_id"]
    s.tick(T0 + 60)
    j = job(r, jid)
    assert j.state == states.PENDING and j.reason == states.BUDGET_EXHAUSTED and "needs $12.00" in j.detail
    if room == "override":
        request(r, "root", "budget_override", {"budget": "b", "amount": 2, "approver": "pi", "expires": 3600,
                                               "reason": "the deadline"}, "room")
    else:
        request(r, "root", "budget_set", {"budget": "b", "limit": 12}, "room")
    s.tick(T0 + 61, woke(r))
    assert reply(r, "room")["ok"]
    assert job(r, jid).state == states.RUNNING and job(r, jid).commit == (("b", 12_000_000),)
