"""Files keep the submitter's privacy: a job and its log files get the umask captured at submit
(SLURM's behaviour), and `labq logs` of another user's job is refused unless the file's mode lets
the caller read it, or the caller is an admin. Real runner, real users (root only)."""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

from labq.scheduler.jobs import states
from tests.harness import E2E_MARKS, put_job, run, runner_env, start_redis

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating users and dropping privileges need root and useradd")]


@pytest.fixture(scope="module")
def lab():
    """A Redis every local user reaches, two users, a shared 0755 work area and a config."""
    rp = start_redis(perm="777")
    names = [f"lqf{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for n in names:
        subprocess.run(["useradd", "--no-create-home", "--home-dir", "/tmp", "--shell", "/bin/sh", "--user-group", n],
                       check=True)
    d = tempfile.mkdtemp(prefix="labq-files-", dir="/tmp")
    os.chmod(d, 0o755)
    cfg = os.path.join(d, "labq.toml")
    with open(cfg, "w") as f:
        f.write(f'[redis]\nurl = "{rp.url}"\n')
    os.chmod(cfg, 0o644)
    yield rp, [pwd.getpwnam(n) for n in names], d, cfg
    for n in names:
        subprocess.run(["userdel", n], check=False)
        subprocess.run(["groupdel", n], check=False, stderr=subprocess.DEVNULL)
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def as_user(pw, argv):
    return subprocess.run(argv, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd="/tmp", capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})


def run_as_victim(rp, d, victim, umask, jid):
    import pathlib
    r = rp.client()
    wd = os.path.join(d, f"wd{jid}")
    os.mkdir(wd, 0o755)
    os.chown(wd, victim.pw_uid, victim.pw_gid)
    put_job(r, jid=jid, user=victim.pw_name, argv=("/bin/sh", "-c", "umask; echo secret-of-victim; touch made"),
            workdir=wd, gpus=(), umask=umask)
    env = runner_env(rp, pathlib.Path(d), LABQ_RUN_AS="submitter")
    assert run(env, jid=jid)["outcome"] == "completed"
    r.close()
    return wd


def test_a_private_umask_keeps_the_output_from_other_users(lab):
    rp, (victim, mallory), d, cfg = lab
    wd = run_as_victim(rp, d, victim, 0o077, 1)
    out = os.path.join(wd, "labq-1.out")
    assert os.stat(out).st_mode & 0o777 == 0o600, "log created with the submitter's umask"
    assert os.stat(os.path.join(wd, "made")).st_mode & 0o777 == 0o600, "the job runs with it too"
    assert open(out).read().splitlines()[0] == "0077"
    p = as_user(mallory, [sys.executable, "-m", "labq", "--config", cfg, "logs", "1"])
    assert p.returncode == 3 and "secret-of-victim" not in p.stdout, (p.returncode, p.stdout, p.stderr)
    assert f"belongs to {victim.pw_name}" in p.stderr and "\n" == p.stderr[-1] and p.stderr.count("\n") == 1
    p = as_user(victim, [sys.executable, "-m", "labq", "--config", cfg, "logs", "1"])
    assert p.returncode == 0 and "secret-of-victim" in p.stdout, p.stderr


def test_a_shared_umask_lets_others_read_as_the_mode_says(lab):
    rp, (victim, mallory), d, cfg = lab
    wd = run_as_victim(rp, d, victim, 0o022, 2)
    assert os.stat(os.path.join(wd, "labq-2.out")).st_mode & 0o777 == 0o644
    p = as_user(mallory, [sys.executable, "-m", "labq", "--config", cfg, "logs", "2"])
    assert p.returncode == 0 and "secret-of-victim" in p.stdout, p.stderr


def test_the_client_sends_its_umask_with_a_submit():
    from labq.scheduler.client import Client
    from labq.scheduler.settings import config
    sent = {}

    class Probe(Client):
        def request(self, op, body, timeout=30.0, tries=3):
            sent.update(body)
            return {"ok": True}
    old = os.umask(0o027)
    try:
        Probe(config.loads(""), url="unix://x", user="u", r=object()).submit({"argv": ["true"]})
    finally:
        os.umask(old)
    assert sent["umask"] == 0o027 and states.PENDING == "PD"
