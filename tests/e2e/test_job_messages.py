"""labq's line in a job's own output when labq ends it (worker/jobmsg.py), on a real runner: time
limit, cancel, preemption with its grace, OOM — as SLURM's slurmstepd writes them."""
import re

from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, NODE, PY, K, events, put_job, run, runner_env, start_runner, wait_for

pytestmark = E2E_MARKS
MB = 1 << 20
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


def stop_with(real_redis, redis_server, tmp_path, control):
    put_job(real_redis, argv=("/bin/sh", "-c", "echo up; sleep 60"), workdir=str(tmp_path), time_limit=600)
    p = start_runner(runner_env(redis_server, tmp_path, LABQ_KILL_WAIT="1"))
    try:
        wait_for(lambda: "up" in (tmp_path / "labq-1.out").read_text() if (tmp_path / "labq-1.out").exists()
                 else False, 60, what="the job to start")
        real_redis.set(K.control(1), control)
        real_redis.lpush(Keys().node_control(NODE, 1), control)     # as the scheduler's commit does
        wait_for(lambda: events(real_redis, "finished"), 60, what="the end")
    finally:
        p.kill()
    return (tmp_path / "labq-1.out").read_text()


def test_time_limit(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("/bin/sh", "-c", "echo up; sleep 60"), workdir=str(tmp_path), time_limit=1)
    assert run(runner_env(redis_server, tmp_path))["outcome"] == "timeout"
    out = (tmp_path / "labq-1.out").read_text()
    assert re.search(rf"^labq: error: \*\*\* JOB 1 ON {NODE} CANCELLED AT {STAMP} DUE TO TIME LIMIT \*\*\*$", out, re.M), out


def test_cancel(real_redis, redis_server, tmp_path):
    out = stop_with(real_redis, redis_server, tmp_path, "cancel")
    assert re.search(rf"^labq: error: \*\*\* JOB 1 ON {NODE} CANCELLED AT {STAMP} \*\*\*$", out, re.M), out


def test_preemption_names_its_grace(real_redis, redis_server, tmp_path):
    out = stop_with(real_redis, redis_server, tmp_path, "preempt:2")
    assert re.search(rf"CANCELLED AT {STAMP} DUE TO PREEMPTION \(SIG\w+, grace 2s, then SIGTERM; requeued\) \*\*\*$",
                     out, re.M), out


def test_oom(real_redis, redis_server, tmp_path):
    hog = "import time; time.sleep(1.5); x = bytearray(200 << 20); x[::4096] = b'1' * len(x[::4096]); time.sleep(60)"
    put_job(real_redis, argv=(PY, "-c", hog), workdir=str(tmp_path), mem=64 * MB, mem_limit=96 * MB, time_limit=120)
    assert run(runner_env(redis_server, tmp_path))["outcome"] == "oom"
    out = (tmp_path / "labq-1.out").read_text()
    assert "labq: error: Detected 1 oom_kill event in JOB 1. Some of the job's processes were OOM Killed " \
           "(memory limit 96M)." in out, out
