"""Preemption's signal order on a real runner and a job that traps each signal and records when it
came: the checkpoint signal at once, SIGTERM at the end of the grace, SIGKILL kill_wait later (each
within 1 s), and the control reaching the runner by its blocking read, not a 1 s poll."""
import time

from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, NODE, K, events, put_job, runner_env, start_runner, wait_for

pytestmark = E2E_MARKS

TRAPS = ("trap 'echo USR1 $(date +%s.%N) >> sigs' USR1; trap 'echo TERM $(date +%s.%N) >> sigs' TERM; "
         "echo up >> sigs; while true; do sleep 0.05; done")
LAG = 0.25      # s: how late the job may write down a signal's time (its trap waits for the sleep, then forks date)


def test_preempt_sends_checkpoint_signal_then_term_then_kill(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("/bin/bash", "-c", TRAPS), workdir=str(tmp_path), time_limit=600,
            warn_signal=("USR1", 60))
    p = start_runner(runner_env(redis_server, tmp_path, LABQ_KILL_WAIT="1"))
    try:
        wait_for(lambda: (tmp_path / "sigs").exists(), 60, what="the job to start")
        sent = time.time()
        real_redis.set(K.control(1), "preempt:2")
        real_redis.lpush(Keys().node_control(NODE, 1), "preempt:2")     # as the scheduler's commit does
        fin = wait_for(lambda: events(real_redis, "finished"), 60, what="the end")[0]["body"]
    finally:
        p.kill()
    got = {line.split()[0]: float(line.split()[1]) for line in (tmp_path / "sigs").read_text().split("\n")
           if line.startswith(("USR1", "TERM"))}
    assert fin["outcome"] == "preempted" and fin["signal"] == 9, fin
    assert 0 <= got["USR1"] - sent < 1.0, "the checkpoint signal at once (blocking read, not a poll)"
    # The job writes each time when bash runs its trap: after the 0.05 s sleep in progress and a fork
    # of date, so a recorded time lags its signal by up to LAG (seen: TERM - USR1 = 1.948 s under CI
    # load). The grace is measured from `sent` too, which no signal can precede.
    assert got["TERM"] - sent >= 2.0, "SIGTERM not before the end of the grace"
    assert 2.0 - LAG <= got["TERM"] - got["USR1"] < 3.0, "SIGTERM at the end of the grace"
    assert 1.0 - LAG <= fin["end_time"] - got["TERM"] < 2.0, "SIGKILL kill_wait after SIGTERM"
