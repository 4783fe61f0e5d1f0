"""A runner killed outright the instant after its job exited: the job's work is done and must
not run again (issue 35; the 30-minute chaos soak's job 19). The leader, exited but not yet reaped
by its runner, goes to the agent (its subreaper), which reaps it: its status, not the runner's
death, says how the attempt ended. Deterministic here: the runner is held (SIGSTOP) while its job
exits, then killed."""
import os
import signal

from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_MARKS, proc_stat, wait_for

pytestmark = E2E_MARKS

JOB = 'echo $$ > pid-$LABQ_RESTART_COUNT; while [ ! -e gate ]; do sleep 0.05; done; exit {code}'


def _run(code: int):
    e = E2E()
    try:
        jid = e.sub("-t", "10m", "--no-requeue", "--", "sh", "-c", JOB.format(code=code))
        first = os.path.join(e.work, "pid-0")
        wait_for(lambda: os.path.exists(first) and open(first).read().strip(), 60, what="the job to start")
        # its runner has posted `started` (the job's pid and start): before that, nothing names the
        # process whose status would say how it ended, and the attempt is a node failure
        wait_for(lambda: (j := e.job(jid)).current and j.current.start_time, 60, what="the start to be posted")
        leader = int(open(first).read())
        runner = int(proc_stat(leader)[1])
        os.kill(runner, signal.SIGSTOP)
        try:
            open(os.path.join(e.work, "gate"), "w").close()
            wait_for(lambda: proc_stat(leader)[:1] == ["Z"], 60, interval=0.01, what="the job to exit, unreaped")
        finally:
            os.kill(runner, signal.SIGKILL)     # reaches a stopped process; the agent reaps it at once
        j = e.wait_state(jid, states.TERMINAL, 120)
        return j, os.path.exists(os.path.join(e.work, "pid-1"))
    finally:
        e.close()


def test_a_job_that_exited_0_before_its_runner_was_killed_is_completed_once():
    j, rerun = _run(0)
    assert j.state == states.COMPLETED and not rerun, (j.state, [(a.outcome, a.exit_code) for a in j.attempts])
    assert [(a.outcome, a.exit_code) for a in j.attempts] == [("completed", 0)]
    a = j.attempts[0]
    assert a.start_time and a.end_time and a.start_time <= a.end_time


def test_one_that_failed_before_its_runner_was_killed_keeps_its_exit_code():
    j, rerun = _run(3)
    assert j.state == states.FAILED and j.exit_code == 3 and not rerun, (j.state, j.exit_code)
