"""`labq stat` as a user logs in, under the ACL roles `labq admin acl --apply` generates: the
labq-client role may not run INFO, so the no-AOF warning of redis.allow_volatile = true is left out
where the role cannot tell, never a traceback (issue 40: the thin client sent INFO itself)."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from labq.scheduler.store import acl
from tests.harness import E2E_MARKS, start_redis

pytestmark = E2E_MARKS


@pytest.fixture(params=[True, False], ids=["aof", "volatile"])
def roles(request):
    """A redis-server (with AOF, or without: the volatile Redis allow_volatile accepts) with the
    roles applied by the real CLI, and a user's config logging in as labq-client."""
    rp = start_redis(appendonly=request.param)
    d = tempfile.mkdtemp(prefix="labq-stat-roles-", dir="/tmp")
    admin_cfg, pw_path, user_cfg = (os.path.join(d, n) for n in ("admin.toml", "secrets", "user.toml"))
    with open(admin_cfg, "w") as f:
        f.write(f'[redis]\nurl = "{rp.url}"\npassword_file = "{pw_path}"\n')
    p = subprocess.run([sys.executable, "-m", "labq", "--config", admin_cfg, "admin", "acl", "--apply"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    url = acl.client_url(rp.url, acl.read_passwords(pw_path)[acl.CLIENT])
    with open(user_cfg, "w") as f:
        f.write(f'[redis]\nurl = "{url}"\nallow_volatile = true\n')
    yield user_cfg
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("argv", [["stat"], ["stat", "--json"], ["q"]])
def test_stat_as_the_client_role_with_allow_volatile(roles, argv):
    env = {k: v for k, v in os.environ.items() if k != "LABQ_REDIS_URL"}
    p = subprocess.run([sys.executable, "-m", "labq", "--config", roles, *argv], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "NOPERM" not in p.stdout + p.stderr
    if argv == ["stat"]:
        assert "JOBID" in p.stdout, p.stdout    # the table's header: the command went on past the warning


def test_stat_under_roles_generated_before_the_rest_keys_says_to_reapply_them():
    """Roles an older labq generated lack the held arrays' keys (labq:rests, labq:rest:*, issue 39):
    `labq stat` gets NOPERM; it says so in one line naming `labq admin acl --apply`, exit 3."""
    import redis

    from labq.scheduler.store.keys import Keys
    rp = start_redis()
    d = tempfile.mkdtemp(prefix="labq-stat-oldroles-", dir="/tmp")
    try:
        admin_cfg, pw_path, user_cfg = (os.path.join(d, n) for n in ("admin.toml", "secrets", "user.toml"))
        with open(admin_cfg, "w") as f:
            f.write(f'[redis]\nurl = "{rp.url}"\npassword_file = "{pw_path}"\n')
        p = subprocess.run([sys.executable, "-m", "labq", "--config", admin_cfg, "admin", "acl", "--apply"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        pw = acl.read_passwords(pw_path)
        k = Keys()
        new = acl.roles(k, [])[acl.CLIENT]
        old = " ".join(f"%R~{x}" for x in acl.patterns(k, acl.NOT_READ | {"rests", "rest"}))
        assert new[-1].startswith("(%R~") and k.rests not in old
        admin = redis.Redis.from_url(acl.client_url(rp.url, pw[acl.ADMIN]).replace(acl.CLIENT, acl.ADMIN, 1))
        admin.execute_command("ACL", "SETUSER", acl.CLIENT, "reset", "on", f"#{acl.password_hash(pw[acl.CLIENT])}",
                              *new[:-1], f"({old} {' '.join(acl.READ)})")
        with open(user_cfg, "w") as f:
            f.write(f'[redis]\nurl = "{acl.client_url(rp.url, pw[acl.CLIENT])}"\n')
        env = {k: v for k, v in os.environ.items() if k != "LABQ_REDIS_URL"}
        p = subprocess.run([sys.executable, "-m", "labq", "--config", user_cfg, "stat"], capture_output=True,
                           text=True, timeout=60, env=env)
        assert p.returncode == 3 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "labq admin acl --apply" in p.stderr, p.stderr
    finally:
        rp.proc.terminate()
        rp.proc.wait(10)
        shutil.rmtree(rp.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
