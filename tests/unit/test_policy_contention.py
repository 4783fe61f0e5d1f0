"""Issue 14, pure: reclaim bounded by max_preemptions, earmarked room, no unreclaimable borrowing,
borrowers that leave guaranteed work alone, safe-mode commitments, refusals against what is left,
expected starts of --begin jobs."""
from dataclasses import replace

from labq.scheduler import policy
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job
from labq.scheduler.money import pricing
from labq.scheduler.policy.refusal import refusal
from tests.harness import ClusterBuilder, cfg

LABS = """
[qos.normal]
priority = 100
grace = "5s"
max_preemptions = 2
[accounts.lab-a]
guarantee = 2
borrow_limit = 2
[accounts.lab-b]
guarantee = 2
borrow_limit = 2
"""


def lab_b_borrowing(preempt_count=0):
    """4 GPUs: lab-b runs 3 (one borrowed), lab-a runs 1 and wants one more within its guarantee."""
    b = ClusterBuilder().node("n", gpus=4)
    b.running("n", gpus=1, account="lab-b", jid=1).running("n", gpus=1, account="lab-b", jid=2)
    b.running("n", gpus=1, account="lab-b", jid=3, borrowed=True, preempt_count=preempt_count)
    b.running("n", gpus=1, account="lab-a", jid=4)
    b.job(gpus=1, account="lab-a", jid=5)
    return b


def test_reclaim_stops_at_max_preemptions():
    c = cfg(LABS)
    p = policy.plan(lab_b_borrowing().build(), c)
    assert [(x.job_id, x.for_job) for x in p.preempts] == [(3, 5)]
    mine = next(x for x in p.pending if x.job_id == 5)
    assert mine.reason == states.PREEMPTING_FOR and mine.earmark == "n" and mine.earmark_gpus == ("GPU-n-2",)
    p = policy.plan(lab_b_borrowing(preempt_count=2).build(), c)
    assert p.preempts == () and next(x for x in p.pending if x.job_id == 5).reason == states.RESOURCES


def test_the_room_a_reclaim_frees_is_kept_for_the_reclaimer():
    c = cfg(LABS)
    b = ClusterBuilder().node("n", gpus=4)
    b.running("n", gpus=1, account="lab-b", jid=1).running("n", gpus=1, account="lab-b", jid=2)
    b.running("n", gpus=1, account="lab-a", jid=4)
    # the victim has stopped and is pending again, and (fair share) ranks above the reclaimer
    b.job(gpus=1, account="lab-b", jid=3, preempt_count=1)
    b.job(gpus=1, account="lab-a", jid=5, earmark="n", earmark_gpus=("GPU-n-3",), reason=states.PREEMPTING_FOR)
    snap = replace(b.build(), usage=(("lab-a", 1e9), ("lab-b", 0.0)))
    p = policy.plan(snap, c)
    assert [(x.job_id, x.gpus) for x in p.places] == [(5, ("GPU-n-3",))]
    assert next(x for x in p.pending if x.job_id == 3).earmark == ""
    # without the earmark the borrower takes it back (the loop of issue 14)
    loose = replace(snap, jobs=tuple(replace(j, earmark="", earmark_gpus=()) for j in snap.jobs))
    assert [x.job_id for x in policy.plan(loose, c).places] == [3]


def test_a_job_out_of_preemptions_borrows_only_unguaranteed_gpus():
    text = LABS + "[accounts.lab-c]\n"
    b = ClusterBuilder().node("n", gpus=5)     # guarantees 2 + 2: one GPU nobody is owed
    b.job(gpus=1, account="lab-c", jid=1, preempt_count=2).job(gpus=1, account="lab-c", jid=2, preempt_count=2)
    p = policy.plan(b.build(), cfg(text))
    assert [x.job_id for x in p.places] == [1]
    assert next(x for x in p.pending if x.job_id == 2).reason == states.ACCOUNT_GPU_LIMIT


def test_a_borrower_never_preempts_work_within_its_lenders_guarantee():
    text = LABS + """[qos.low]
priority = 0
preemptible = true
min_runtime = "0s"
[accounts.lab-c]
"""
    b = ClusterBuilder().node("n", gpus=2)
    b.running("n", gpus=1, account="lab-a", qos="low", jid=1)
    b.running("n", gpus=1, account="lab-c", qos="low", jid=2, borrowed=True)
    b.job(gpus=2, account="lab-c", jid=3)
    assert policy.plan(b.build(), cfg(text)).preempts == ()
    b.job(gpus=1, account="lab-c", jid=4)
    assert [x.job_id for x in policy.plan(b.build(), cfg(text)).preempts] == [2]


def test_safe_mode_commits_the_kill_wait_and_never_bills_above_the_commitment():
    c = cfg('[scheduler]\nkill_wait = "30s"\n[rates]\ngpu_hour = 3600.0\n[accounts.x]\n'
            '[[budgets]]\nname = "x"\naccount = "x"\nlimit = 1000.0\n')
    b = ClusterBuilder().node("n", gpus=1)
    b.job(gpus=1, account="x", time_limit=60)
    place = policy.plan(b.build(), c).places[0]
    assert place.commit == (("x", 90_000_000),)          # (60 s + 30 s) × $1 a second
    j = tr.admit(b.jobs[0], place, 1000.0)
    _, [charge] = tr.finished(j, 1, {"outcome": "timeout", "start_time": 1000.0, "end_time": 1095.0}, 1095.0, c)
    assert charge.amount == 90_000_000                    # 95 s ran; what was committed is the most billed


def test_a_budget_without_periods_refuses_what_is_left_cannot_pay():
    c = cfg('[scheduler]\nkill_wait = "0s"\n[rates]\ngpu_hour = 2.0\n[accounts.x]\n'
            '[[budgets]]\nname = "x"\naccount = "x"\nlimit = 5.0\n')
    nodes = ClusterBuilder().node("n", gpus=1).build().nodes
    job = Job(id=1, user="u", account="x", argv=("x",), gpus=1, time_limit=9000)   # $5.00
    assert refusal(job, nodes, c) is None
    msg = refusal(job, nodes, c, {"x": 600})
    assert msg.startswith("budget x: job would cost $5.00, only $5.00 is left") or "only $4.99" in msg, msg
    assert refusal(replace(job, time_limit=8000), nodes, c, {"x": 600}) is None
    weekly = cfg('[scheduler]\nkill_wait = "0s"\n[rates]\ngpu_hour = 2.0\n[accounts.x]\n'
                 '[[budgets]]\nname = "x"\naccount = "x"\nlimit = 5.0\nperiod = "week"\n')
    assert refusal(job, nodes, weekly, {"x": 600}) is None     # next week can pay it


def test_expected_start_of_a_begin_job_is_its_begin_or_later():
    b = ClusterBuilder().node("n", gpus=1)
    b.running("n", gpus=1, started_ago=0, time_limit=600)
    b.job(gpus=1, jid=10, begin=b.now + 60, time_limit=600)
    b.job(gpus=1, jid=11, begin=b.now + 3600)
    starts = policy.expected_starts(b.build(), cfg('[scheduler]\nkill_wait = "5s"\n'))
    assert starts[10] == b.now + 605 and starts[11] == b.now + 3600
    assert pricing.planned_seconds(b.jobs[1], cfg()) == 600 + 30
