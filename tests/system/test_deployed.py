"""The install as shipped, as a lab runs it (issue 36): `make install-system` into a scratch prefix;
Redis as `redis`; the scheduler as an unprivileged system user with the unit's environment
(STATE_DIRECTORY, UMask=0077, a home it cannot write); two workers as root (node1, node2), jobs run
as their submitters; the Redis ACL roles of systemd/README.md §8 (default off, a password file per
daemon); munge on (where installed); two users who are not root submit realistic scripts (#SBATCH lines,
an array, a few KB) with the installed `labq`; the scheduler archives everything, and each user's
acct, show, report and ledger verify answer the same before and after (the archive is the
scheduler's, 0750: the users read it through the scheduler). The admin guide's own steps (backup,
restore, rollback, accept-loss, upgrade) run as deployed in tests/e2e/test_admin_guide.py."""
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

from tests.harness import ROOT, start_munged, wait_for
from tests.system.site import Site, system_user

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                                  reason="install-system, users and munge need root")]

CONFIG = """[redis]
url = "{url}"
password_file = "{s}/etc/labq/secrets"
[scheduler]
tick = 0.2
node_lease = "10s"
{security}[history]
keep = "0s"
[worker]
name = "{node}"
cpus = 2
mem = "4G"
slots = 4
run_as = "submitter"
"""

SWEEP = """#!/bin/bash
#SBATCH --job-name=lr-sweep
#SBATCH --time=00:10:00
#SBATCH --cpus-per-task=1
#SBATCH --mem=200M
#SBATCH --array=1-4
#SBATCH --output=%x-%A_%a.out
# A learning-rate sweep as people write them: one task per rate, its own output file.
{padding}
rates=(0 0.1 0.03 0.01 0.003)
lr=${{rates[$LABQ_ARRAY_TASK_ID]}}
echo "task $LABQ_ARRAY_TASK_ID lr=$lr as $(id -un) in $PWD"
python3 -c "import time; s = sum(i * i for i in range(200000)); time.sleep(2); print('loss', s % 97)"
"""

EVAL = """#!/bin/sh
#SBATCH -J eval
#SBATCH -t 5
#SBATCH -c 1
echo "eval as $(id -un)"; sleep 1
"""


def _person(s: pathlib.Path):
    name = f"lqp{uuid.uuid4().hex[:8]}"
    home = s / "home" / name
    subprocess.run(["useradd", "--home-dir", str(home), "--shell", "/bin/sh", "--user-group", name], check=True)
    pw = pwd.getpwnam(name)
    home.mkdir(parents=True)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    return pw


def test_the_install_as_shipped_serves_two_users_on_two_nodes_before_and_after_archiving():
    started = time.monotonic()
    s = pathlib.Path(tempfile.mkdtemp(prefix="labq-system-", dir="/tmp"))
    os.chmod(s, 0o755)
    # munge where it is installed (CI); without it the same run with auth = "none" (the users are
    # then known by their inbox), so that this machine still runs everything else.
    munge = start_munged() if shutil.which("munged") or os.path.exists("/usr/sbin/munged") else None
    security = f'[security]\nauth = "munge"\nmunge_socket = "{munge.socket}"\n' if munge else ""
    sched_user, people, site = system_user(), [], None
    try:
        p = subprocess.run(["make", "-s", "install-system", f"PREFIX={s}/opt/labq", f"BINDIR={s}/usr/local/bin",
                            f"SYSCONFDIR={s}/etc/labq", f"UNITDIR={s}/units", f"DOCDIR={s}/doc"], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        redis_pw = pwd.getpwnam("redis")
        for d in ("var/lib/redis", "var/lib/labq-scheduler", "var/lib/labq", "var/lib/labq-node2", "run/redis",
                  "home"):
            (s / d).mkdir(parents=True)
            os.chmod(s / d, 0o755)
        os.chown(s / "var/lib/redis", redis_pw.pw_uid, redis_pw.pw_gid)
        os.chown(s / "var/lib/labq-scheduler", sched_user.pw_uid, sched_user.pw_gid)
        os.chmod(s / "var/lib/labq-scheduler", 0o750)
        sock = f"{s}/run/redis/redis-server.sock"

        def configure(url):
            for node, name in (("node1", "labq.toml"), ("node2", "node2.toml")):
                (s / "etc/labq" / name).write_text(CONFIG.format(s=s, url=url, security=security, node=node))
                os.chmod(s / "etc/labq" / name, 0o644)
        configure(f"unix://{sock}")
        site = Site(s, 0, sched_user)
        site.start("redis")
        # The ACL roles as systemd/README.md §8 sets them up: default off, one role per daemon, each
        # password in a file of its own (the scheduler's owned by its user); clients log in as labq-client.
        acl = subprocess.run([f"{s}/usr/local/bin/labq", "admin", "acl", "--node", "node1", "--node", "node2",
                              "--apply", "--scheduler-user", sched_user.pw_name], env=site.env, capture_output=True,
                             text=True, timeout=120)
        assert acl.returncode == 0, acl.stdout + acl.stderr
        client_url = next(w.split('"')[1] for w in acl.stdout.splitlines() if w.startswith("clients "))
        assert client_url.startswith("unix://labq-client:")
        configure(client_url)
        secrets = s / "etc/labq/secrets"
        assert (secrets / "labq-scheduler").stat().st_uid == sched_user.pw_uid
        admin_pw = (secrets / "labq-admin").read_text().split()[-1]
        assert subprocess.run(["redis-cli", "-s", sock, "get", "labq:leader"], capture_output=True,
                              text=True).stdout.strip().startswith("NOAUTH"), "default is off"
        for name in ("scheduler", "worker", "worker-node2"):
            site.start(name)
        people = [_person(s), _person(s)]
        alice, bob = people
        labq = f"{s}/usr/local/bin/labq"

        def as_user(pw, *args):
            out = subprocess.run([labq, *args], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=pw.pw_dir,
                                 env={"PATH": "/usr/bin:/bin", "HOME": pw.pw_dir, "USER": pw.pw_name,
                                      "LANG": "C.UTF-8", "LABQ_CONFIG": f"{s}/etc/labq/labq.toml"},
                                 capture_output=True, text=True, timeout=180)
            assert out.returncode == 0, (pw.pw_name, args, out.stdout, out.stderr)
            return out.stdout

        wait_for(lambda: as_user(alice, "nodes").count(" up") >= 2, 90, what=f"both nodes up (see {s}/daemons.log)")
        sweep = pathlib.Path(alice.pw_dir) / "sweep.sh"
        sweep.write_text(SWEEP.format(padding="\n".join(f"# note {i}: " + "x" * 60 for i in range(60))))
        assert sweep.stat().st_size > 4000, "a script of a few KB"
        (pathlib.Path(bob.pw_dir) / "eval.sh").write_text(EVAL)
        for pw, f in ((alice, sweep), (bob, pathlib.Path(bob.pw_dir) / "eval.sh")):
            os.chown(f, pw.pw_uid, pw.pw_gid)
        array = as_user(alice, "sub", "--parsable", "sweep.sh").strip()
        single = as_user(bob, "sub", "--parsable", "eval.sh").strip()

        def ended(pw, n):
            rows = json.loads(as_user(pw, "acct", "-S", "2020-01-01", "--json"))
            return len(rows) == n and all(r["state"] == "CD" for r in rows) and rows
        rows = wait_for(lambda: ended(alice, 4), 180, what="alice's 4 array tasks to complete")
        wait_for(lambda: ended(bob, 1), 180, what="bob's job to complete")
        assert {r["node"] for r in rows} == {"node1", "node2"}, "the sweep ran on both nodes"
        outs = sorted(pathlib.Path(alice.pw_dir).glob("lr-sweep-*_*.out"))
        assert len(outs) == 4 and all(f.stat().st_uid == alice.pw_uid for f in outs)
        assert f"as {alice.pw_name}" in outs[0].read_text()

        queries = {alice: [("acct", "-S", "2020-01-01"), ("show", f"{array}_2", "--json"), ("report", "--since", "2020-01-01", "--by", "user,node", "--json"),
                           ("ledger", "verify")],
                   bob: [("acct", "-S", "2020-01-01"), ("show", single, "--json"), ("ledger", "verify")]}
        before = {pw.pw_name: [as_user(pw, *q) for q in qs] for pw, qs in queries.items()}
        subprocess.run([labq, "admin", "archive", "--now"], env=site.env, check=True, capture_output=True, timeout=120)
        wait_for(lambda: subprocess.run(["redis-cli", "--no-auth-warning", "--user", "labq-admin", "--pass", admin_pw,
                                         "-s", sock, "zcard", "labq:history"], capture_output=True,
                                        text=True).stdout.strip() == "0", 90, what="everything archived")
        archive = s / "var/lib/labq-scheduler/history.db"
        assert archive.exists() and archive.stat().st_uid == sched_user.pw_uid, "the archive is in $STATE_DIRECTORY"
        after = {pw.pw_name: [as_user(pw, *q) for q in qs] for pw, qs in queries.items()}
        assert after == before, "every user's answers are the same after archiving"
        assert "4 jobs" in after[alice.pw_name][0] and "ledger ok" in after[alice.pw_name][-1]
        state = list((s / "var/lib/labq-scheduler").glob("scheduler-labq-*.json"))
        assert state and state[0].stat().st_mode & 0o077 == 0, "the state file, under UMask=0077"
        print(f"system test wall time: {time.monotonic() - started:.0f}s")
    finally:
        if site is not None:
            site.close()
        for pw in [*people, sched_user]:
            subprocess.run(["userdel", pw.pw_name], check=False)
            subprocess.run(["groupdel", pw.pw_name], check=False, stderr=subprocess.DEVNULL)
        if munge is not None:
            munge.proc.terminate()
            munge.proc.wait(10)
            shutil.rmtree(munge.dir, ignore_errors=True)
        shutil.rmtree(s, ignore_errors=True)
