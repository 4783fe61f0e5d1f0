"""End to end, real processes (redis-server, `labq scheduler`, `labq worker`, a job that ignores
SIGTERM): a budget exhausted by a running job stops it under on_exhaust = preempt (grace) and
cancel (kill_wait), and the overshoot — what was spent beyond the limit — stays within
grace × rate (plus the scheduler's and runner's latencies, which the one-tick lead mostly covers).

Prints the measured overshoot; `pytest -s tests/e2e/test_budget_e2e.py` shows it."""
import os
import shutil
import sys
import tempfile

import pytest

from labq.cli.embedded import Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.jobs import states
from labq.scheduler.settings import config
from tests.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.redis]
if not shutil.which("redis-server"):
    pytestmark.append(pytest.mark.skipif(not os.environ.get("CI"), reason="redis-server is not installed"))

RATE = 10_000          # micro-$ per second: $36 per GPU-hour
GRACE, KILL_WAIT = 3, 2
CONFIG = """
[scheduler]
tick = 0.2
kill_wait = "{kill_wait}s"
node_lease = "10s"
budget_mode = "forecast"
[rates]
gpu_hour = 36.0
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "{grace}s"
min_runtime = "0s"
[accounts.eta]
users = ["{user}"]
[[budgets]]
name = "tight"
account = "eta"
limit = 0.12
on_exhaust = "{on_exhaust}"
[worker]
name = "e2e-budget"
gpus = 2
cpus = 4
mem = "8G"
slots = 2
spool = "{spool}"
run_as = "self"
"""
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


# A preempted job that ignores its signals gets SIGTERM at the end of the grace and SIGKILL kill_wait
# later (issue 12, as SLURM's KillWait), so it can run grace + kill_wait.
@pytest.mark.parametrize("on_exhaust,stop_s", [("preempt", GRACE + KILL_WAIT), ("cancel", KILL_WAIT)])
def test_exhaustion_stops_the_job_and_bounds_the_overshoot(on_exhaust, stop_s):
    d = tempfile.mkdtemp(prefix="labq-e2e-budget-", dir="/tmp")
    path = os.path.join(d, "labq.toml")
    with open(path, "w") as f:
        f.write(CONFIG.format(user=current_user(), spool=os.path.join(d, "spool"), grace=GRACE, kill_wait=KILL_WAIT,
                              on_exhaust=on_exhaust))
    cfg = config.load(path)
    log = open(os.path.join(d, "daemons.log"), "w")
    stack = Stack(d, path, log=log)
    try:
        stack.start_all()
        c = Client(cfg, url=stack.url)
        wait_for(lambda: [n for n in c.nodes() if n.state == "up"], 60, what="the worker to register")
        # --est 2s commits 2 s × 1.2 at $0.01/s = $0.024; it really runs until the budget stops it at $0.12.
        r = c.submit({"argv": [sys.executable, "-c", STUBBORN], "workdir": d, "gpus": 1, "cpus": 1, "mem": 1 << 30,
                      "time_limit": 3600, "est": 2, "account": "eta", "qos": "low"})
        jid = r["job_id"]
        wait_for(lambda: (j := c.read.job(jid)).current and j.current.start_time, 60, what="the job to start")
        ended = wait_for(lambda: (j := c.read.job(jid)).attempts and j.attempts[0].end_time and j, 120,
                         what="the budget to stop the job")
        a = ended.attempts[0]
        spent = c.read.spent()["tight"]
        limit = cfg.budgets[0].limit
        overshoot = spent - limit
        print(f"\non_exhaust={on_exhaust}: limit ${limit / 1e6:.4f}, spent ${spent / 1e6:.4f}, overshoot "
              f"${overshoot / 1e6:+.4f} = {overshoot / RATE:+.2f} s of the job's rate; bound {stop_s} s "
              f"(${stop_s * RATE / 1e6:.4f}); attempt {a.end_time - a.dispatch_time:.2f} s, outcome {a.outcome}")
        assert a.outcome == ("preempted" if on_exhaust == "preempt" else "cancelled")
        assert overshoot <= (stop_s + 1) * RATE, "overshoot beyond grace × rate (+1 s of latency)"
        if on_exhaust == "preempt":
            j = wait_for(lambda: (j := c.read.job(jid)).state == states.PENDING and j.reason != states.NONE and j, 30,
                         what="the preempted job to pend")
            assert j.reason in (states.BUDGET_EXHAUSTED, states.BUDGET_RESERVED) and len(j.attempts) == 1
        else:
            assert c.read.job(jid).state == states.CANCELLED
        kinds = [al["kind"] for al in c.read.alerts()]
        assert kinds.count("exhausted") == 1 and kinds.count("warn") == 2
    finally:
        stack.stop_all()
        log.close()
        shutil.rmtree(d, ignore_errors=True)
