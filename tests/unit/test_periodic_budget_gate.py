"""The budget gate of a periodic budget holds each period only its share of a long job: three
month-long jobs no longer strand a weekly budget (issue: 9.4 % utilisation in a weekly replay)."""
from labq.scheduler import policy
from labq.scheduler.jobs import states
from tests.harness import MONDAY_W49, WEEKLY_TOML, ClusterBuilder, cfg

WEEK = 7 * 86400
WEEKLY, MONDAY = WEEKLY_TOML, MONDAY_W49


def _month_long_running(b: ClusterBuilder, node: str, started_ago: float):
    # 8 GPUs × $2/h × 30 days = $11,520 committed in all; $2,688 of it in any whole week.
    return b.running(node, gpus=8, account="lab", started_ago=started_ago, time_limit=30 * 86400,
                     commit=(("lab", 11_520_000_000),), rates=(("lab", 16_000_000),))


def test_the_reason_names_the_period_that_has_no_room():
    b = ClusterBuilder(now=MONDAY + 3600).node("n1", gpus=8).node("n2", gpus=8)
    _month_long_running(b, "n1", started_ago=3600)
    # This week the running job holds $16/h × 168 h = $2,688, over the $1,000 weekly cap by itself:
    # a new job waits (BudgetReserved: it would fit once that settles), and the reason names the week.
    b.job(gpus=1, time_limit=3600, account="lab")
    plan = policy.plan(b.build(), cfg(WEEKLY))
    assert {p.job_id for p in plan.pending} == {2}
    assert plan.pending[0].reason == states.BUDGET_RESERVED and "in 2026-W49" in plan.pending[0].detail


def test_a_job_whose_time_limit_spans_weeks_is_judged_per_week():
    text = WEEKLY.replace("limit = 1000.0", "limit = 4000.0")
    b = ClusterBuilder(now=MONDAY + 6 * 86400 + 23 * 3600).node("n1", gpus=8).node("n2", gpus=8)
    _month_long_running(b, "n1", started_ago=60)
    # A second month-long job starting an hour before the week ends: this week holds 1 h of each
    # ($32), next week 168 h of each ($5,376 > $4,000): it pends BudgetReserved on next week.
    b.job(gpus=8, time_limit=30 * 86400, account="lab")
    plan = policy.plan(b.build(), cfg(text))
    assert plan.pending[0].reason == states.BUDGET_RESERVED and "in 2026-W50" in plan.pending[0].detail
    # One that ends within next week's means fits: 8 GPUs × 40 h = $640 + $2,688 held = $3,328 ≤ $4,000.
    b2 = ClusterBuilder(now=MONDAY + 6 * 86400 + 23 * 3600).node("n1", gpus=8).node("n2", gpus=8)
    _month_long_running(b2, "n1", started_ago=60)
    b2.job(gpus=8, time_limit=40 * 3600, account="lab")
    assert [p.job_id for p in policy.plan(b2.build(), cfg(text)).places] == [2]


def test_the_old_rule_would_have_stranded_the_cluster():
    """Three month-long jobs with $11,520 commitments each: against the whole forecast no new job
    could start in any week of a $4,000 budget; per week they hold 3 × $2,688 — over the cap here
    too — so the fourth waits, but a weekly cap of $9,000 now admits short work beside them."""
    text = WEEKLY.replace("limit = 1000.0", "limit = 9000.0")
    b = ClusterBuilder(now=MONDAY + 60).node("n1", gpus=8).node("n2", gpus=8).node("n3", gpus=8).node("n4", gpus=8)
    for n in ("n1", "n2", "n3"):
        _month_long_running(b, n, started_ago=60)
    b.job(gpus=8, time_limit=24 * 3600, account="lab")        # $384
    assert [p.job_id for p in policy.plan(b.build(), cfg(text)).places] == [4]


def test_refused_at_submit_only_when_some_period_can_never_pay():
    c = cfg(WEEKLY)
    never = ClusterBuilder().node("n1", gpus=8).job(gpus=8, time_limit=30 * 86400, account="lab").build().jobs[0]
    # $16/h over a whole week is $2,688 > the $1,000 weekly cap, wherever it starts.
    from labq.scheduler.policy.budget import never_affordable
    assert "in one week" in never_affordable(never, "fake", c)
    ok = ClusterBuilder().node("n1", gpus=1).job(gpus=1, time_limit=30 * 86400, account="lab").build().jobs[0]
    # $2/h × 30 days = $1,440 in all, but at most $334 in any week: accepted (the old rule refused it).
    assert never_affordable(ok, "fake", c) is None


def test_a_request_affordable_at_any_length_is_never_refused_whatever_its_limit():
    """The replay asks `affordable_at_any_length` once per request and skips `never_affordable` for
    its jobs: where it says so, no time limit or estimate makes never_affordable refuse one."""
    from dataclasses import replace

    from labq.scheduler.policy.budget import affordable_at_any_length, never_affordable
    c = cfg(WEEKLY)
    one = ClusterBuilder().node("n1", gpus=8).job(gpus=1, time_limit=60, account="lab").build().jobs[0]
    eight = replace(one, gpus=8)
    assert affordable_at_any_length(one, "fake", c)           # $2/h × a week = $334 ≤ $1,000
    assert not affordable_at_any_length(eight, "fake", c)     # $16/h × a week = $2,688
    for limit in (60, 3600, 86400, 7 * 86400, 365 * 86400):
        assert never_affordable(replace(one, time_limit=limit, est=limit / 2), "fake", c) is None
    assert never_affordable(replace(eight, time_limit=86400), "fake", c) is None    # a day fits: $384
    once = cfg(WEEKLY.replace('period = "week"', 'period = "none"'))
    assert not affordable_at_any_length(one, "fake", once)    # without periods the limit never renews
    assert never_affordable(replace(one, time_limit=30 * 86400), "fake", once) is not None
