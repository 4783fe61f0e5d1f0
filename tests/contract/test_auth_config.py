"""[security] and [redis] keys of multi-user mode, `labq config check`'s warning, the ACL text."""
import os
import subprocess
import sys

import pytest

from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import config
from labq.scheduler.store import acl
from labq.scheduler.store.keys import Keys


def check(tmp_path, text):
    p = tmp_path / "labq.toml"
    p.write_text(text)
    return subprocess.run([sys.executable, "-m", "labq", "config", "check", str(p)], capture_output=True, text=True,
                          timeout=60)


def test_tcp_redis_without_munge_is_warned_about_and_the_password_not_printed(tmp_path):
    got = check(tmp_path, '[redis]\nurl = "redis://labq-client:sekrit@head:6379/0"\n')
    assert got.returncode == 0 and "warning: redis.url is TCP" in got.stderr and 'security.auth = "munge"' in got.stderr
    assert "sekrit" not in got.stdout + got.stderr
    quiet = check(tmp_path, '[redis]\nurl = "redis://head:6379/0"\n[security]\nauth = "munge"\n')
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
    local = check(tmp_path, '[redis]\nurl = "unix:///run/labq/redis.sock"\n')
    assert local.returncode == 0 and "warning" not in local.stderr


def test_the_old_acl_key_is_refused_with_what_replaced_it(tmp_path):
    got = check(tmp_path, "[security]\nacl = true\n")
    assert got.returncode == 2 and "security.acl: this key was removed" in got.stderr
    assert "labq admin acl" in got.stderr and got.stderr.count("\n") == 1


@pytest.mark.parametrize("text,key", [
    ('[security]\nauth = "kerberos"', "security.auth"),
    ('[security]\ncredential_ttl = "2s"', "security.credential_ttl"),
    ('[security]\nmunge_socket = "munge.sock"', "security.munge_socket"),
    ('[security]\nadmins = "root"', "security.admins"),
    ('[redis]\npassword_file = "secret"', "redis.password_file"),
])
def test_bad_security_values_name_their_key(text, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config.loads(text)


def test_defaults_are_single_host():
    cfg = config.loads("")
    assert cfg.security == {"auth": "none", "admins": ("root",), "munge_socket": "", "credential_ttl": 300}
    assert cfg.redis_password_file == ""


def test_acl_roles_follow_keys_py():
    """Renaming a key in keys.py renames it in the roles: nothing is spelt twice."""
    class Renamed(Keys):
        def job(self, jid):
            return f"{self.p}:j:{jid}"
    default = acl.roles(Keys(), ["n1"])
    renamed = acl.roles(Renamed(), ["n1"])
    assert "%R~labq:job:*" in " ".join(default[acl.CLIENT]) and "%R~labq:j:*" in " ".join(renamed[acl.CLIENT])
    assert "%R~labq:j:*" in " ".join(renamed[acl.node_role("n1")])
    client = " ".join(default[acl.CLIENT])
    write, rest = client.split("(~labq:requests ~labq:wake +lpush)")
    assert "labq:requests" not in rest + write, "requests are never readable, and only LPUSHed"
    assert "xadd" not in client and "labq:inbox" not in client
    assert "labq:cred:" not in client


def test_the_aclfile_holds_hashes_never_passwords():
    rules = acl.roles(Keys(), ["n1"])
    text = acl.aclfile(rules, {r: f"pw-{r}" for r in rules})
    assert "user default off" in text and "pw-" not in text
    assert f"#{acl.password_hash('pw-labq-client')}" in text


def test_a_password_file_line_is_read_per_role(tmp_path):
    """redis.password_file: a directory of one file per role (what `admin acl --apply` makes), or
    an older single file of ROLE PASSWORD lines."""
    from labq.scheduler.store import conn, passwords
    d = tmp_path / "secrets"
    assert passwords.add(str(d), {"labq-scheduler": "s1", "labq-node-n1": "n1pw"}, {}) == \
        ["labq-node-n1", "labq-scheduler"]
    assert os.stat(d / "labq-node-n1").st_mode & 0o777 == 0o600
    assert conn.credentials("labq-node-n1", str(d)) == ("labq-node-n1", "n1pw")
    with pytest.raises(Exception, match="cannot read .*labq-node-n2"):
        conn.credentials("labq-node-n2", str(d))
    old = tmp_path / "redis.secret"
    old.write_text("# comment\nlabq-scheduler s1\nlabq-node-n1 n1pw\n")
    os.chmod(old, 0o600)
    assert conn.credentials("labq-node-n1", str(old)) == ("labq-node-n1", "n1pw")
    with pytest.raises(Exception, match="no line for role labq-node-n2"):
        conn.credentials("labq-node-n2", str(old))
    assert passwords.add(str(old), {"labq-scheduler": "other", "labq-node-n2": "n2pw"}, {}) == ["labq-node-n2"]
    assert acl.read_passwords(str(old)) == {"labq-scheduler": "s1", "labq-node-n1": "n1pw", "labq-node-n2": "n2pw"}


def test_the_client_url_is_the_configured_address_with_the_client_login():
    assert acl.client_url("redis://head.lab:6380/2", "p/w") == "redis://labq-client:p%2Fw@head.lab:6380/2"
    assert acl.client_url("redis://labq-client:old@head.lab:6380/0", "new") == "redis://labq-client:new@head.lab:6380/0"
    assert acl.client_url("unix:///run/redis/redis.sock?db=1", "pw") == "unix://labq-client:pw@/run/redis/redis.sock?db=1"
