"""Warning signal before the limit, the checkpoint exit code, and checkpoints seen in the directory."""
import signal

from tests.harness import PY, finished, put_job, run, runner_env

# Writes a checkpoint on USR1 and exits 0; records when the signal came relative to its start.
ON_USR1 = """
import os, signal, sys, time
t0 = time.time()
def ckpt(*_):
    d = os.environ["LABQ_CHECKPOINT_DIR"]
    open(os.path.join(d, "state.json"), "w").write("{}")
    print("USR1 after %.1f" % (time.time() - t0), flush=True)
    sys.exit(0)
signal.signal(signal.SIGUSR1, ckpt)
time.sleep(60)
"""


def test_signal_comes_before_the_limit_and_the_checkpoint_is_recorded(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=(PY, "-c", ON_USR1), workdir=str(tmp_path), time_limit=4, warn_signal=("USR1", 2))
    res = run(runner_env(redis_server, tmp_path))
    body = finished(real_redis)
    assert res["outcome"] == "completed", (body, (tmp_path / "labq-1.out").read_text())
    after = float((tmp_path / "labq-1.out").read_text().split("USR1 after ")[1])
    assert 1.5 <= after <= 3.5, "USR1 about 2 s before a 4 s limit (within the runner's 2 s tolerance)"
    assert body["last_checkpoint"] >= body["start_time"]


def test_checkpoint_exit_code_is_its_own_outcome(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("sh", "-c", "exit 85"), workdir=str(tmp_path), checkpoint_exit_code=85)
    assert run(runner_env(redis_server, tmp_path))["outcome"] == "checkpoint_exit"


def test_timeout_reports_the_last_checkpoint(real_redis, redis_server, tmp_path):
    script = ("import os, time; d = os.environ['LABQ_CHECKPOINT_DIR']; os.makedirs(d + '/ckpt-1'); "
              "open(d + '/ckpt-1/w', 'w').write('x'); time.sleep(60)")
    put_job(real_redis, argv=(PY, "-c", script), workdir=str(tmp_path), time_limit=3)
    run(runner_env(redis_server, tmp_path))
    body = finished(real_redis)
    assert body["outcome"] == "timeout" and body["signal"] == signal.SIGTERM
    assert body["start_time"] <= body["last_checkpoint"] <= body["end_time"]
