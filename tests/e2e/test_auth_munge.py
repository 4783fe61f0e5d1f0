"""Multi-user identity (security.auth = "munge"): the sender of a request is whom munged vouches for,
never the inbox name. Every attack runs as a real unprivileged user the suite creates (useradd),
with the worktree's interpreter, against a real redis-server and a private munged.

The scheduler runs in-process on an injected clock (ticks are explicit), except in the end-to-end
test, where the real `labq scheduler` daemon and the real `labq sub` serve two users.
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.security import auth, munge
from labq.scheduler.settings import config
from labq.scheduler.store import codec
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, FROZEN, push, reply, start_redis, wait_for, woke

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating users and acting as them need root and useradd")]
K = Keys()
BODY = {"argv": ["sh", "-c", "id > /tmp/p"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20,
        "time_limit": 600}


@pytest.fixture(scope="module")
def shared_redis():
    """A redis-server whose socket every local user may reach (a lab's Redis, as over TCP)."""
    rp = start_redis(perm="777")
    yield rp
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)


def make_user(prefix: str) -> pwd.struct_passwd:
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/tmp", "--shell", "/bin/sh", "--user-group", name],
                   check=True)
    return pwd.getpwnam(name)


def drop_user(pw) -> None:
    subprocess.run(["userdel", pw.pw_name], check=False)
    subprocess.run(["groupdel", pw.pw_name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def people():
    """Two real unprivileged users: the attacker and the victim."""
    mallory, victim = make_user("lqm"), make_user("lqv")
    yield mallory, victim
    drop_user(mallory)
    drop_user(victim)


def as_user(pw, argv, **kw):
    """Run argv as `pw`: its uid, its own group only, a minimal environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": pw.pw_name, "LOGNAME": pw.pw_name, **kw.pop("env", {})}
    return subprocess.run(argv, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], env=env, cwd="/tmp",
                          capture_output=True, text=True, timeout=120, **kw)


# Run by the attacker: write one request into any inbox, signed with the attacker's own
# credential (or none, or a credential made for another body, or one given whole).
FORGE = r"""
import json, sys, redis
from labq.scheduler.security import auth
from labq.scheduler.store import inbox
from labq.scheduler.store.keys import Keys
a = json.loads(sys.argv[1])
r = redis.Redis(unix_socket_path=a["sock"], decode_responses=True)
f = {"rid": a["rid"], "op": a["op"], "body": json.dumps(a["body"])}
if a.get("sign"):
    f = auth.sign(f, {"auth": "munge", "munge_socket": a["munge"], "credential_ttl": 300})
if a.get("swap_body") is not None:
    f["body"] = json.dumps(a["swap_body"])
f.update(a.get("fields", {}))
for cmd in inbox.send_commands(Keys(), a["inbox"], f):    # the request list, naming any sender
    r.execute_command(*cmd)
print(json.dumps(f))
"""


def forge(pw, shared_redis, munged, inbox, op="submit", body=BODY, **extra):
    rid = extra.pop("rid", uuid.uuid4().hex)
    arg = {"sock": shared_redis.sock, "munge": munged.socket, "inbox": inbox, "op": op, "body": body, "rid": rid,
           **extra}
    p = as_user(pw, [sys.executable, "-c", FORGE, json.dumps(arg)])
    assert p.returncode == 0, p.stderr
    return rid, json.loads(p.stdout)


def cfg_for(munged, extra: str = ""):
    return config.loads(f"""
[security]
auth = "munge"
munge_socket = "{munged.socket}"
credential_ttl = "1m"
admins = ["root"]
{extra}""")


@pytest.fixture
def sched(shared_redis, munged):
    r = shared_redis.client()
    r.flushall()
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    s = Scheduler(r, cfg_for(munged), me="s1", clock=FROZEN)
    s.tick(time.time())
    yield s, r
    r.close()




def jobs(r):
    return [codec.loads(r.get(k)) for k in r.keys("labq:job:*") if k.count(":") == 2]


def test_a_request_in_the_victims_inbox_runs_as_its_real_sender(sched, people, shared_redis, munged):
    """Attack 1: XADD labq:inbox:<victim> + a wake-up made the job run as the victim."""
    s, r = sched
    mallory, victim = people
    unsigned, _ = forge(mallory, shared_redis, munged, victim.pw_name)
    signed, _ = forge(mallory, shared_redis, munged, victim.pw_name, sign=True)
    s.tick(time.time(), woke(r))
    assert reply(r, unsigned)["ok"] is False and "no munge credential" in reply(r, unsigned)["error"]
    assert reply(r, unsigned)["code"] == 3
    assert reply(r, signed)["ok"] is True, reply(r, signed)
    assert [j.user for j in jobs(r)] == [mallory.pw_name], "the job is the attacker's own, never the victim's"


def test_admin_requests_only_from_admins_munge_authenticated(sched, people, shared_redis, munged):
    """Attack 2: the same into labq:inbox:root drained a node and lowered a budget."""
    s, r = sched
    mallory, _ = people
    drain, _ = forge(mallory, shared_redis, munged, "root", op="drain", body={"node": "n1"}, sign=True)
    unsigned, _ = forge(mallory, shared_redis, munged, "root", op="drain", body={"node": "n1"})
    s.tick(time.time(), woke(r))
    assert reply(r, drain)["code"] == 3 and "only admins" in reply(r, drain)["error"]
    assert reply(r, unsigned)["code"] == 3
    assert r.get(K.node_admin("n1")) is None, "the node was not drained"
    # root, authenticated by munge, is an admin: the same request from root works.
    rid = "root-drain"
    fields = auth.sign({"rid": rid, "op": "drain", "body": json.dumps({"node": "n1"})}, s.cfg.security)
    push(r, "whatever", fields)
    r.lpush(K.wake, "user:whatever")
    s.tick(time.time(), woke(r))
    assert reply(r, rid)["ok"] is True and r.get(K.node_admin("n1")) == "drain"


def test_a_credential_bound_to_one_body_does_not_carry_another(sched, people, shared_redis, munged):
    s, r = sched
    mallory, _ = people
    rid, _ = forge(mallory, shared_redis, munged, mallory.pw_name, sign=True,
                   swap_body={**BODY, "argv": ["sh", "-c", "rm -rf ~"]})
    s.tick(time.time(), woke(r))
    assert "made for another request" in reply(r, rid)["error"] and not jobs(r)


def test_a_replayed_credential_is_refused_the_second_time(sched, people, shared_redis, munged):
    """A credential copied whole into a second entry (same rid or a new one) is refused."""
    s, r = sched
    mallory, _ = people
    rid, fields = forge(mallory, shared_redis, munged, mallory.pw_name, sign=True)
    s.tick(time.time(), woke(r))
    assert reply(r, rid)["ok"] is True
    r.delete(K.reply(rid), K.done(rid))      # not answered from the dedup record: decoded again
    rid2, _ = forge(mallory, shared_redis, munged, mallory.pw_name, rid=rid, fields={"cred": fields["cred"]})
    s.tick(time.time(), woke(r))
    assert "replayed" in reply(r, rid2)["error"] and len(jobs(r)) == 1


def test_an_expired_credential_is_refused(sched, people, shared_redis, munged):
    """The scheduler's clock (injected) is past the credential's TTL (1m in this config)."""
    s, r = sched
    mallory, _ = people
    rid, _ = forge(mallory, shared_redis, munged, mallory.pw_name, sign=True)
    s.tick(time.time() + 61, woke(r))
    assert "expired" in reply(r, rid)["error"] and not jobs(r)


def test_a_garbage_credential_is_refused_in_one_line(sched, people, shared_redis, munged):
    s, r = sched
    mallory, _ = people
    rid, _ = forge(mallory, shared_redis, munged, mallory.pw_name, fields={"cred": "MUNGE:AAAA:"})
    s.tick(time.time(), woke(r))
    got = reply(r, rid)
    assert got["code"] == 3 and "invalid credential" in got["error"] and "\n" not in got["error"]


def test_a_redelivery_after_a_crash_is_not_a_replay(shared_redis, munged):
    """The scheduler decoded a request, then died before committing: its successor gets the same
    entry again (munged now says "replayed") and must still serve it, once."""
    r = shared_redis.client()
    r.flushall()
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    cfg = cfg_for(munged)
    s1 = Scheduler(r, cfg, me="s1", clock=FROZEN)
    now = time.time()
    s1.tick(now)
    fields = auth.sign({"rid": "r1", "op": "submit", "body": json.dumps(BODY)}, cfg.security)
    push(r, "root", fields)
    r.lpush(K.wake, "user:root")

    def crash(*change, **kw):
        raise SystemExit("killed mid-request")
    s1.commit = crash
    with pytest.raises(SystemExit):
        s1.tick(now, woke(r))
    r.delete(K.leader)                         # s1 is gone; its lease lapses
    s2 = Scheduler(r, cfg, me="s2", clock=FROZEN)
    s2.tick(now + 1)
    assert reply(r, "r1")["ok"] is True and [j.user for j in jobs(r)] == ["root"]


def test_single_host_mode_still_takes_the_inbox_name(fake_redis):
    """security.auth = "none" (the default, `labq up`): no munge, the inbox names the sender."""
    got = auth.identify({"rid": "x", "op": "submit", "body": "{}"}, "alice", config.loads("").security, 0.0,
                        lambda key: "new")
    assert got == "alice"


def test_sign_says_what_is_wrong_when_munged_is_not_there():
    # On a host without munge at all the line says that instead (it failed there, expecting the
    # other line): each host gets the line that names its own problem.
    try:
        munge.backend()
        expected = "Did you start munged"
    except munge.MungeError:
        expected = "munge is not installed .* set security.auth = \"none\""
    with pytest.raises(munge.MungeError, match=expected):
        auth.sign({"rid": "x", "op": "submit", "body": "{}"},
                  {"auth": "munge", "munge_socket": "/nonexistent/munge.sock", "credential_ttl": 60})


# -- end to end: the real daemon, the real CLI, two users --------------------------------------
E2E_CFG = """
[redis]
url = "unix://{sock}"
[scheduler]
tick = 0.2
[security]
auth = "munge"
munge_socket = "{munge}"
"""


def test_two_users_submit_through_the_real_cli_and_daemon(shared_redis, munged, people):
    mallory, victim = people
    r = shared_redis.client()
    r.flushall()
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    d = tempfile.mkdtemp(prefix="labq-auth-", dir="/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "labq.toml")
    with open(path, "w") as f:
        f.write(E2E_CFG.format(sock=shared_redis.sock, munge=munged.socket))
    os.chmod(path, 0o644)
    daemon = subprocess.Popen([sys.executable, "-m", "labq", "--config", path, "scheduler"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: r.get(K.leader), 60, what="the scheduler to lead")
        for pw in (victim, mallory):
            p = as_user(pw, [sys.executable, "-m", "labq", "--config", path, "sub", "-t", "10m", "--", "true"])
            assert p.returncode == 0, p.stderr
        # The attacker's own client, pointed at the victim's inbox: still the attacker.
        p = as_user(mallory, [sys.executable, "-c",
                              "import sys; from labq.scheduler.settings import config; from labq.scheduler.client import Client;"
                              f"c = Client(config.load({path!r}), user={victim.pw_name!r});"
                              "print(c.submit({'argv': ['true'], 'workdir': '/tmp', 'time_limit': 600})['job_id'])"])
        assert p.returncode == 0, p.stderr
        owners = {j.id: j.user for j in jobs(r)}
        assert sorted(owners.values()) == sorted([victim.pw_name, mallory.pw_name, mallory.pw_name])
        assert owners[int(p.stdout.strip())] == mallory.pw_name
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(d, ignore_errors=True)


def test_a_forged_cancel_of_the_victims_job_is_refused(sched, people, shared_redis, munged):
    """Attack: a cancel sent as the victim (their inbox) cancelled their job."""
    s, r = sched
    mallory, victim = people
    sub, _ = forge(victim, shared_redis, munged, victim.pw_name, sign=True)
    s.tick(time.time(), woke(r))
    jid = reply(r, sub)["job_id"]
    cancel, _ = forge(mallory, shared_redis, munged, victim.pw_name, op="cancel", body={"ids": [str(jid)]}, sign=True)
    s.tick(time.time(), woke(r))
    got = reply(r, cancel)
    assert got["ok"] is False and f"belongs to {victim.pw_name}" in got["error"]
    assert [(j.user, j.cancel_requested) for j in jobs(r)] == [(victim.pw_name, False)]
    assert jobs(r)[0].state not in ("CA", "CG")


def test_a_credential_used_twice_in_one_batch_serves_once(sched, people, shared_redis, munged):
    """Both copies are read in the same batch (decoded concurrently, claimed together)."""
    s, r = sched
    mallory, _ = people
    rid, fields = forge(mallory, shared_redis, munged, mallory.pw_name, sign=True)
    push(r, "other", {**fields, "rid": rid})
    r.lpush(K.wake, "user:other")
    s.tick(time.time(), woke(r))
    answers = [json.loads(x) for x in r.lrange(K.reply(rid), 0, -1)]
    assert sorted(a["ok"] for a in answers) == [False, True], answers
    assert any("replayed" in a.get("error", "") for a in answers) and len(jobs(r)) == 1
