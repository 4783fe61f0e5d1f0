"""A job's environment, end to end: the submitter's venv reaches the job (sbatch's --export=ALL),
--export=NONE and --export=VAR[=value] behave as SLURM documents, labq's and SLURM's job variables
are set, and the daemons' own environment never leaks into a job.

One stack for the module (real redis-server, scheduler and worker processes); the CLI runs as a
user would run it, with an environment of the test's choosing.
"""
import os
import subprocess
import sys

import pytest

from labq.scheduler import logpath, states
from tests.conftest import wait_for
from tests.test_e2e import E2E, pytestmark  # noqa: F401  (the same markers and skip)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)     # the test's own venv: it has `python`, /usr/bin has not
SECRET = "daemon-only-secret-7f3a"


@pytest.fixture(scope="module")
def stack():
    # The daemons inherit this variable; no job may see it.
    os.environ["LABQ_TEST_DAEMON_SECRET"] = SECRET
    try:
        e = E2E()
    finally:
        del os.environ["LABQ_TEST_DAEMON_SECRET"]
    yield e
    e.close()


def user_env(e, **extra) -> dict:
    """A researcher's shell inside a venv: the venv first on PATH, no daemon variables."""
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "VIRTUAL_ENV": os.path.dirname(VENV_BIN),
           "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "LABQ_REDIS_URL": e.stack.url,
           "PYTHONPATH": ROOT}
    env.update(extra)
    return env


def labq(e, *args, env):
    cmd = [sys.executable, "-m", "labq.cli.main", "--config", e.cfg_path, *args]
    return subprocess.run(cmd, env=env, cwd=e.work, capture_output=True, text=True, timeout=120)


def run(e, *args, env) -> str:
    """Submit, wait for the end, return the job's output."""
    p = labq(e, "sub", "--parsable", "-A", "eta", "-o", "out-%j.txt", *args, env=env)
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.strip())
    j = e.wait_state(jid, states.TERMINAL, 90)
    with open(logpath.out_path(j)) as f:
        out = f.read()
    assert j.state == states.COMPLETED, (j.state, j.detail, out)
    return out


SHOW = 'echo "FOO=${FOO-unset} BAR=${BAR-unset} PATH=$PATH"'


def test_readme_example_runs_from_inside_a_venv(stack):
    out = run(stack, "--", "python", os.path.join(ROOT, "examples", "train.py"), "--seconds", "1", "--epochs", "2",
              env=user_env(stack))
    assert "loss" in out


def test_export_all_is_the_default(stack):
    out = run(stack, "--", "/bin/sh", "-c", SHOW, env=user_env(stack, FOO="outer", BAR="b"))
    assert out.startswith(f"FOO=outer BAR=b PATH={VENV_BIN}:")


def test_export_none_gives_a_clean_environment(stack):
    out = run(stack, "--export=NONE", "--", "/bin/sh", "-c", SHOW, env=user_env(stack, FOO="outer", BAR="b"))
    assert out.strip() == "FOO=unset BAR=unset PATH=/usr/local/bin:/usr/bin:/bin"


def test_export_list_gives_only_those_variables(stack):
    env = user_env(stack, FOO="outer", BAR="b")
    assert run(stack, "--export=FOO=1", "--", "/bin/sh", "-c", SHOW, env=env).startswith("FOO=1 BAR=unset PATH=/usr/")
    assert run(stack, "--export=BAR,FOO=1", "--", "/bin/sh", "-c", SHOW, env=env).startswith("FOO=1 BAR=b PATH=/usr/")
    assert run(stack, "--export=ALL,FOO=2", "--", "/bin/sh", "-c", SHOW, env=env).startswith(f"FOO=2 BAR=b PATH={VENV_BIN}")


def test_job_variables_and_no_daemon_secret(stack):
    # The submitter's own job variables (submitting from inside a job) must not leak into the new job.
    env = user_env(stack, SLURM_ARRAY_TASK_ID="99", LABQ_ARRAY_TASK_ID="99")
    out = run(stack, "-a", "3-3", "-c", "2", "-G", "1", "-J", "envjob", "--",
              "/bin/sh", "-c", "env | sort", env=env)
    vars_ = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert SECRET not in out
    assert vars_["SLURM_JOB_ID"] == vars_["LABQ_JOB_ID"]
    assert vars_["SLURM_ARRAY_TASK_ID"] == vars_["LABQ_ARRAY_TASK_ID"] == "3"
    assert vars_["SLURM_ARRAY_JOB_ID"] == vars_["LABQ_ARRAY_JOB_ID"]
    assert vars_["SLURM_JOB_NAME"] == "envjob" and vars_["SLURM_CPUS_PER_TASK"] == "2"
    assert vars_["SLURM_SUBMIT_DIR"] == stack.work and vars_["SLURM_JOB_NUM_NODES"] == "1"
    assert vars_["CUDA_VISIBLE_DEVICES"] == vars_["LABQ_JOB_GPUS"] and vars_["CUDA_VISIBLE_DEVICES"]
    assert "SLURM_NTASKS" not in vars_          # Lightning would take the job for an srun step


def test_an_environment_over_the_bound_is_refused_at_the_client(stack):
    p = labq(stack, "sub", "--", "true", env=user_env(stack, **{f"HUGE{i}": "x" * 100_000 for i in range(3)}))
    assert p.returncode == 2 and "--export=NONE" in p.stderr and "Traceback" not in p.stderr
