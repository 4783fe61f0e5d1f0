"""A SLURM user's habits, as a real unprivileged user the suite creates (jobs run as them): an array
whose script is real-sized (several KB, far above codec.SHARED_SPEC, so its tasks' records refer to
one stored copy) runs every task, requeued too, and `acct --json` shows the script; -o /dev/null;
--mem-per-cpu is a memory limit; --signal=B: reaches the batch shell alone; MaxRSS; `del -u`;
`stat -h`; --kill-on-invalid-dep=yes; acct shows a non-admin their own jobs only. Real
redis-server, scheduler and worker processes (root only: creating the user and running jobs as it)."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid

import pytest

from labq.scheduler.jobs import states
from labq.scheduler.store import codec
from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, ROOT, wait_for

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating a user and running jobs as it need root and useradd")]

PADDING = "".join(f"# padding line {i} {'.' * 60}\n" for i in range(80))
SCRIPT = ("#!/bin/bash\n#SBATCH -J big-array\n#SBATCH -t 5\n#SBATCH -o out-%A_%a.txt\n" + PADDING +
          'echo "task=$SLURM_ARRAY_TASK_ID user=$(id -un)"\n')


@pytest.fixture(scope="module")
def people():
    """Two real unprivileged users: the one the tests follow, and another."""
    names = [f"lqs{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        for name in names:
            subprocess.run(["useradd", "--no-create-home", "--home-dir", "/tmp", "--shell", "/bin/sh", "--user-group",
                            name], check=True)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in names:
            subprocess.run(["userdel", name], check=False, stderr=subprocess.DEVNULL)
            subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def user(people):
    return people[0]


@pytest.fixture(scope="module")
def shared(people):
    """A stack whose jobs run as their submitter and whose Redis socket the users may reach."""
    text = (E2E_CONFIG.replace('run_as = "self"', 'run_as = "submitter"')
            .replace('users = ["{user}"]', f'users = {json.dumps([p.pw_name for p in people])}'))
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
    # The script is not in what the client role reads (issue 34): null there, its owner's through the scheduler.
    assert row["command"] == ["<script>"] and row["script"] is None, row
    p = as_user(shared, user, "show", "--script", f"{arr}_2", cwd=wd)
    assert p.returncode == 0 and p.stdout == SCRIPT, p.stderr


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


def _dir(shared, user, name):
    wd = os.path.join(shared.dir, name)
    os.mkdir(wd)
    os.chown(wd, user.pw_uid, user.pw_gid)
    return wd


def _sub(shared, user, wd, *args) -> int:
    p = as_user(shared, user, "sub", "--parsable", "-A", "eta", *args, cwd=wd)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip().split("_")[0])


def _ended(shared, jid):
    return shared.wait_state(jid, states.TERMINAL, 120)


def test_output_to_dev_null_runs(shared, user):
    wd = _dir(shared, user, "null")
    jid = _sub(shared, user, wd, "-o", "/dev/null", "--", "/bin/sh", "-c", "echo thrown away")
    j = _ended(shared, jid)
    assert j.state == states.COMPLETED, (j.state, j.detail)
    assert os.listdir(wd) == []


def test_mem_per_cpu_is_the_jobs_memory_limit(shared, user):
    wd = _dir(shared, user, "mem")
    hog = "b = bytearray(400 << 20); import time; time.sleep(5)"
    jid = _sub(shared, user, wd, "-c", "2", "--mem-per-cpu", "64M", "--", "/usr/bin/python3", "-c", hog)
    assert shared.job(jid).mem == 128 << 20
    j = _ended(shared, jid)
    assert j.state == states.OOM, (j.state, j.detail)


def test_signal_b_reaches_the_batch_shell_and_not_its_children(shared, user):
    wd = _dir(shared, user, "sigb")
    with open(os.path.join(wd, "ckpt.sh"), "w") as f:
        f.write("#!/bin/bash\n#SBATCH -t 1\n#SBATCH --signal=B:USR1@57\n#SBATCH -o out.txt\n"
                "trap 'echo shell-got-USR1' USR1\n"
                "/usr/bin/python3 -c 'import time; time.sleep(8); print(\"child-done\", flush=True)' &\n"
                "child=$!\nwait $child\nwait $child\necho child-exit=$?\n")
    jid = _sub(shared, user, wd, "ckpt.sh")
    j = _ended(shared, jid)
    out = open(os.path.join(wd, "out.txt")).read()
    assert j.state == states.COMPLETED and out.split() == ["shell-got-USR1", "child-done", "child-exit=0"], out


def test_maxrss_in_acct_format(shared, user):
    wd = _dir(shared, user, "rss")
    jid = _sub(shared, user, wd, "--", "/usr/bin/python3", "-c",
               "b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(4)")
    assert _ended(shared, jid).state == states.COMPLETED
    p = as_user(shared, user, "acct", "-j", str(jid), "--format", "JobID,MaxRSS", "-P", "-n", cwd=wd)
    assert p.returncode == 0, p.stderr
    shown, rss = p.stdout.strip().split("|")
    assert shown == str(jid) and rss.endswith("K") and int(rss[:-1]) >= 80 << 10, p.stdout


def test_del_u_cancels_every_job_of_the_user(shared, user):
    wd = _dir(shared, user, "delu")
    ids = [_sub(shared, user, wd, "-H", "--", "true") for _ in range(2)]
    arr = _sub(shared, user, wd, "-H", "-a", "0-2", "--", "true")
    p = as_user(shared, user, "del", "-u", user.pw_name, cwd=wd)
    assert p.returncode == 0, p.stderr
    assert {shared.job(i).state for i in [*ids, arr, arr + 2]} == {states.CANCELLED}
    p = as_user(shared, user, "del", "-u", user.pw_name, cwd=wd)
    assert p.returncode == 0 and "no pending or running jobs" in p.stdout


def test_stat_h_drops_the_header(shared, user):
    wd = _dir(shared, user, "stath")
    jid = _sub(shared, user, wd, "-H", "--", "true")
    try:
        with_header = as_user(shared, user, "stat", "-u", user.pw_name, cwd=wd).stdout
        p = as_user(shared, user, "stat", "-h", "-u", user.pw_name, cwd=wd)
        assert p.returncode == 0 and "JOBID" in with_header and "JOBID" not in p.stdout, p.stdout
        assert str(jid) in p.stdout and "Usage" not in p.stdout
    finally:
        as_user(shared, user, "del", str(jid), cwd=wd)


def test_kill_on_invalid_dep_yes_cancels_a_job_whose_dependency_failed(shared, user):
    wd = _dir(shared, user, "dep")
    bad = _sub(shared, user, wd, "--", "false")
    assert _ended(shared, bad).state == states.FAILED
    jid = _sub(shared, user, wd, "--kill-on-invalid-dep=yes", "-d", f"afterok:{bad}", "--", "true")
    assert _ended(shared, jid).state == states.CANCELLED


def test_acct_shows_a_user_their_own_jobs_and_an_admin_everyones(shared, people):
    user, other = people
    wd = _dir(shared, user, "acct")
    mine = _sub(shared, user, wd, "--", "true")
    theirs = _sub(shared, other, "/tmp", "-o", "/dev/null", "--", "true")
    for jid in (mine, theirs):
        assert _ended(shared, jid).state == states.COMPLETED
    p = as_user(shared, user, "acct", "-P", "-n", "--format", "JobID,User", cwd=wd)
    assert p.returncode == 0, p.stderr
    users = {line.split("|")[1] for line in p.stdout.split()}
    assert users == {user.pw_name} and f"{mine}|" in p.stdout
    p = as_user(shared, user, "acct", "-u", other.pw_name, cwd=wd)
    assert p.returncode == 3 and "only admins" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    p = shared.labq("acct", "-P", "-n", "--format", "JobID,User")      # root: an admin
    assert {f"{mine}|{user.pw_name}", f"{theirs}|{other.pw_name}"} <= set(p.stdout.split()), p.stdout


def test_another_users_private_socket_gets_a_hint(user, tmp_path):
    """Root's `labq up` socket (in a 0700 directory): the user's labq says what it is and what to do."""
    import socket
    d = tmp_path / "root-up"
    d.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "redis.sock"))
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": ROOT, "LABQ_REDIS_URL": f"unix://{d}/redis.sock"}
        p = subprocess.run([sys.executable, "-m", "labq.cli.main", "stat"], env=env, cwd="/tmp", user=user.pw_uid,
                           group=user.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=60)
        assert p.returncode == 4 and "Permission denied" in p.stderr and "run your own `labq up`" in p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
    finally:
        s.close()
