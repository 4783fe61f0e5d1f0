"""Run as the submitter, checked with a real unprivileged user the suite creates (root only): uid,
primary gid and exactly the user's own groups, the working directory entered after privileges are
dropped, logs and files owned by the user, an environment built from scratch, no agent password."""
import grp
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

from labq.scheduler.jobs.model import Job
from labq.scheduler.store import codec
from labq.worker import batchenv, launch
from tests.harness import ROOT, K, finished, preload_spy, put_job, run, runner_env, spied, start_hooked

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                reason="creating a user and dropping privileges need root and useradd")

ALLOWED_ENV = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "PWD", "SHLVL", "_", "OLDPWD",
               "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS"}


@pytest.fixture
def user():
    """A fresh user `lqu<hex>` with a private group and one extra group `lqg<hex>`."""
    tag = uuid.uuid4().hex[:8]
    name, extra = f"lqu{tag}", f"lqg{tag}"
    subprocess.run(["groupadd", extra], check=True)
    subprocess.run(["useradd", "--no-create-home", "--home-dir", f"/nonexistent/{name}", "--shell", "/bin/sh",
                    "--user-group", "--groups", extra, name], check=True)
    try:
        yield pwd.getpwnam(name), grp.getgrnam(extra)
    finally:
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", extra], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture
def shared_tmp():
    d = tempfile.mkdtemp(prefix="labq-ident-", dir="/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_job_runs_as_the_created_user_with_only_their_groups(real_redis, redis_server, shared_tmp, user):
    pw, extra = user
    wd = str(shared_tmp / "wd")
    os.mkdir(wd, 0o700)                 # only the user (and root) may enter
    os.chown(wd, pw.pw_uid, pw.pw_gid)
    script = "id -u; id -g; id -G; pwd; umask; touch made-by-job; env"
    put_job(real_redis, user=pw.pw_name, argv=("/bin/sh", "-c", script), workdir=wd, gpus=())
    # The agent authenticates as its own ACL user; the job must learn where Redis is, not how to log in.
    real_redis.acl_setuser("agent", enabled=True, passwords=["+agentsecret"], keys=["*"], channels=["*"],
                           commands=["+@all"])
    url = redis_server.url.replace("unix://", "unix://agent:agentsecret@")
    env = runner_env(redis_server, shared_tmp, LABQ_RUN_AS="submitter", LABQ_REDIS_URL=url)
    try:
        assert run(env)["outcome"] == "completed", finished(real_redis)
    finally:
        real_redis.acl_deluser("agent")
    log = os.path.join(wd, "labq-1.out")
    lines = open(log).read().splitlines()
    uid, gid, groups, cwd, umask = lines[:5]
    job_env = dict(line.split("=", 1) for line in lines[5:] if "=" in line)
    assert int(uid) == pw.pw_uid and int(gid) == pw.pw_gid
    assert {int(g) for g in groups.split()} == {pw.pw_gid, extra.gr_gid}, "the user's groups and no others"
    assert cwd == wd and umask == "0022"
    assert os.stat(log).st_uid == pw.pw_uid and os.stat(os.path.join(wd, "made-by-job")).st_uid == pw.pw_uid
    assert job_env["USER"] == job_env["LOGNAME"] == pw.pw_name and job_env["HOME"] == pw.pw_dir
    # labq's own variables and their SLURM, PBS and SGE names (worker/jobenv.py, batchenv.py); the job
    # record exported nothing
    batch = set(batchenv.vars(Job(id=1, user=pw.pw_name, account="a"), pw.pw_name, pw.pw_dir, "n", None, "f", "t", True, True))
    leaked = {k for k in job_env if not k.startswith(("LABQ_", "SLURM_", "SLURMD_"))} - ALLOWED_ENV - batch
    assert not leaked, f"not built from scratch: {leaked}"
    assert "agentsecret" not in open(log).read(), "the agent's Redis password never reaches a job"
    assert job_env["LABQ_REDIS_URL"] == launch.public_url(url) == redis_server.url


def test_a_workdir_the_user_cannot_enter_is_refused_before_anything_runs(real_redis, redis_server, shared_tmp, user):
    """Popen's cwd= is applied while still root; the runner checks and enters as the user."""
    pw, _ = user
    wd = str(shared_tmp / "root-only")
    os.mkdir(wd, 0o700)                 # root's: the user may not enter
    marker = os.path.join(shared_tmp, "ran")
    put_job(real_redis, user=pw.pw_name, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=wd, gpus=())
    env = runner_env(redis_server, shared_tmp, LABQ_RUN_AS="submitter")
    assert run(env)["outcome"] == "error"
    assert "working directory" in finished(real_redis)["message"] and not os.path.exists(marker)


def test_root_jobs_need_allow_root_and_self_runs_as_the_agent(real_redis, redis_server, shared_tmp, user):
    pw, _ = user
    put_job(real_redis, user="root", argv=("/bin/sh", "-c", "id -u"), workdir=str(shared_tmp), gpus=())
    assert run(runner_env(redis_server, shared_tmp, LABQ_RUN_AS="submitter"))["outcome"] == "error"
    assert "refusing to run a job as root" in finished(real_redis)["message"]
    real_redis.flushall()
    # run_as = "self": every job runs as the agent's own user, whoever submitted it.
    put_job(real_redis, user=pw.pw_name, argv=("/bin/sh", "-c", "id -u"), workdir=str(shared_tmp), gpus=())
    assert run(runner_env(redis_server, shared_tmp, LABQ_RUN_AS="self"))["outcome"] == "completed"
    assert open(os.path.join(shared_tmp, "labq-1.out")).read().strip() == str(os.geteuid())


def test_an_exported_ld_preload_never_runs_as_root_on_a_worker_without_the_native_module(
        real_redis, redis_server, shared_tmp, user):
    """Issue 34's blocker: `labq sub --export=ALL,LD_PRELOAD=/home/me/evil.so` on a worker where
    worker/_clone.c is not built ran the user's library as uid 0 in setpriv. The runner is forced
    onto that path here (as it would be without a C compiler) and the library, built by the test,
    records who loads it: only the job's user."""
    if not shutil.which("gcc") or not shutil.which("setpriv"):
        pytest.skip("gcc builds the library; setpriv is the path under test")
    pw, _ = user
    lib, out = preload_spy(str(shared_tmp))
    wd = shared_tmp / "wd"
    wd.mkdir()
    os.chown(wd, pw.pw_uid, pw.pw_gid)
    job = put_job(real_redis, user=pw.pw_name, argv=("/bin/sh", "-c", "echo $LD_PRELOAD"), workdir=str(wd),
                  gpus=(), export="ALL",
                  env=(("LD_PRELOAD", lib), ("GCONV_PATH", str(wd)), ("PATH", "/usr/bin:/bin")))
    real_redis.set(K.job_env(codec.env_ref(job)), codec.env_json(job))      # as the scheduler stores it
    env = runner_env(redis_server, shared_tmp, LABQ_RUN_AS="submitter")
    p = start_hooked(env, "from labq.worker import spawn\nspawn._native_ok = False")
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    assert finished(real_redis)["outcome"] == "completed"
    assert open(wd / "labq-1.out").read().strip() == lib, "the job got what it exported"
    loaded = spied(out)
    assert loaded and {uid for uid, _ in loaded} == {pw.pw_uid}, f"loaded by a root process: {loaded}"


@pytest.mark.parametrize("worker, refused", [('run_as = "self"', True), ('run_as = "self"\nallow_root = true', False),
                                             ('run_as = "submitter"', False)])
def test_a_root_worker_that_would_run_every_users_job_as_root_refuses_to_start(shared_tmp, worker, refused):
    """Issue 34: under munge (several users) a root worker with run_as = "self" would run each
    user's input as root: it refuses to start, in one line, unless allow_root says so."""
    cfg = shared_tmp / "labq.toml"
    cfg.write_text(f'[redis]\nurl = "unix://{shared_tmp}/no-redis.sock"\n[security]\nauth = "munge"\n'
                   f'[worker]\nname = "n1"\nspool = "{shared_tmp}/spool"\n{worker}\n')
    p = subprocess.run([sys.executable, "-m", "labq", "--config", str(cfg), "worker"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    says = 'worker.run_as = "self" as root would run every user\'s job as root'
    if refused:
        assert p.returncode == 3 and p.stderr.count("\n") == 1 and says in p.stderr, p.stderr
    else:
        assert p.returncode == 4 and says not in p.stderr, p.stderr     # on to Redis, which is not there
