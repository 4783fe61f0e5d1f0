"""A job never runs twice: two agents (two node names on this host), a real scheduler and Redis,
and the faults of issue 12 — kill -9 of the agent running a job, of its runner, SIGSTOP of that
agent past its lease, Redis restarted right after a dispatch. The proof is the job's own record:
it appends "<pid> <time>" every 50 ms to a file, so each attempt's life is [first, last] stamp,
and no two attempts' lives may overlap. Each job ends exactly once `CD`, and the ledger verifies.

Short leases (1 s, fence margin 1 s) keep each case to a few seconds.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from labq.cli.embedded import Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.jobs import states
from labq.scheduler.settings import config
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, wait_for

pytestmark = E2E_MARKS

K = Keys("labq")
SCHED = """
[scheduler]
tick = 0.1
kill_wait = "1s"
node_lease = "1s"
fence_margin = 1
start_timeout = 5
[accounts.eta]
users = ["{user}"]
"""
NODE = """
[worker]
name = "{name}"
gpus = 1
cpus = 2
mem = "4G"
slots = 1
spool = "{spool}"
run_as = "self"
"""
# Stamps "<pid> <time>" every 50 ms for `secs` seconds, then exits 0.
STAMPER = ("import os, sys, time\n"
           "end = time.time() + float(sys.argv[2])\n"
           "with open(sys.argv[1], 'a') as f:\n"
           "    while True:\n"
           "        f.write(f'{os.getpid()} {time.time()}\\n'); f.flush()\n"
           "        if time.time() >= end: break\n"
           "        time.sleep(0.05)\n")


class TwoNodes:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-fence-", dir="/tmp")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        self.cfgs = {}
        for name in ("node-a", "node-b"):
            path = os.path.join(self.dir, f"{name}.toml")
            with open(path, "w") as f:
                f.write(SCHED.format(user=current_user()) +
                        NODE.format(name=name, spool=os.path.join(self.dir, f"spool-{name}")))
            self.cfgs[name] = path
        self.cfg = config.load(self.cfgs["node-a"])
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfgs["node-a"], log=self.log)
        self.stack.start_redis()
        self.stack.start("scheduler", "scheduler")
        self.agents = {}
        for name in self.cfgs:
            self.start_agent(name)
        self.client = Client(self.cfg, url=self.stack.url)
        wait_for(lambda: len([n for n in self.client.nodes() if n.state == "up"]) == 2, 60, what="two nodes up")

    def start_agent(self, name):
        argv = [sys.executable, "-m", "labq.cli.main", "--config", self.cfgs[name], "worker"]
        self.agents[name] = p = subprocess.Popen(argv, env=self.stack.env(), stdout=self.log, stderr=self.log,
                                                 process_group=0)
        self.stack.procs[name] = p
        return p

    def submit(self, secs=3.0) -> tuple[int, str]:
        from labq.cli.subcore import build_body
        stamps = os.path.join(self.work, f"stamps-{len(os.listdir(self.work))}")
        body = build_body({"account": "eta", "gpus": "1", "time_": "10m", "chdir": self.work},
                          [sys.executable, "-c", STAMPER, stamps, str(secs)], None)
        return self.client.submit(body)["job_id"], stamps

    def job(self, jid):
        return self.client.read.job(jid)

    def running(self, jid, stamps):
        """(node, job pid) once the attempt's process has stamped."""
        def seen():
            j = self.job(jid)
            if j.state == states.RUNNING and j.current.start_time and os.path.exists(stamps):
                with open(stamps) as f:
                    lines = f.read().splitlines()
                return (j.node, int(lines[-1].split()[0])) if lines else None
            return None
        return wait_for(seen, 60, what=f"job {jid} to run")

    def finish(self, jid, stamps):
        j = wait_for(lambda: (x := self.job(jid)) and x.state in states.TERMINAL and x, 90,
                     what=f"job {jid} to end")
        # Seen in 2 of 30 loaded runs of test_redis_restarted_mid_dispatch: the job ended F ("runner
        # failed: ConnectionError") having stamped at most once: its runner took Redis gone at `started`
        # for a runner bug and killed it. Fixed; forced in test_worker_runner.py
        # (test_redis_gone_as_the_job_starts_does_not_fail_it).
        assert os.path.exists(stamps), ("the job ended but never ran", j.state, j.reason, j.attempts)
        return j, lives(stamps)

    def ledger_ok(self) -> bool:
        p = subprocess.run(self.stack.command("ledger", "verify"), env=self.stack.env(), capture_output=True,
                           text=True, timeout=60)
        return p.returncode == 0

    def close(self):
        for name in list(self.agents):
            p = self.agents[name]
            with_cont(p)
        self.stack.stop_all(timeout=20)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def with_cont(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGCONT)


def lives(path) -> dict[int, tuple[float, float]]:
    """pid -> (first stamp, last stamp): each attempt's life as the job itself recorded it."""
    out = {}
    with open(path) as f:
        for line in f:
            pid, t = line.split()
            lo, hi = out.get(int(pid), (float(t), float(t)))
            out[int(pid)] = (min(lo, float(t)), max(hi, float(t)))
    return out


def assert_no_overlap(spans: dict):
    ordered = sorted(spans.values())
    for (a0, a1), (b0, b1) in zip(ordered, ordered[1:]):
        assert a1 < b0, f"two attempts ran at once: {a0:.3f}-{a1:.3f} and {b0:.3f}-{b1:.3f}"


def assert_once_cd(n: TwoNodes, j, spans):
    """Ended CD by its last attempt; every earlier one lost to the fault (a requeue can land on the
    failing node again before its lease lapses: that attempt is lost too, never run twice)."""
    outcomes = [a.outcome for a in j.attempts]
    assert j.state == states.COMPLETED, (j.state, j.detail, outcomes)
    assert outcomes[-1] == "completed" and set(outcomes[:-1]) <= {"node_failure", "withdrawn"}, outcomes
    assert len(spans) == len([a for a in j.attempts if a.start_time]), (spans, j.attempts)
    assert_no_overlap(spans)
    assert n.ledger_ok()


@pytest.fixture
def nodes():
    n = TwoNodes()
    yield n
    n.close()


def runner_of(job_pid: int) -> int:
    """The slot runner running the job's attempt: the job's parent (attempts run inside it)."""
    with open(f"/proc/{job_pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_kill_9_of_the_agent(nodes):
    jid, stamps = nodes.submit()
    node, _ = nodes.running(jid, stamps)
    nodes.agents[node].kill()
    j, spans = nodes.finish(jid, stamps)
    assert j.attempts[0].outcome == "node_failure" and j.attempts[-1].node != node
    assert_once_cd(nodes, j, spans)


def test_kill_9_of_a_runner(nodes):
    jid, stamps = nodes.submit()
    node, pid = nodes.running(jid, stamps)
    runner = runner_of(pid)
    # `labq nodes` shows each runner's state: this node's one runner runs the job, the other idles.
    p = subprocess.run(nodes.stack.command("nodes", "--json"), env=nodes.stack.env(), capture_output=True,
                       text=True, timeout=60)
    shown = {d["name"]: d["runners"] for d in json.loads(p.stdout)}
    assert shown[node]["0"].startswith(f"running {jid}.1 pid={runner}"), shown
    assert all(v["0"].startswith("idle") for n, v in shown.items() if n != node), shown
    os.kill(runner, signal.SIGKILL)
    j, spans = nodes.finish(jid, stamps)
    assert j.attempts[0].outcome == "node_failure", j.attempts
    assert_once_cd(nodes, j, spans)


def test_sigstop_of_the_runner(nodes):
    """A runner that stops heart-beating (SIGSTOP) cannot fence its job: its agent kills both."""
    jid, stamps = nodes.submit()
    _, pid = nodes.running(jid, stamps)
    os.kill(runner_of(pid), signal.SIGSTOP)
    j, spans = nodes.finish(jid, stamps)
    assert j.attempts[0].outcome == "node_failure", j.attempts
    assert_once_cd(nodes, j, spans)


def test_sigstop_of_the_agent_past_its_lease(nodes):
    jid, stamps = nodes.submit()
    node, _ = nodes.running(jid, stamps)
    agent = nodes.agents[node]
    os.kill(agent.pid, signal.SIGSTOP)      # the agent only: its runners go on, and must fence themselves
    try:
        j, spans = nodes.finish(jid, stamps)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert j.attempts[0].outcome == "node_failure" and j.attempts[-1].node != node, j.attempts
    assert_once_cd(nodes, j, spans)
    # Resumed, the agent finds its lease gone and registers afresh.
    wait_for(lambda: len([n for n in nodes.client.nodes() if n.state == "up"]) == 2, 60, what="both nodes up")


def test_redis_restarted_mid_dispatch(nodes):
    jid, stamps = nodes.submit(secs=1.0)
    wait_for(lambda: nodes.job(jid).state == states.RUNNING, 60, what="the dispatch")
    redis = nodes.stack.procs["redis"]
    redis.kill()
    redis.wait(10)
    nodes.stack.start_redis()               # same directory and socket; its AOF is fsynced per write
    j, spans = nodes.finish(jid, stamps)
    assert_once_cd(nodes, j, spans)
