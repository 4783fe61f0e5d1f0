"""An ordinary user on a multi-user lab cannot open the scheduler's archive (a 0600 file): `labq acct`
and `labq show` run as that user (a real unprivileged user the suite creates) get the archived rows
from the scheduler through the user's inbox, page by page, and answer as root does reading the file.
Real redis-server and user processes; the scheduler ticks in this process (root only)."""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import redis

from labq.scheduler.store.archive import Archive, Archiver, committed_fn
from tests.harness import BODY, CFG, E2E_MARKS, ROOT, SWEEP_TOML, K, finish, setup, start_redis, submit, woke

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating users and acting as them need root and useradd")]
T0 = 1_800_000_000.0


def _user():
    name = f"lqa{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/tmp", "--shell", "/bin/sh", "--user-group", name],
                   check=True)
    return pwd.getpwnam(name)


def test_a_user_who_cannot_open_the_archive_gets_the_same_answers_through_the_scheduler():
    rp = start_redis(perm="777")
    pw = _user()
    d = tempfile.mkdtemp(prefix="labq-archu-", dir="/tmp")
    os.chmod(d, 0o755)
    try:
        r = rp.client()
        s = setup(r, redis.Redis(unix_socket_path=rp.sock), T0)
        for i in range(4):
            submit(r, "alice", {**BODY, "time_limit": 600}, f"r{i}")
        s.tick(T0 + 1, woke(r))
        for jid in (1, 2, 3, 4):
            finish(r, jid, 1, "completed", 0, T0 + 100 + jid)
        s.tick(T0 + 200)
        path = os.path.join(d, "history.db")
        s.archiver = Archiver(r, K, Archive(path, committed=committed_fn(r, K, CFG)), keep=0)
        assert s.archiver.step(T0 + 500)[0] == 4 and r.zcard(K.history) == 0
        os.chmod(path, 0o600)                                   # the scheduler's own, as under systemd
        cfg = os.path.join(d, "labq.toml")
        with open(cfg, "w") as f:
            # An admin (acct shows a non-admin only their own jobs; these are alice's)
            f.write(SWEEP_TOML + f'\n[redis]\nurl = "{rp.url}"\n[history]\nurl = "sqlite://{path}"\n'
                    f'[security]\nadmins = ["root", "{pw.pw_name}"]\n')
        os.chmod(cfg, 0o644)

        def labq(*args, as_user):
            kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[]) if as_user else {}
            p = subprocess.Popen([sys.executable, "-m", "labq.cli.main", "--config", cfg, *args], cwd="/tmp",
                                 env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": ROOT},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
            while p.poll() is None:                             # the scheduler answers the user's inbox
                s.tick(time.time(), woke(r))
                time.sleep(0.02)
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, (args, err)
            return out
        for args in (("acct", "-S", "2027-01-01"), ("acct", "-S", "2027-01-01", "--json"), ("show", "2"),
                     ("ledger", "verify")):
            mine = labq(*args, as_user=True)
            assert mine == labq(*args, as_user=False), args
        assert "4 jobs" in labq("acct", "-S", "2027-01-01", as_user=True)
    finally:
        subprocess.run(["userdel", pw.pw_name], check=False)
        subprocess.run(["groupdel", pw.pw_name], check=False, stderr=subprocess.DEVNULL)
        rp.proc.terminate()
        rp.proc.wait(10)
        shutil.rmtree(rp.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
