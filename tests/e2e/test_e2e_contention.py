"""Policy under contention, on real processes (issue 14): a reclaim that cannot loop, checkpoint files
in the victim choice, safe mode that commits what can be billed, refusals against what is left, a
standby that leaves wake-ups to the leader, a clean exit that releases the lease, `stat --start` from
the scheduler's own snapshot."""
import json
import sys
import time

import pytest

from labq.scheduler.client import Client
from labq.scheduler.jobs import states
from labq.scheduler.store.keys import Keys
from tests.harness import E2E, E2E_CONFIG as CONFIG, E2E_MARKS, ROOT, two_labs, wait_for

pytestmark = E2E_MARKS

TWO_LABS = two_labs("""
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "10s"
[qos.normal]
priority = 100
grace = "2s"
max_preemptions = 2
""", guarantee=4, borrow_limit=2, slots=12)


def states_of(e, ids):
    return [e.job(i).state for i in ids]


@pytest.fixture
def labs():
    e = E2E(TWO_LABS)
    yield e
    e.close()


def test_a_reclaimed_gpu_goes_to_the_reclaimer_not_back_to_the_borrower(labs):
    e = labs
    a = [e.sub("-G", "1", "-t", "10m", "--", "sleep", "300", account="lab-a") for _ in range(6)]
    wait_for(lambda: states_of(e, a).count(states.RUNNING) == 6, 60, what="lab-a's six jobs to run")
    b = [e.sub("-G", "1", "-t", "10m", "--", "sleep", "300", account="lab-b") for _ in range(4)]
    # lab-b's four: two on the free GPUs, two reclaimed from lab-a's borrowed jobs (requeued)
    wait_for(lambda: states_of(e, b).count(states.RUNNING) == 4, 90, what="lab-b's guarantee")
    requeued = [i for i in a if e.job(i).state == states.PENDING]
    assert len(requeued) == 2
    extra = e.sub("-G", "1", "-t", "10m", "--", "sleep", "300", account="lab-b")
    wait_for(lambda: e.job(extra).reason != states.NONE, 30, what="the extra job to be planned")
    victim = next(i for i in a if e.job(i).state == states.RUNNING)
    assert e.labq("del", str(victim)).returncode == 0
    # The freed GPU: lab-b's extra job (fair share ranks it first) may borrow it, lab-a's requeued job
    # reclaims it, and then the room must go to lab-a, not back to the borrower.
    got = wait_for(lambda: [i for i in requeued if e.job(i).state == states.RUNNING], 60,
                   what="a requeued lab-a job to get its guarantee back")
    assert len(got) == 1
    x = e.job(extra)
    assert x.preempt_count <= 2 and len(x.attempts) <= 3, (x.preempt_count, len(x.attempts))
    # and it stays put: lab-a holds its guarantee while lab-b's extra job waits
    wait_for(lambda: e.job(extra).state == states.PENDING and e.job(extra).reason != states.PREEMPTING_FOR, 30,
             what="the extra job to settle")
    assert e.job(got[0]).state == states.RUNNING and e.job(extra).preempt_count <= 2
    e.labq("del", *map(str, a + b + [extra]))


CHECKPOINTS = """
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "10s"
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "1s"
min_runtime = "0s"
[worker]
name = "e2e-node"
gpus = 2
cpus = 8
mem = "16G"
slots = 4
spool = "{spool}"
run_as = "self"
"""


def test_a_checkpoint_file_counts_when_the_victim_is_chosen(tmp_path):
    e = E2E(CHECKPOINTS)
    try:
        go = tmp_path / "go"
        # v1 started first and checkpoints by file only (no `labq checkpoint`), late;
        # v2 started later and called `labq checkpoint` early.
        v1 = e.sub("-q", "low", "-G", "1", "-t", "10m", "--", "sh", "-c",
                   f'while [ ! -e {go} ]; do sleep 0.1; done; touch "$LABQ_CHECKPOINT_DIR/ck"; sleep 300')
        e.wait_state(v1, {states.RUNNING})
        v2 = e.sub("-q", "low", "-G", "1", "-t", "10m", "--", "sh", "-c",
                   f"cd {ROOT} && {sys.executable} -m labq.cli.main checkpoint; sleep 300")
        wait_for(lambda: e.job(v2).current and e.job(v2).current.last_checkpoint, 60, what="v2's labq checkpoint")
        wait_for(lambda: (e.job(v2).current.last_checkpoint or 0) < time.time() - 1, 10, what="a second to pass")
        go.touch()
        k = Keys(e.cfg.prefix)
        wait_for(lambda: e.client.store.r.hget(k.attempt(v1, 1), "ckpt"), 30, what="v1's heartbeat to report its file")
        hi = e.sub("-G", "1", "-t", "1m", "--", "true")
        e.wait_state(hi, states.TERMINAL, 60)
        # v1's file is newer than v2's `labq checkpoint`: preempting v1 loses less work (without the
        # file, v1 would seem to lose everything since its start, and v2 would be chosen)
        assert e.job(v1).preempt_count == 1 and e.job(v1).attempts[0].outcome == "preempted"
        assert e.job(v2).preempt_count == 0 and e.job(v2).state == states.RUNNING
        e.labq("del", str(v1), str(v2))
    finally:
        e.close()


@pytest.fixture
def e2e():
    e = E2E()
    yield e
    e.close()


def test_safe_mode_commits_the_kill_wait_a_job_that_ignores_sigterm_is_billed(e2e):
    jid = e2e.sub("-G", "1", "-t", "3s", "--", "sh", "-c", "trap '' TERM; sleep 60")
    commit = dict(e2e.wait_state(jid, {states.RUNNING}).commit)["eta-sweep"]
    done = e2e.wait_state(jid, states.TERMINAL, 60)
    assert done.state == states.TIMEOUT
    charged = dict(done.attempts[0].charges)["eta-sweep"]
    assert charged <= commit, f"charged {charged} against a commitment of {commit}"


BUDGET5 = CONFIG.replace("limit = 120.0\nreserve = 0.1", "limit = 5.0").replace(
    'users = ["{user}"]', 'users = ["{user}"]\nmax_gpus = 2')


def test_refusals_compare_with_what_is_left():
    e = E2E(BUDGET5)
    try:
        # It runs long enough to cost something: billed from its process's start to its end, `true`
        # (a millisecond at $2/h) can round to $0 on an idle machine (ci3: spent 0).
        first = e.sub("-G", "1", "-t", "1m", "--", "sleep", "0.2")
        assert e.wait_state(first, states.TERMINAL, 60).state == states.COMPLETED
        assert dict(e.client.read.spent())["eta-sweep"] > 0
        # $5.00 of a $5 budget that has spent a little: it can never be paid
        # (2:29:58 + kill_wait 2 s at $2/h: the whole $5, more than is left)
        p = e.labq("sub", "-A", "eta", "-G", "1", "-t", "2:29:58", "--", "true")
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        assert "budget eta-sweep" in p.stderr and "left" in p.stderr, p.stderr
        # what can be paid once running work settles pends BudgetReserved
        run = e.sub("-G", "1", "-t", "1:30:00", "--", "sleep", "300")
        e.wait_state(run, {states.RUNNING})
        later = e.sub("-G", "1", "-t", "1:00:00", "--", "true")
        wait_for(lambda: e.job(later).reason == states.BUDGET_RESERVED, 30, what="BudgetReserved")
        # over the account's max_gpus (on_limit = "pend"): it can never run
        p = e.labq("sub", "-A", "eta", "-G", "3", "--", "true")
        assert p.returncode == 3 and "max_gpus" in p.stderr, (p.returncode, p.stderr)
        e.labq("del", str(run), str(later))
    finally:
        e.close()


def test_a_standby_scheduler_leaves_wake_ups_to_the_leader(e2e):
    k = Keys(e2e.cfg.prefix)
    me = wait_for(lambda: e2e.client.store.r.get(k.leader), 30, what="a leader")
    e2e.stack.start("standby", "scheduler")
    log = e2e.log.name
    wait_for(lambda: open(log).read().count("starting (tick") >= 2, 60, what="the standby to start")
    # Each new user's first request names its inbox only in its wake-up: a standby that pops it
    # leaves the leader deaf to that user until the client retries.
    for i in range(6):
        c = Client(e2e.cfg, url=e2e.stack.url, user=f"newcomer{i}")
        reply = c.request("cancel", {"ids": ["999999"]}, timeout=15, tries=1)
        assert "results" in reply or reply.get("ok") is not None, reply
    assert e2e.client.store.r.get(k.leader) == me
    e2e.stack.stop("standby")


def test_a_leader_that_exits_cleanly_releases_its_lease(e2e):
    k = Keys(e2e.cfg.prefix)
    wait_for(lambda: e2e.client.store.r.get(k.leader), 30, what="a leader")
    assert e2e.stack.stop("scheduler") == 0
    assert e2e.client.store.r.get(k.leader) is None
    e2e.stack.start("scheduler", "scheduler")
    jid = e2e.sub("--", "true")
    assert e2e.wait_state(jid, states.TERMINAL, 60).state == states.COMPLETED


def test_stat_start_uses_the_schedulers_snapshot(e2e):
    run = e2e.sub("-G", "4", "-t", "10m", "--", "sleep", "300")
    e2e.wait_state(run, {states.RUNNING})
    dep = e2e.sub("--", "true")
    assert e2e.wait_state(dep, states.TERMINAL, 60).state == states.COMPLETED
    later = e2e.sub("--begin", "now+30m", "--", "true")
    after = e2e.sub("-d", f"afterok:{dep}", "-G", "1", "-t", "5m", "--", "true")
    wait_for(lambda: e2e.job(later).reason == states.BEGIN_TIME and e2e.job(after).reason != states.NONE, 30,
             what="the pending jobs to be planned")
    p = e2e.labq("stat", "--start", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["job_id"]: r for r in json.loads(p.stdout)}
    begin = e2e.job(later).begin
    assert rows[later]["expected_start"] is not None and abs(rows[later]["expected_start"] - begin) < 2
    started = e2e.job(run).attempts[0]
    # its dependency ended (COMPLETED): it waits for the GPUs the running job holds until its limit
    assert rows[after]["expected_start"] is not None
    assert abs(rows[after]["expected_start"] - (started.start_time + 600 + 2)) < 3
    e2e.labq("del", str(run), str(later), str(after))


ORDERLY_STOP = """
[scheduler]
tick = 0.2
kill_wait = "1s"
node_lease = "10s"
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "1s"
min_runtime = "0s"
max_preemptions = 1
[accounts.eta]
users = ["{user}"]
[worker]
name = "e2e-node"
gpus = 1
cpus = 8
mem = "16G"
slots = 4
spool = "{spool}"
run_as = "self"
"""


def test_an_agents_orderly_stop_is_not_a_preemption():
    """The soak's job preempted 4 times with max_preemptions = 2: its runners took the agent's death
    for its orderly stop (fixed in ddfd265) and every orderly stop counted toward max_preemptions.
    A stop (systemctl restart of the agent) requeues the job as `preempted`, but only the scheduler's
    own preemptions count: here the job keeps its one preemption for the higher QoS."""
    e = E2E(ORDERLY_STOP)
    try:
        low = e.sub("-q", "low", "-G", "1", "-t", "10m", "--", "sleep", "300")
        wait_for(lambda: (j := e.job(low)).current and j.current.start_time, 60, what="the low job to start")
        assert e.stack.stop("worker") == 0
        j = e.wait_state(low, {states.PENDING}, 60)
        assert j.attempts[0].outcome == "preempted", j.attempts
        assert j.preempt_count == 0, f"the agent's stop counted as a preemption ({j.preempt_count})"
        e.stack.start("worker", "worker")
        e.wait_up()
        # (The scheduler may place it again on the stopping node before the agent gives its lease up:
        # that attempt is never claimed and ends `node_failure`, which is not a preemption either.)
        j = wait_for(lambda: (j := e.job(low)).state == states.RUNNING and j.current.start_time and j, 90,
                     what="the low job to run again")
        assert j.preempt_count == 0, j.attempts
        hi = e.sub("-G", "1", "-t", "1m", "--", "true")
        assert e.wait_state(hi, states.TERMINAL, 90).state == states.COMPLETED
        j = e.job(low)
        # two attempts ended `preempted` (the stop, the higher QoS); one of them counts
        outcomes = [a.outcome for a in j.attempts]
        assert j.preempt_count == 1 and outcomes.count("preempted") == 2, (j.preempt_count, outcomes)
        e.labq("del", str(low))
    finally:
        e.close()
