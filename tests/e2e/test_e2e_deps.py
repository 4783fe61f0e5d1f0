"""End to end with real processes: dependencies, retries by exit code and labq requeue.

One stack (redis-server, `labq scheduler`, `labq worker`) for the module, as in test_e2e.py, with
a 1 s retry backoff so that a retried job does not wait the default 30 s.
"""
import os

import pytest

from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, wait_for

pytestmark = E2E_MARKS


@pytest.fixture(scope="module")
def e2e():
    e = E2E(E2E_CONFIG.replace("[scheduler]\n", "[scheduler]\nretry_backoff = \"1s\"\n", 1))
    assert e.cfg.retry_backoff == 1
    yield e
    e.close()


def stat_reason(e2e, jid) -> str:
    """The NODE(REASON) column of `labq stat` for one job."""
    out = e2e.labq("stat").stdout.splitlines()
    row = next((line for line in out if line.split()[:1] == [str(jid)]), "")
    return row.split()[-1] if row else ""


def test_afterok_chain_runs_in_order(e2e):
    log = os.path.join(e2e.work, "order.txt")
    gate = os.path.join(e2e.work, "gate")
    # A runs until the test has seen the others wait (a file, not a guessed sleep, lets it finish).
    a = e2e.sub("--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done; echo A >> {log}")
    b = e2e.sub("-d", f"afterok:{a}", "--", "sh", "-c", f"echo B >> {log}")
    c = e2e.sub("--dependency", f"afterok:{b}", "--", "sh", "-c", f"echo C >> {log}")
    wait_for(lambda: stat_reason(e2e, c) == "(Dependency)", 60, what="labq stat to show (Dependency)")
    show = e2e.labq("show", str(c)).stdout
    assert f"dependency: afterok:{b}" in show and "reason: Dependency — waiting for afterok:" in show
    open(gate, "w").close()
    jobs = [e2e.wait_state(j, states.TERMINAL, 120) for j in (a, b, c)]
    assert [j.state for j in jobs] == [states.COMPLETED] * 3
    assert open(log).read() == "A\nB\nC\n"
    # Each started only after the one before it had ended.
    for before, after in zip(jobs, jobs[1:]):
        assert after.attempts[0].dispatch_time >= before.attempts[0].end_time


def test_afternotok_on_a_success_is_never_satisfied(e2e):
    ok = e2e.sub("--", "true")
    e2e.wait_state(ok, {states.COMPLETED})
    dep = e2e.sub("-d", f"afternotok:{ok}", "--", "true")
    j = wait_for(lambda: (j := e2e.job(dep)).reason == states.DEPENDENCY_NEVER and j, 60,
                 what="DependencyNeverSatisfied")
    assert j.state == states.PENDING and f"afternotok:{ok} (CD)" in j.detail
    assert stat_reason(e2e, dep) == "(DependencyNeverSatisfied)"
    killed = e2e.sub("-d", f"afternotok:{ok}", "--kill-on-invalid-dep", "--", "true")
    assert e2e.wait_state(killed, states.TERMINAL, 60).state == states.CANCELLED
    p = e2e.labq("sub", "-A", "eta", "-d", "afterok:99999", "--", "true")
    assert p.returncode == 2 and "no such job 99999" in p.stderr and "Traceback" not in p.stderr
    assert e2e.labq("del", str(dep)).returncode == 0


def test_retry_on_exit_code_twice_then_success(e2e):
    jid = e2e.sub("--retries", "2", "--retry-on", "3", "--", "sh", "-c",
                  'echo "attempt $LABQ_RESTART_COUNT"; test "$LABQ_RESTART_COUNT" -ge 2 || exit 3')
    j = e2e.wait_state(jid, states.TERMINAL, 120)
    assert j.state == states.COMPLETED and j.exit_code == 0 and j.retries_used == 2 and j.restart_count == 2
    assert [(a.outcome, a.exit_code) for a in j.attempts] == [("exit", 3), ("exit", 3), ("completed", 0)]
    # Backoff: 1 s after the first failure, 2 s after the second.
    gaps = [b.dispatch_time - a.end_time for a, b in zip(j.attempts, j.attempts[1:])]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0
    # The log is appended across attempts, not truncated.
    assert e2e.labq("logs", str(jid)).stdout == "attempt 0\nattempt 1\nattempt 2\n"


def test_requeue_a_running_job(e2e):
    jid = e2e.sub("--", "sleep", "300")
    wait_for(lambda: (j := e2e.job(jid)).current and j.current.start_time, 60, what="the job to start")
    p = e2e.labq("requeue", str(jid))
    assert p.returncode == 0 and "requeueing" in p.stdout
    # Same id, a second attempt that really runs (the stop of the first does not stop it).
    j = wait_for(lambda: (j := e2e.job(jid)).current.attempt == 2 and j.current.start_time and j, 90,
                 what="the second attempt to start")
    assert j.state == states.RUNNING and j.restart_count == 1 and j.attempts[0].outcome == "cancelled"
    assert e2e.labq("del", str(jid)).returncode == 0
    assert e2e.wait_state(jid, states.TERMINAL, 60).state == states.CANCELLED
