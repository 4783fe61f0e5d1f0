"""examples/train.py: trains, checkpoints every epoch, resumes; and through the runner, a cancelled
attempt's checkpoint (in $LABQ_CHECKPOINT_DIR) is where the next attempt starts."""
import json
import os
import subprocess
import sys

from tests.harness import ROOT, K, events, finished, put_job, runner_env, start_runner, wait_for

TRAIN = os.path.join(ROOT, "examples", "train.py")


def test_trains_checkpoints_and_resumes(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LABQ_CHECKPOINT_DIR": str(tmp_path / "ck")}
    first = subprocess.run([sys.executable, TRAIN, "--seconds", "0.4", "--epochs", "2", "--seed", "3"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert [ln.split()[1] for ln in first.stdout.splitlines() if ln.startswith("epoch")] == ["1/2", "2/2"]
    state = json.loads((tmp_path / "ck" / "train.json").read_text())
    assert state["epoch"] == 2 and len(state["w"]) == 8 and state["loss"] < 0.69   # better than chance
    again = subprocess.run([sys.executable, TRAIN, "--seconds", "0.6", "--epochs", "3", "--seed", "3"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert "resuming" in again.stdout and "epoch 3/3" in again.stdout and "epoch 1/3" not in again.stdout
    assert not [f for f in os.listdir(tmp_path / "ck") if ".tmp" in f], "atomic writes leave no temp files"


def test_cancelled_attempt_checkpoints_and_the_next_attempt_resumes(real_redis, redis_server, tmp_path):
    argv = (sys.executable, TRAIN, "--seconds", "60", "--epochs", "100")
    put_job(real_redis, jid=3, argv=argv, workdir=str(tmp_path), time_limit=600)
    p = start_runner(runner_env(redis_server, tmp_path, LABQ_KILL_WAIT="10"), jid=3)
    log = tmp_path / "labq-3.out"
    wait_for(lambda: log.exists() and "epoch 2/" in log.read_text(), timeout=60, what="two epochs")
    real_redis.set(K.control(3), "cancel")
    p.communicate(timeout=60)
    assert finished(real_redis)["outcome"] == "cancelled"
    assert "got SIGTERM: checkpoint saved" in log.read_text(), "SIGTERM came first, with time to save"

    real_redis.flushall()
    put_job(real_redis, jid=3, attempt=2, argv=(sys.executable, TRAIN, "--seconds", "0.1", "--epochs", "1"),
            workdir=str(tmp_path), time_limit=600, restart_count=1)
    p = start_runner(runner_env(redis_server, tmp_path), jid=3, attempt=2)
    p.communicate(timeout=60)
    assert events(real_redis, "finished")[0]["body"]["outcome"] == "completed"
    assert "resuming from" in log.read_text().split("got SIGTERM")[1], "appended log shows the resume"
