"""The agent stops a runner before it looks whether the runner holds a result, and kills only one
that holds none (issue 35 item 2; found by bench/soak.py).

The soak's run: Redis killed for 8.8 s with a node lease of 4 s. The agent, unable to renew, read
the runners holding results, then killed its runners one by one; meanwhile a job exited 0 and its
runner saved its result - and was killed all the same. The result reached the scheduler too late, as a
node failure's afterthought, and the finished work ran again. Now each runner is SIGSTOPped first:
it cannot save anything between the look and the kill. Real processes, no Redis."""
import json
import os
import subprocess
import sys
import time

from labq.worker import results
from labq.worker.agent import Agent
from tests.harness import E2E_MARKS, NODE, K, agent_config, wait_for

pytestmark = E2E_MARKS


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def runner(tmp_path, name: str) -> subprocess.Popen:
    """A runner stand-in that saves its result the moment it may run on after `name` appears: a
    runner whose job has just exited."""
    gate = tmp_path / name
    return subprocess.Popen(["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; "
                             f"echo saving > {gate}.saving; sleep 60"])


def test_a_runner_about_to_save_its_result_is_stopped_before_the_look(tmp_path):
    spool = str(tmp_path / "spool")
    p = runner(tmp_path, "gate")
    try:
        assert results.stop_unless_holding(spool, p.pid) is True
        assert state(p.pid) == "T", "stopped: it saves nothing from here to the kill"
        (tmp_path / "gate").touch()            # its job exits now: a running runner would save at once
        assert state(p.pid) == "T"
        p.kill()
        assert p.wait(30) == -9
        assert not (tmp_path / "gate.saving").exists(), "it never ran between the look and the kill"
    finally:
        p.kill()
        p.wait(30)


def test_a_runner_holding_a_result_runs_on_and_one_gone_is_left_alone(tmp_path):
    spool = str(tmp_path / "spool")
    p = subprocess.Popen(["sleep", "60"])
    try:
        os.makedirs(os.path.dirname(results.path(spool, 0)))
        with open(results.path(spool, 0), "w") as f:     # what results.keep writes, in runner p's name
            json.dump({"pid": p.pid, "entry": "7:1", "rank": 0, "body": {"outcome": "completed"}}, f)
        assert results.holders(spool) == {p.pid}
        assert results.stop_unless_holding(spool, p.pid) is False
        wait_for(lambda: state(p.pid) != "T", 30, what="the holder to run on")
    finally:
        p.kill()
        p.wait(30)
    assert results.stop_unless_holding(spool, p.pid) is False, "gone: nothing to stop or kill"


# A runner stand-in: its job's leader (a child in a session of its own) exits at once and is left
# unreaped; an escaped process of the job (another child) runs on; then it waits, stopped.
STANDIN = """
import os, signal, subprocess, sys, time
leader = os.fork()
if leader == 0:
    os.setsid()
    os._exit(0 if sys.argv[1] == "ends" else (time.sleep(60) or 0))
escaped = subprocess.Popen(["sleep", "60"])
print(leader, escaped.pid, flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(60)
"""


def _stopped_standin(how: str) -> tuple[subprocess.Popen, int, int]:
    """A STANDIN runner, stopped, with its job's leader exited ("ends") or running ("runs")."""
    p = subprocess.Popen([sys.executable, "-c", STANDIN, how], stdout=subprocess.PIPE, text=True)
    leader, escaped = map(int, p.stdout.readline().split())
    wait_for(lambda: state(p.pid) == "T", 30, what="the stand-in stopped")
    if how == "ends":
        wait_for(lambda: state(leader) == "Z", 30, what="the job's leader exited")
    return p, leader, escaped


def test_the_agent_resumes_a_silent_runner_whose_job_ended_and_kills_one_whose_job_runs(redis_server, real_redis,
                                                                                       tmp_path):
    """A runner SIGSTOPped past the lease as its job exited 0: the agent killed it for its silence
    and the finished job ended node_failure and ran again (the 30-minute soak: jobs 393, 414, 612).
    Now the agent resumes it to post the outcome, and kills only the job's other processes; a
    runner whose job still runs is killed with its tree as before."""
    got = {}
    for how in ("ends", "runs"):
        p, leader, escaped = _stopped_standin(how)
        jid = 35 if how == "ends" else 36
        real_redis.hset(K.node_runners(NODE), str(jid), f"running {jid}.1 pid={p.pid} {time.time():.3f}")
        real_redis.hset(K.attempt(jid, 1), mapping={"claimed": f"{NODE}:{p.pid}", "hb": time.time() - 10})
        Agent(agent_config(tmp_path, lease="3s"), redis_server.url)._check_attempts()
        got[how] = (p, leader, escaped)
        real_redis.delete(K.node_runners(NODE))
    p, leader, escaped = got["ends"]
    try:
        wait_for(lambda: state(escaped) in ("Z", "X") or not os.path.exists(f"/proc/{escaped}"), 30,
                 what="the job's escaped process killed")
        assert p.poll() is None and state(p.pid) != "T", "resumed, to reap its job and post the outcome"
    finally:
        p.kill()
        p.wait(30)
    p, leader, escaped = got["runs"]
    assert p.wait(30) == -9, "a runner whose job still runs is killed"
    wait_for(lambda: not os.path.exists(f"/proc/{leader}") or state(leader) == "Z", 30, what="its job killed")


def test_a_fence_resumes_a_runner_whose_job_just_ended_and_kills_one_whose_job_runs(redis_server, tmp_path):
    """The agent fences (no lease renewal, Redis away) the moment a job exits 0, before its runner
    has reaped it and saved the result: the 30-minute soak (seed 71, job 94) saw that runner killed,
    the attempt ended node_failure and the finished work run again. Now a runner whose job's leader
    has exited is resumed to save and post it, and only a runner whose job still runs is killed."""
    from labq.worker.agent import Slot
    agent = Agent(agent_config(tmp_path, lease="3s"), redis_server.url)
    agent.slots = []            # its own runners are never started here: two stand-ins instead
    got = {}
    for i, how in enumerate(("ends", "runs")):
        p, leader, escaped = _stopped_standin(how)
        got[how] = (p, leader, escaped)
        agent.slots.append(Slot(index=i, proc=p))
    agent._fence(time.time())
    p, leader, escaped = got["ends"]
    try:
        assert agent.slots[0].proc is p, "left to post its outcome"
        wait_for(lambda: state(escaped) in ("Z", "X") or not os.path.exists(f"/proc/{escaped}"), 30,
                 what="the job's escaped process killed")
        assert p.poll() is None and state(p.pid) != "T", "resumed, to reap its job and post the outcome"
    finally:
        p.kill()
        p.wait(30)
    p, leader, escaped = got["runs"]
    assert p.wait(30) == -9 and agent.slots[1].proc is None, "a runner whose job still runs is killed"
    assert results.death(agent.settings.spool, 1, p.pid) is not None, "its death marked for its successor"


# A runner stand-in whose job's leader (named on the spool, as the runner names it) has exited and
# been reaped by it, its result not kept yet ("ends"), or still runs ("runs"); then it waits, stopped.
REAPED = """
import os, signal, sys, time
leader = os.fork()
if leader == 0:
    time.sleep(0.2 if sys.argv[1] == "ends" else 60)
    os._exit(0)
print(leader, flush=True)
sys.stdin.readline()
if sys.argv[1] == "ends":
    os.waitpid(leader, 0)
os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(60)
"""


def test_a_fence_spares_a_runner_that_reaped_its_job_before_keeping_the_result(tmp_path):
    """The soak (seed 71, ec24cad→fe8699e, job 527): a job exited 0 400 ms before its node fenced;
    its runner, loaded, had reaped it but not yet kept the result, so it held none and had no zombie
    child, and was killed: node_failure, the finished work ran again. The leader the runner named on
    the spool (exitwatch) says the job is over: the runner is resumed to post."""
    from labq.worker import deadslot, exitwatch
    spool = str(tmp_path / "spool")
    for slot, how in enumerate(("ends", "runs")):
        p = subprocess.Popen([sys.executable, "-c", REAPED, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        try:
            leader = int(p.stdout.readline())
            assert exitwatch.note(spool, slot, leader) is not None
            p.stdin.write("\n")
            p.stdin.flush()
            wait_for(lambda: state(p.pid) == "T", 30, what="the stand-in stopped")
            if how == "ends":
                assert deadslot.fence(spool, slot, p.pid) is False, "its job is over: left to post"
                wait_for(lambda: state(p.pid) != "T", 30, what="the runner resumed")
                assert p.poll() is None
            else:
                assert deadslot.fence(spool, slot, p.pid) is True
                assert p.wait(30) == -9, "a runner whose job still runs is killed"
        finally:
            p.kill()
            p.wait(30)
