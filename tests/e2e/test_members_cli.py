"""Issue 34, "any user spends any account's budget", as the attack was made: real unprivileged
users, a real redis-server and `labq scheduler`, the real CLI. A non-member's `labq sub -A` of
another team's account is refused (exit 3) naming the accounts they may use; members submit.
Who the sender is comes from the identity model (munge where several users share a Redis; here the
inbox a user's own CLI writes, security.auth = "none", so that the test runs where munge is not
installed): membership is checked on whatever identity the scheduler established."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from labq.scheduler.jobs.model import Gpu
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, ROOT, start_redis, unix_user, wait_for

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating users and acting as them need root and useradd")]
K = Keys()
CONFIG = """
[redis]
url = "unix://{sock}"
[scheduler]
tick = 0.2
[security]
admins = ["root"]
[accounts.vision]
users = ["{alice}"]
[accounts.speech]
users = ["{mallory}"]
[[budgets]]
name = "vision-q4"
account = "vision"
limit = 100.0
"""


def test_a_non_member_cannot_charge_another_teams_budget_through_the_cli():
    rp = start_redis(perm="777")
    d = tempfile.mkdtemp(prefix="labq-members-", dir="/tmp")
    os.chmod(d, 0o755)
    daemon = None
    try:
        with unix_user("lqa") as alice, unix_user("lqm") as mallory:
            path = os.path.join(d, "labq.toml")
            with open(path, "w") as f:
                f.write(CONFIG.format(sock=rp.sock, alice=alice.pw_name, mallory=mallory.pw_name))
            os.chmod(path, 0o644)
            r = rp.client()
            AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
            daemon = subprocess.Popen([sys.executable, "-m", "labq", "--config", path, "scheduler"],
                                      env={**os.environ, "LABQ_STATE_DIR": d, "PYTHONPATH": ROOT},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: r.get(K.leader), 60, what="the scheduler to lead")

            def sub(pw, account):
                return subprocess.run([sys.executable, "-m", "labq", "--config", path, "sub", "--parsable", "-A",
                                       account, "-t", "10m", "--", "true"], user=pw.pw_uid, group=pw.pw_gid,
                                      extra_groups=[], cwd="/tmp", capture_output=True, text=True, timeout=120,
                                      env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": pw.pw_name,
                                           "LOGNAME": pw.pw_name, "PYTHONPATH": ROOT})
            stolen = sub(mallory, "vision")
            assert stolen.returncode == 3, (stolen.stdout, stolen.stderr)
            err = stolen.stderr.strip()
            assert "\n" not in err and "Traceback" not in err, err
            assert f"account 'vision': {mallory.pw_name} is not one of its users" in err
            assert f"accounts {mallory.pw_name} may use: speech" in err
            mine, theirs = sub(mallory, "speech"), sub(alice, "vision")
            assert mine.returncode == 0 and theirs.returncode == 0, (mine.stderr, theirs.stderr)
            assert r.zcard(K.active) == 2, "two jobs, neither of them mallory's on vision"
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        rp.proc.terminate()
        rp.proc.wait(10)
        shutil.rmtree(rp.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
