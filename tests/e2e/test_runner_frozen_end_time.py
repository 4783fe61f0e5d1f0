"""A runner frozen (SIGSTOP) as its job exits reaps the job only once it is resumed: the end it
recorded was that reap, billing the attempt for the time its runner was stopped (issue 35: the
30-minute chaos soak's jobs 250 and 598, billed ~2.5 s past their processes' end). The agent, not
frozen with the runner, marks the leader's exit on the spool the moment it happens, and the runner
ends the attempt there; so does the agent when the frozen runner is killed instead (it reaped the
leader only then). The job stamps its own end just before it exits."""
import os
import signal
import time

import pytest

from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_MARKS, proc_stat, wait_for

pytestmark = E2E_MARKS

JOB = ('echo $$ > pid; while [ ! -e gate ]; do sleep 0.05; done; '
       'python3 -c "import time; print(repr(time.time()))" > end.tmp && mv end.tmp end; exit 0')
FROZEN_FOR = 3.0       # how long the runner stays stopped after its job's exit


@pytest.mark.parametrize("then", [signal.SIGCONT, signal.SIGKILL], ids=["resumed", "killed"])
def test_a_job_that_exits_while_its_runner_is_frozen_ends_when_it_exited(then):
    e = E2E()
    try:
        jid = e.sub("-t", "10m", "--no-requeue", "--", "sh", "-c", JOB)
        pidfile, stamp = os.path.join(e.work, "pid"), os.path.join(e.work, "end")
        wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read().strip(), 60, what="the job to start")
        wait_for(lambda: (j := e.job(jid)).current and j.current.start_time, 60, what="the start to be posted")
        leader = int(open(pidfile).read())
        runner = int(proc_stat(leader)[1])
        os.kill(runner, signal.SIGSTOP)
        try:
            open(os.path.join(e.work, "gate"), "w").close()
            wait_for(lambda: proc_stat(leader)[:1] == ["Z"], 60, interval=0.01, what="the job to exit, unreaped")
            ended = float(open(stamp).read())
            # the runner stays frozen a while past the job's end: what a reap on SIGCONT would bill
            wait_for(lambda: time.time() - ended >= FROZEN_FOR, 60, what="the runner to stay frozen")
            resumed = time.time()
        finally:
            os.kill(runner, then)
        j = e.wait_state(jid, states.TERMINAL, 120)
    finally:
        e.close()
    assert j.state == states.COMPLETED, (j.state, [(a.outcome, a.exit_code) for a in j.attempts])
    a, = j.attempts
    assert a.end_time is not None and ended - 0.05 <= a.end_time <= ended + 0.5, \
        (f"end {a.end_time:.3f}: {a.end_time - ended:+.3f} s from the job's own end stamp, "
         f"{a.end_time - resumed:+.3f} s from the runner's resumption (or death)")
    assert a.usage.get("wall_s") is None or abs(a.usage["wall_s"] - (a.end_time - a.start_time)) < 0.01
