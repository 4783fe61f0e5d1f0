"""End to end on real processes: a checkpointing low-QoS job preempted by a normal one and resumed from
its checkpoint; borrow and reclaim between two accounts; `labq prio` and `labq stat --start`."""
import json
import sys

import pytest

from labq.cli.embedded import ROOT
from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_MARKS, wait_for

pytestmark = E2E_MARKS  # the e2e/redis marks and the skip without redis-server

POLICY = """
[scheduler]
tick = 0.2
kill_wait = "5s"
node_lease = "10s"
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "20s"
min_runtime = "0s"
[accounts.eta]
users = ["{user}"]
guarantee = 1
[accounts.zeta]
users = []
guarantee = 1
[worker]
name = "e2e-node"
gpus = 2
cpus = 8
mem = "16G"
slots = 4
spool = "{spool}"
run_as = "self"
"""
TRAIN = [sys.executable, f"{ROOT}/examples/train.py"]


@pytest.fixture
def e2e():
    e = E2E(POLICY)
    yield e
    e.close()


def test_a_checkpointing_low_job_is_preempted_by_a_normal_one_and_resumes_from_its_checkpoint(e2e):
    low = e2e.sub("-q", "low", "-G", "2", "-t", "10m", "--", *TRAIN, "--seconds", "8", "--epochs", "16")
    wait_for(lambda: "epoch 2/" in e2e.labq("logs", str(low)).stdout, 90, what="the low job to checkpoint")
    hi = e2e.sub("-G", "1", "-t", "1m", "--", "sh", "-c", "echo high; sleep 1")
    j = e2e.wait_state(low, {states.PENDING}, 90)
    assert j.restart_count == 1 and j.preempt_count == 1 and j.attempts[0].outcome == "preempted"
    assert e2e.wait_state(hi, states.TERMINAL, 90).state == states.COMPLETED
    done = e2e.wait_state(low, states.TERMINAL, 120)
    assert done.state == states.COMPLETED and len(done.attempts) == 2
    log = e2e.labq("logs", str(low)).stdout
    assert "checkpoint saved" in log and "resuming from" in log, log     # logs appended across attempts
    first = done.attempts[0]
    assert first.last_checkpoint and first.lost_work_s < first.end_time - first.start_time


def test_borrowed_gpus_are_reclaimed_for_the_lending_account(e2e):
    # eta borrows zeta's idle GPU; zeta then asks for its guarantee and gets it back.
    big = e2e.sub("-G", "2", "-t", "10m", "--", "sleep", "300")
    j = e2e.wait_state(big, {states.RUNNING})
    assert j.borrowed
    p = e2e.labq("sub", "--parsable", "-A", "zeta", "-G", "1", "-t", "1m", "--", "sh", "-c", "echo mine")
    assert p.returncode == 0, p.stderr
    mine = int(p.stdout.strip())
    assert e2e.wait_state(mine, states.TERMINAL, 90).state == states.COMPLETED
    back = e2e.job(big)
    assert back.attempts[0].outcome == "preempted" and back.restart_count == 1
    e2e.labq("del", str(big))


def test_prio_and_stat_start(e2e):
    run = e2e.sub("-G", "2", "-t", "10m", "--", "sleep", "300")
    e2e.wait_state(run, {states.RUNNING})
    waiting = e2e.sub("-G", "2", "-t", "5m", "--", "true")
    p = e2e.labq("prio", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["jobs"]
    assert [r["job_id"] for r in rows] == [waiting] and rows[0]["factors"]["qos"] == 100.0
    assert rows[0]["weighted"]["qos"] == 100.0 and rows[0]["priority"] >= 100.0
    p = e2e.labq("stat", "--start", "--json")
    assert p.returncode == 0, p.stderr
    [row] = json.loads(p.stdout)
    started = e2e.job(run).attempts[0]
    # The reservation: when the running job's time limit (plus kill_wait) runs out.
    assert abs(row["expected_start"] - (started.start_time + 600 + 5)) < 2
    table = e2e.labq("prio").stdout
    assert table.splitlines()[0].startswith("weights:") and str(waiting) in table
    e2e.labq("del", str(run), str(waiting))
