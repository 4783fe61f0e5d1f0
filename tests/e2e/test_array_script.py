"""An array whose script is real-sized (several KB, far above codec.SHARED_SPEC, so its tasks' records
refer to one stored copy) runs every task, submitted by a real unprivileged user the suite creates:
each task's output is its own, and `acct --json` shows the script. Real redis-server, scheduler and
worker processes (root only: creating the user and running jobs as it)."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid

import pytest

from labq.scheduler import states
from labq.scheduler.store import codec
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, ROOT, wait_for

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating a user and running jobs as it need root and useradd")]

PADDING = "".join(f"# padding line {i} {'.' * 60}\n" for i in range(80))
SCRIPT = ("#!/bin/bash\n#SBATCH -J big-array\n#SBATCH -t 5\n#SBATCH -o out-%A_%a.txt\n" + PADDING +
          'echo "task=$SLURM_ARRAY_TASK_ID user=$(id -un)"\n')


@pytest.fixture(scope="module")
def user():
    name = f"lqs{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/tmp", "--shell", "/bin/sh", "--user-group", name],
                   check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def shared(user):
    """A stack whose jobs run as their submitter and whose Redis socket the user may reach."""
    text = (E2E_CONFIG.replace('run_as = "self"', 'run_as = "submitter"')
            .replace('users = ["{user}"]', f'users = ["{user.pw_name}"]'))
    e = E2E(text, prefix="labq-arrscript-")
    sock = e.stack.url.removeprefix("unix://")
    for d in (e.dir, os.path.dirname(sock)):
        os.chmod(d, 0o755)
    os.chmod(sock, 0o777)
    yield e
    e.close()


def as_user(e, pw, *args, cwd):
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": pw.pw_name, "LOGNAME": pw.pw_name,
           "LANG": "C.UTF-8", "LABQ_REDIS_URL": e.stack.url, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", e.cfg_path, *args], env=env, cwd=cwd,
                          user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], capture_output=True, text=True,
                          timeout=120)


def test_a_multi_kb_script_array_runs_every_task_as_the_user(shared, user):
    assert len(SCRIPT) > 4 * codec.SHARED_SPEC
    wd = os.path.join(shared.dir, "home")
    os.mkdir(wd)
    os.chown(wd, user.pw_uid, user.pw_gid)
    with open(os.path.join(wd, "big.sh"), "w") as f:
        f.write(SCRIPT)
    p = as_user(shared, user, "sub", "--parsable", "-A", "eta", "-a", "0-3", "big.sh", cwd=wd)
    assert p.returncode == 0, p.stderr
    arr = int(p.stdout.strip().split("_")[0])
    ids = range(arr, arr + 4)
    jobs = wait_for(lambda: (js := [shared.job(i) for i in ids]) and all(j.state in states.TERMINAL for j in js)
                    and js, 120, what="the array's tasks to end")
    assert [j.state for j in jobs] == [states.COMPLETED] * 4, [(j.id, j.state, j.detail) for j in jobs]
    for i, j in enumerate(jobs):
        out = os.path.join(wd, f"out-{arr}_{i}.txt")
        assert open(out).read() == f"task={i} user={user.pw_name}\n"
        assert os.stat(out).st_uid == user.pw_uid
    p = as_user(shared, user, "acct", "-j", str(arr + 2), "--json", cwd=wd)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    row = rows[0] if isinstance(rows, list) else rows
    assert row["command"] == ["<script>"] and row["script"] == SCRIPT, row


def test_a_requeued_task_keeps_its_script(shared, user):
    wd = os.path.join(shared.dir, "requeue")
    os.mkdir(wd)
    os.chown(wd, user.pw_uid, user.pw_gid)
    marker = os.path.join(wd, "first")
    with open(os.path.join(wd, "big.sh"), "w") as f:
        f.write(SCRIPT.replace('echo "task', f'if [ ! -e {marker} ]; then touch {marker}; sleep 300; fi\necho "task'))
    p = as_user(shared, user, "sub", "--parsable", "-A", "eta", "-a", "0-0", "big.sh", cwd=wd)
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.strip().split("_")[0])
    shared.wait_state(jid, {states.RUNNING}, 60)
    wait_for(lambda: os.path.exists(marker), 60, what="the first attempt to start")
    p = as_user(shared, user, "requeue", str(jid), cwd=wd)
    assert p.returncode == 0, p.stderr
    j = wait_for(lambda: (j := shared.job(jid)) and len(j.attempts) >= 2 and j.state in states.TERMINAL and j,
                 120, what="the requeued task to end")
    assert j.state == states.COMPLETED, (j.state, j.detail)
    assert open(os.path.join(wd, f"out-{jid}_0.txt")).read().endswith(f"task=0 user={user.pw_name}\n")
