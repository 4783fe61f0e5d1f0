"""End to end: real redis-server, real `labq scheduler` and `labq worker` processes, real commands.

Each test starts its own stack (cli/embedded.py, the same code `labq up` runs) on a private socket.
Waiting is by polling job state with generous timeouts, never by sleeping a guessed time.
"""
import json
import os
import signal
import subprocess
import sys

import pytest

from labq.cli.embedded import ROOT
from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, LabqUp, wait_for

pytestmark = E2E_MARKS

@pytest.fixture
def e2e():
    e = E2E()
    yield e
    e.close()


def test_sweep_of_twelve_runs_in_three_waves_and_is_charged(e2e):
    from labq.cli.subcore import build_body
    # Each job runs until the test opens its gate (a file named for it), so the waves are the test's,
    # not the machine's: under load, 2-second jobs started late or slow blurred the gaps between waves.
    opts = {"account": "eta", "gpus": "1", "cpus": "4", "mem": "12G", "time_": "2h", "chdir": e2e.work}
    gated = "import os, time\nwhile not os.path.exists('gate-' + os.environ['LABQ_JOB_ID']): time.sleep(0.05)"
    ids = [e2e.client.submit(build_body({**opts, "name": f"sweep{i}"}, [sys.executable, "-c", gated], None))["job_id"]
           for i in range(12)]
    waves = []
    while len(sum(waves, [])) < 12:
        # 4 GPUs: four run, the rest wait, and nothing else starts until the test ends a wave
        wait_for(lambda: sum(e2e.job(i).state == states.RUNNING for i in ids) == 4, 120,
                 what=f"wave {len(waves) + 1} to start")
        jobs = [e2e.job(i) for i in ids]
        wave = [j.id for j in jobs if j.state == states.RUNNING]
        assert sum(j.state == states.PENDING for j in jobs) == 12 - 4 * (len(waves) + 1), [j.state for j in jobs]
        for jid in wave:
            open(os.path.join(e2e.work, f"gate-{jid}"), "w").close()
        for jid in wave:
            e2e.wait_state(jid, states.TERMINAL, 120)
        waves.append(wave)
    assert len(waves) == 3 and sorted(sum(waves, [])) == sorted(ids)
    jobs = [e2e.job(i) for i in ids]
    assert all(j.state == states.COMPLETED and j.exit_code == 0 for j in jobs)
    spans = [(j.attempts[0].dispatch_time, j.attempts[0].end_time) for j in jobs]
    # Never more than 4 at once: at every start, count the attempts holding a GPU.
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 4
    assert all(len(j.attempts) == 1 for j in jobs)
    spent = dict(e2e.client.read.spent())["eta-sweep"]
    assert spent == sum(c for j in jobs for a in j.attempts for _, c in a.charges) == sum(j.cost for j in jobs)
    assert len(e2e.client.read.ledger()) == 12
    bal = e2e.client.balances()[0]
    assert bal.committed == 0 and bal.spent == spent
    acct = json.loads(e2e.labq("acct", "--json").stdout)
    assert len(acct) == 12 and {"id", "state", "cost", "attempts"} <= acct[0].keys()


def test_time_limit_ends_TO(e2e):
    jid = e2e.sub("-t", "3s", "--", "sleep", "120")
    j = e2e.wait_state(jid, states.TERMINAL, 60)
    assert j.state == states.TIMEOUT and j.attempts[0].outcome == "timeout"


def test_max_wait_ends_EX_uncharged(e2e):
    blocker = e2e.sub("-G", "4", "-t", "1h", "--", "sleep", "120")
    e2e.wait_state(blocker, {states.RUNNING})
    jid = e2e.sub("-G", "1", "--max-wait", "1s", "--", "true")
    j = e2e.wait_state(jid, states.TERMINAL, 60)
    assert j.state == states.EXPIRED and j.attempts == () and j.cost == 0
    assert e2e.labq("del", str(blocker)).returncode == 0


def test_cancel_a_running_job(e2e):
    jid = e2e.sub("-G", "1", "--", "sleep", "300")
    wait_for(lambda: (j := e2e.job(jid)).current and j.current.start_time, 60, what="the job to start")
    p = e2e.labq("del", str(jid))
    assert p.returncode == 0 and "cancelling" in p.stdout
    j = e2e.wait_state(jid, states.TERMINAL, 60)
    assert j.state == states.CANCELLED and j.attempts[0].outcome == "cancelled" and j.cost > 0


def test_refusals_at_submit(e2e):
    p = e2e.labq("sub", "-A", "eta", "-G", "5", "--", "true")
    assert p.returncode == 3 and "4 GPUs" in p.stderr and "Traceback" not in p.stderr
    p = e2e.labq("sub", "-A", "eta", "-G", "4", "-t", "20h", "--", "true")
    assert p.returncode == 3 and "$160.00" in p.stderr and "$108.00" in p.stderr
    assert e2e.client.read.active() == []


def test_output_logs_and_script_directives(e2e):
    script = "#!/bin/bash\n#LABQ -J from-directive -t 5m\necho hello $LABQ_JOB_ID on $LABQ_NODE gpus=$CUDA_VISIBLE_DEVICES\n"
    p = e2e.labq("sub", "--parsable", "-A", "eta", "-G", "1", stdin=script)
    jid = int(p.stdout)
    j = e2e.wait_state(jid, states.TERMINAL, 60)
    assert j.state == states.COMPLETED and j.name == "from-directive" and j.time_limit == 300
    out = e2e.labq("logs", str(jid)).stdout
    assert out.startswith(f"hello {jid} on e2e-node gpus=GPU-")
    assert os.path.exists(os.path.join(e2e.work, f"labq-{jid}.out"))


def test_wait_exits_with_the_jobs_code(e2e):
    jid = e2e.sub("--", "sh", "-c", "exit 7")
    assert e2e.labq("wait", str(jid)).returncode == 7
    assert e2e.job(jid).state == states.FAILED


def test_kill_9_of_the_scheduler_loses_nothing_and_runs_nothing_twice(e2e):
    ids = [e2e.sub("-G", "1", "-t", "10m", "--", sys.executable, "-c", "import time; time.sleep(2)") for _ in range(8)]
    wait_for(lambda: sum(1 for i in ids if e2e.job(i).state == states.RUNNING) >= 2, 60, what="jobs to start")
    e2e.stack.procs["scheduler"].send_signal(signal.SIGKILL)
    e2e.stack.procs["scheduler"].wait(10)
    more = []
    # While it is down, submissions queue in the inbox; the worker's events queue in the stream.
    sub = subprocess.Popen(e2e.stack.command("sub", "--parsable", "-A", "eta", "-G", "1", "--", "true"),
                           env=e2e.stack.env(), cwd=e2e.work, stdout=subprocess.PIPE, text=True)
    e2e.stack.start("scheduler", "scheduler")       # waits out the dead leader's lease, then recovers
    out, _ = sub.communicate(timeout=120)
    assert sub.returncode == 0
    more.append(int(out))
    jobs = [e2e.wait_state(i, states.TERMINAL, 180) for i in ids + more]
    assert all(j.state == states.COMPLETED for j in jobs)
    assert all(len(j.attempts) == 1 for j in jobs), "no job ran twice"
    ledger = e2e.client.read.ledger()
    assert sorted(f["key"] for f in ledger) == sorted(f"{j.id}.1" for j in jobs)
    assert dict(e2e.client.read.spent())["eta-sweep"] == sum(j.cost for j in jobs)


def test_a_second_labq_up_finds_the_first():
    with LabqUp(E2E_CONFIG) as up:
        second = up.run("up", timeout=60)
        assert second.returncode == 0 and "already up" in second.stdout
        p = up.run("sub", "-A", "eta", "-W", "--", "true")
        assert p.returncode == 0, p.stderr
    assert up.proc.returncode == 0


def test_redis_restart_with_aof_keeps_acknowledged_work(e2e):
    first = e2e.sub("-G", "1", "--", "true")
    e2e.wait_state(first, {states.COMPLETED})
    before = (e2e.job(first), e2e.client.read.spent(), e2e.client.read.ledger())
    assert before[1]["eta-sweep"] > 0
    # kill -9: only what appendfsync=always had written survives; same socket, same data directory.
    e2e.stack.stop("redis", sig=signal.SIGKILL)
    e2e.stack.start_redis()
    assert (e2e.job(first), e2e.client.read.spent(), e2e.client.read.ledger()) == before
    # The scheduler and the worker reconnect by themselves, and the queue works again.
    after = e2e.sub("-G", "1", "--", "true")
    assert e2e.wait_state(after, states.TERMINAL, 120).state == states.COMPLETED


def test_array_with_throttle_runs_two_at_a_time_and_tasks_can_be_cancelled(e2e):
    p = e2e.labq("sub", "--parsable", "-A", "eta", "-a", "1-6%2", "-G", "1", "--", "sh", "-c",
                 "echo task $LABQ_ARRAY_TASK_ID of $LABQ_ARRAY_TASK_COUNT; sleep 1")
    assert p.returncode == 0 and p.stdout.strip().isdigit(), p.stderr     # sbatch --parsable: the array's id
    first = int(p.stdout)
    assert e2e.labq("del", f"{first}_[5-6]").returncode == 0
    jobs = [e2e.wait_state(first + i, states.TERMINAL, 120) for i in range(6)]
    assert [j.state for j in jobs] == [states.COMPLETED] * 4 + [states.CANCELLED] * 2
    spans = [(j.attempts[0].dispatch_time, j.attempts[0].end_time) for j in jobs[:4]]
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= 2
    assert e2e.labq("logs", f"{first}_3").stdout.startswith("task 3 of 6")


def test_labq_checkpoint_from_inside_a_job(e2e):
    cmd = f"{sys.executable} -m labq.cli.main checkpoint && sleep 120"
    jid = e2e.sub("-t", "4s", "--", "sh", "-c", f"cd {ROOT} && {cmd}")
    j = e2e.wait_state(jid, states.TERMINAL, 60)
    a = j.attempts[0]
    assert j.state == states.TIMEOUT and a.start_time <= a.last_checkpoint < a.end_time
    assert abs(a.lost_work_s - (a.end_time - a.last_checkpoint)) < 0.01
    assert "checkpoint recorded" in e2e.labq("logs", str(jid)).stdout


def test_kill_9_of_the_worker_ends_the_attempt_NF_and_a_restarted_worker_completes_it(e2e):
    """Fencing: kill -9 of the agent takes its job down with it (PDEATHSIG, cold stop); the
    scheduler sees the attempt's runner go silent, ends it `node_failure` and requeues it; the
    restarted agent runs the second attempt to completion."""
    jid = e2e.sub("-G", "1", "-t", "10m", "--", "sh", "-c",
                  'echo "attempt $LABQ_RESTART_COUNT"; test "$LABQ_RESTART_COUNT" -gt 0 || exec sleep 300')
    first = e2e.wait_state(jid, {states.RUNNING})
    wait_for(lambda: (j := e2e.job(jid)).attempts and j.attempts[0].start_time, 60, what="the process to start")
    e2e.stack.procs["worker"].send_signal(signal.SIGKILL)
    e2e.stack.procs["worker"].wait(10)
    e2e.stack.start("worker", "worker")
    j = e2e.wait_state(jid, states.TERMINAL, 180)
    assert first.node == "e2e-node"
    assert j.state == states.COMPLETED, (j.state, j.detail, [a.outcome for a in j.attempts])
    assert [a.outcome for a in j.attempts] == ["node_failure", "completed"] and j.restart_count == 1
    # The runner outlives its agent by the moment it takes to kill the job (attempts run inside
    # it), so the job's log says why the first attempt ended, as for any other node failure.
    first_out, line, second_out = e2e.labq("logs", str(jid)).stdout.splitlines()
    assert (first_out, second_out) == ("attempt 0", "attempt 1")
    assert line.startswith(f"labq: error: *** JOB {jid} ON e2e-node CANCELLED AT ") and "NODE FAILURE" in line, line
