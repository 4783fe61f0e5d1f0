"""Redis ACL roles (`labq admin acl --apply`) on a real redis-server: each role can do what it must
and nothing else; the daemons log in with passwords from a root-only file, never from a command
line; an event from a node the attempt does not run on is dropped."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis

from labq.scheduler.client import Client
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store import acl, codec, conn
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import BODY as SBODY, E2E_MARKS, ROOT, job, push, start_redis, submit, unix_user, wait_for, woke

pytestmark = E2E_MARKS
K = Keys()
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 600}


@pytest.fixture
def locked():
    """A private redis-server with the roles applied by the real CLI, and the password directory
    (one file per role)."""
    rp = start_redis()
    d = tempfile.mkdtemp(prefix="labq-acl-", dir="/tmp")
    cfg_path, pw_path = os.path.join(d, "labq.toml"), os.path.join(d, "secrets")
    with open(cfg_path, "w") as f:
        f.write(f'[redis]\nurl = "{rp.url}"\npassword_file = "{pw_path}"\n[worker]\nname = "n1"\n')
    p = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "acl", "--apply", "--node", "n2"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    yield rp, acl.read_passwords(pw_path), cfg_path, pw_path, p.stdout
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def as_role(rp, pw, role, raw=False):
    return redis.Redis(unix_socket_path=rp.sock, username=role, password=pw[role], decode_responses=not raw)


def denied(fn, *a, **kw) -> bool:
    try:
        fn(*a, **kw)
    except redis.exceptions.NoPermissionError:
        return True
    except redis.ResponseError as e:
        return "NOPERM" in str(e)
    return False


def test_the_password_files_are_root_only_and_the_default_user_is_off(locked):
    rp, pw, _, pw_path, out = locked
    assert sorted(os.listdir(pw_path)) == sorted(pw), "one file per role"
    assert all(os.stat(os.path.join(pw_path, role)).st_mode & 0o777 == 0o600 for role in pw)
    assert os.stat(pw_path).st_mode & 0o022 == 0, "nobody but root adds or swaps a role's file"
    assert {acl.CLIENT, acl.SCHEDULER, acl.ADMIN, acl.node_role("n1"), acl.node_role("n2")} <= set(pw)
    anon = redis.Redis(unix_socket_path=rp.sock)
    with pytest.raises(redis.exceptions.AuthenticationError):
        anon.get("labq:job:1")
    for role, secret in pw.items():
        if role != acl.CLIENT:
            assert secret not in out, f"the {role} password was printed"


def test_the_client_role_writes_requests_and_reads_state_only(locked):
    rp, pw, *_ = locked
    root = as_role(rp, pw, acl.SCHEDULER)
    root.set(K.job(1), "{}")
    push(root, "victim", {"rid": "secret", "op": "submit", "body": "{}", "cred": "MUNGE:x:"})
    c = as_role(rp, pw, acl.CLIENT)
    push(c, "me", {"rid": "r", "op": "submit", "body": "{}"})
    c.lpush(K.wake, "user:me")
    root.rpush(K.reply("r"), "{}")
    assert c.blpop([K.reply("r")], 1) and c.get(K.job(1)) == "{}" and c.smembers(K.nodes) == set()
    assert c.zrange(K.active, 0, -1) == [] and c.hgetall(K.node("n1")) == {}
    # Attack 3: a hand-written job record and a dispatch push by a client are refused.
    assert denied(c.set, K.job(99), json.dumps({"user": "daemon"}))
    assert denied(c.lpush, K.dispatch("n1"), "99:1")
    assert denied(c.lpush, K.node_control("n1", 1), "cancel")
    assert denied(c.xadd, K.events, {"kind": "finished", "job": 1, "attempt": 1, "node": "n1"})
    assert denied(c.hset, K.node("n1"), "cpus", 1)
    assert denied(c.set, K.control(1), "cancel")
    root.lmove(K.requests, K.taken)
    for read in (("LRANGE", K.requests, 0, -1), ("LRANGE", K.taken, 0, -1), ("LLEN", K.requests), ("LINDEX", K.taken, 0)):
        assert denied(c.execute_command, *read), "other people's requests (and credentials) stay unread"
    root.xadd(K.dead, {"source": K.taken, "id": "1-1", "reason": "r", "entry": "{}", "ts": 0})
    assert denied(c.xrevrange, K.dead) and denied(c.xlen, K.dead), "dead letters are the admins' (issue 34)"
    assert denied(c.publish, "labq:anything", "kill-horse"), "no pub/sub control a client can send"
    for cmd in (("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "SET", "save", ""), ("ACL", "LIST"), ("SET", "x", "1"),
                ("XGROUP", "DESTROY", K.events, "scheduler")):
        assert denied(c.execute_command, *cmd), cmd
    # Issue 34: no client-chosen ids, no trimming, no per-name keys: the request list takes LPUSH only.
    for cmd in (("XADD", "labq:inbox:bob", "18446744073709551615-18446744073709551615", "op", "x"),
                ("XADD", "labq:inbox:bob", "MAXLEN", "0", "*", "op", "x"), ("XADD", K.requests, "*", "op", "x"),
                ("LTRIM", K.requests, 0, 0), ("RPOP", K.requests), ("LPOP", K.requests), ("DEL", K.requests),
                ("LSET", K.requests, 0, "x"), ("LREM", K.requests, 0, "x"), ("RPUSH", K.requests, "x"),
                ("LINSERT", K.requests, "BEFORE", "x", "y"), ("LMOVE", K.requests, K.taken, "RIGHT", "LEFT"),
                ("LPUSH", K.taken, "x"), ("LPUSH", "labq:wake:x", "x"), ("LPUSH", "labq:inbox:bob", "x"),
                ("RENAME", K.requests, "x"), ("EXPIRE", K.requests, 1), ("DEL", K.wake)):
        assert denied(c.execute_command, *cmd), cmd


def test_a_node_role_writes_its_own_node_only(locked):
    rp, pw, *_ = locked
    n1 = as_role(rp, pw, acl.node_role("n1"))
    store = AgentStore(n1, K)
    store.register("n1", 4, 8 << 30, 4, [Gpu("GPU-0", 0, "fake")], "h", 1, 30)
    n1.hset(K.attempt(5, 1), mapping={"claimed": 1})
    n1.xadd(K.node_events("n1"), {"kind": "started", "job": 5, "attempt": 1, "node": "n1", "body": "{}"})
    n1.hset(K.node_runners("n1"), "0", "idle")
    s = as_role(rp, pw, acl.SCHEDULER)
    s.lpush(K.dispatch("n1"), "5:1")
    s.lpush(K.dispatch("n2"), "6:1")
    assert store.take("n1", 0, 1) == "5:1" and store.taken("n1", 0) == ["5:1"]
    store.done("n1", 0, "5:1")
    # Another node's events (its identity), dispatch queue and runners are not n1's to touch.
    assert denied(n1.xadd, K.node_events("n2"), {"kind": "finished", "job": 6, "attempt": 1, "node": "n2"})
    assert denied(n1.xadd, K.events, {"kind": "finished", "job": 6, "attempt": 1, "node": "n2"})
    assert denied(n1.lmove, K.dispatch("n2"), K.dispatch_slot("n1", 0))
    assert denied(n1.lpush, K.dispatch("n1"), "7:1"), "a node cannot make work runnable, even for itself"
    assert denied(n1.hset, K.node_runners("n2"), "0", "idle")
    assert denied(n1.set, K.control(6), "cancel")
    assert denied(n1.hset, K.node("n2"), "cpus", 99)
    assert denied(n1.set, K.node_lease("n2"), "x")
    assert denied(n1.set, K.job(5), "{}")
    assert denied(n1.set, K.node_admin("n1"), "")
    assert denied(n1.lpush, K.requests, json.dumps({"op": "drain", "user": "root"}))
    assert denied(n1.hset, K.spent(), "b", 0)
    assert denied(n1.execute_command, "FLUSHALL")


def test_ended_jobs_acct_rows_are_read_by_clients_and_written_by_the_scheduler_only(locked):
    """Keys.acct_rows (store/acctrows.redis_row): `labq acct` reads it as the client role; only the
    scheduler writes it; node roles neither read nor write it (they have no use for it)."""
    rp, pw, *_ = locked
    s = as_role(rp, pw, acl.SCHEDULER)
    s.hset(K.acct_rows, mapping={"7": "[7]", "8": "[8]"})
    s.hdel(K.acct_rows, "8")
    c = as_role(rp, pw, acl.CLIENT)
    assert c.hmget(K.acct_rows, ["7", "8"]) == ["[7]", None] and c.hkeys(K.acct_rows) == ["7"]
    for who in (c, as_role(rp, pw, acl.node_role("n1"))):
        assert denied(who.hset, K.acct_rows, "9", "[9]")
        assert denied(who.hdel, K.acct_rows, "7")
        assert denied(who.delete, K.acct_rows)
    assert denied(as_role(rp, pw, acl.node_role("n1")).hmget, K.acct_rows, ["7"])
    assert s.hgetall(K.acct_rows) == {"7": "[7]"}


def test_the_scheduler_role_has_labq_keys_but_no_dangerous_commands(locked):
    rp, pw, *_ = locked
    s = as_role(rp, pw, acl.SCHEDULER)
    s.set(K.job(1), "{}")
    s.xadd(K.ledger, {"x": 1})
    assert denied(s.execute_command, "FLUSHALL")
    assert denied(s.execute_command, "CONFIG", "SET", "appendonly", "no")
    assert denied(s.publish, "labq:anything", "kill-horse")
    assert denied(s.set, "elsewhere", 1)


def test_submit_and_run_bookkeeping_work_through_the_roles(locked):
    """The real Scheduler as labq-scheduler, a Client as labq-client, the agent side as labq-node-n1."""
    rp, pw, *_ = locked
    cfg = config.loads("")
    sched = Scheduler(as_role(rp, pw, acl.SCHEDULER), cfg, me="s1",
                      clock=lambda: 0.0)
    AgentStore(as_role(rp, pw, acl.node_role("n1")), K).register("n1", 4, 8 << 30, 4, [], "h", 1, 3600)
    now = time.time()
    sched.tick(now)
    client = Client(cfg, url="unix://x", user="alice", r=as_role(rp, pw, acl.CLIENT))
    client.request = _ticking(client.request, sched)
    reply = client.submit(dict(BODY))
    assert reply["ok"], reply
    assert client.job(str(reply["job_id"])).user == "alice"
    view = as_role(rp, pw, acl.CLIENT)
    assert codec.loads(view.get(K.job(reply["job_id"]))).state in ("PD", "R", "CF")


def _ticking(request, sched):
    """Client.request blocks on the reply; tick the in-process scheduler from a thread meanwhile."""
    import threading

    def call(*a, **kw):
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                sched.tick(time.time(), sched.store.wait_wake(0.05))
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        try:
            return request(*a, **kw)
        finally:
            stop.set()
            t.join(10)
    return call


def test_daemons_read_their_password_from_the_file_and_ps_never_shows_it(locked):
    rp, pw, cfg_path, pw_path, _ = locked
    p = subprocess.Popen([sys.executable, "-m", "labq", "--config", cfg_path, "scheduler"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        s = as_role(rp, pw, acl.SCHEDULER)
        wait_for(lambda: s.get(K.leader), 60, what="the scheduler to lead as labq-scheduler")
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert all(secret not in ps for secret in pw.values())
        env = open(f"/proc/{p.pid}/environ", "rb").read().decode(errors="replace")
        assert all(secret not in env for secret in pw.values())
    finally:
        p.terminate()
        p.wait(30)


def test_a_readable_password_file_is_refused(locked):
    *_, pw_path, _ = locked
    os.chmod(os.path.join(pw_path, acl.SCHEDULER), 0o644)
    with pytest.raises(Exception, match="readable by others"):
        conn.credentials(acl.SCHEDULER, pw_path)


def test_an_event_from_another_node_is_dropped(real_redis, redis_server):
    """Attack: a forged `finished` from a node the attempt does not run on marked a running job CD."""
    r = real_redis
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)], "h", 1, 3600)
    AgentStore(r, K).register("n2", 16, 64 << 30, 16, [], "h", 1, 3600)
    cfg = config.loads('[[budgets]]\nname = "b"\naccount = "eta"\nlimit = 120.0\n[accounts.eta]\nusers = ["alice"]')
    s = Scheduler(r, cfg, me="s1", clock=lambda: 0.0)
    now = time.time()
    s.tick(now)
    submit(r, "alice", SBODY, "r1")
    s.tick(now, woke(r))
    j = job(r, 1)
    assert j.node == "n1"
    a = j.current.attempt
    AgentStore(r, K).post("started", 1, a, "n1", {"pid": 1, "start": now})
    s.tick(now + 1, woke(r))
    AgentStore(r, K).post("finished", 1, a, "n2", {"outcome": "completed", "exit_code": 0, "end": now + 2})
    s.tick(now + 2, woke(r))
    assert job(r, 1).state == "R", "a forged end from n2 changed nothing"
    AgentStore(r, K).post("finished", 1, a, "n1", {"outcome": "completed", "exit_code": 0, "end": now + 3})
    s.tick(now + 3, woke(r))
    assert job(r, 1).state == "CD"


LAB = """
[redis]
url = "{url}"
password_file = "{pw}"
[scheduler]
tick = 0.2
node_lease = "10s"
[worker]
name = "n1"
gpus = 0
cpus = 2
mem = "4G"
slots = 1
spool = "{spool}"
run_as = "self"
allow_root = true
"""


def test_a_lab_stack_under_the_roles_leaks_no_password_to_ps_or_jobs(locked):
    """The real scheduler and worker, each logged in as its role from the password file; a job that
    prints its environment and every command line on the machine sees no password."""
    rp, pw, _, pw_path, _ = locked
    d = tempfile.mkdtemp(prefix="labq-lab-", dir="/tmp")
    path = os.path.join(d, "labq.toml")
    client_url = f"unix://{acl.CLIENT}:{pw[acl.CLIENT]}@{rp.sock}"
    with open(path, "w") as f:
        f.write(LAB.format(url=client_url, pw=pw_path, spool=os.path.join(d, "spool")))
    procs = [subprocess.Popen([sys.executable, "-m", "labq", "--config", path, what], stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(d, f"{what}.log"), "w")) for what in ("scheduler", "worker")]
    try:
        cfg = config.load(path)
        client = Client(cfg, url=client_url, user="root", r=as_role(rp, pw, acl.CLIENT))
        wait_for(lambda: client.nodes(), 60, what="node n1 to register as labq-node-n1")
        jid = client.submit({"argv": ["/bin/sh", "-c", "env; ps -eo args"], "workdir": d, "time_limit": 600,
                             "cpus": 1})["job_id"]
        wait_for(lambda: client.job(str(jid)).state in ("CD", "F", "NF", "CA"), 120, what="the job to end")
        assert client.job(str(jid)).state == "CD", open(os.path.join(d, "worker.log")).read()[-3000:]
        seen = open(os.path.join(d, f"labq-{jid}.out")).read()
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        for role, secret in pw.items():
            assert secret not in seen, f"the {role} password reached a job"
            assert secret not in ps, f"the {role} password is on a command line"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        shutil.rmtree(d, ignore_errors=True)


def test_apply_without_an_admin_login_is_refused_in_one_line(locked):
    """Once `default` is off, only labq-admin (from the password file) may change the roles."""
    rp, pw, cfg_path, pw_path, _ = locked
    p = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "acl", "--apply",
                        "--password-file", pw_path + ".empty"], capture_output=True, text=True, timeout=60)
    assert p.returncode in (3, 4) and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    again = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "acl", "--apply"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert acl.read_passwords(pw_path) == pw, "re-applying keeps every role's password"


def test_apply_prints_the_configured_address_not_the_host_name(locked):
    """Issue 34: `--apply` printed `socket.gethostname():6379` whatever redis.url said."""
    rp, pw, *_, out = locked
    assert f'url = "unix://{acl.CLIENT}:{pw[acl.CLIENT]}@{rp.sock}"' in out, out
    assert ":6379" not in out and socket.gethostname() + ":" not in out
    client = redis.Redis.from_url(f"unix://{acl.CLIENT}:{pw[acl.CLIENT]}@{rp.sock}", decode_responses=True)
    assert client.ping(), "the printed URL logs in"


def test_adding_a_node_touches_no_other_roles_file(locked):
    """Issue 34: `acl --node gpu2 --apply` rewrote the one password file root:root 0600 and the
    scheduler, running as labq, could no longer start. Now the scheduler's file belongs to the
    scheduler's user, and adding a node writes that node's file only."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("a scheduler user of its own needs root and useradd")
    rp, pw, cfg_path, pw_path, _ = locked
    with unix_user("lqsch") as sched:
        fresh = pw_path + "-fresh"
        p = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "acl", "--aclfile",
                            fresh + ".acl", "--password-file", fresh, "--scheduler-user", sched.pw_name],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert os.stat(os.path.join(fresh, acl.SCHEDULER)).st_uid == sched.pw_uid, "--scheduler-user owns its file"
        os.chown(os.path.join(pw_path, acl.SCHEDULER), sched.pw_uid, sched.pw_gid)
        os.chmod(os.path.dirname(pw_path), 0o755)      # as /etc/labq is
        before = {role: _snapshot(os.path.join(pw_path, role)) for role in os.listdir(pw_path)}
        p = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "acl", "--node", "gpu2",
                            "--apply"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "new: labq-node-gpu2" in p.stdout, p.stdout
        after = {role: _snapshot(os.path.join(pw_path, role)) for role in os.listdir(pw_path)}
        assert {r: after[r] for r in before} == before, "no other role's file was opened for writing"
        assert set(after) - set(before) == {acl.node_role("gpu2")}
        st = os.stat(os.path.join(pw_path, acl.node_role("gpu2")))
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
        # The scheduler's user still reads its own password, and it still logs in.
        code = ("import sys; from labq.scheduler.store import conn; "
                f"print(conn.credentials({acl.SCHEDULER!r}, {pw_path!r})[1])")
        got = subprocess.run([sys.executable, "-c", code], user=sched.pw_uid, group=sched.pw_gid, extra_groups=[],
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT}, cwd="/", capture_output=True,
                             text=True, timeout=60)
        assert got.returncode == 0 and got.stdout.strip() == pw[acl.SCHEDULER], got.stderr
        assert as_role(rp, pw, acl.SCHEDULER).ping()
        assert as_role(rp, acl.read_passwords(pw_path), acl.node_role("gpu2")).ping()


def _snapshot(path: str) -> tuple:
    st = os.stat(path)
    with open(path, "rb") as f:
        return st.st_ino, st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns, f.read()


def test_admin_dead_reads_as_labq_admin_under_the_roles(locked):
    """The client role may not read labq:dead (acl.NOT_READ); an admin's `labq admin dead` logs in
    as labq-admin from the password directory and lists them, values as sizes."""
    rp, pw, cfg_path, *_ = locked
    as_role(rp, pw, acl.SCHEDULER).xadd(K.dead, {"source": K.events, "id": "1-1", "reason": "bad", "ts": 0,
                                                 "entry": json.dumps({"kind": "finished", "body": "x" * 40})})
    p = subprocess.run([sys.executable, "-m", "labq", "--config", cfg_path, "admin", "dead", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["reason"] for r in rows] == ["bad"] and json.loads(rows[0]["entry"])["body"] == "<40 bytes>"
