"""Issue 34 item 4, least privilege for data: a job's script and the environment its submitter
exported (`--export`) are read by their owner and admins (through the scheduler, `labq show
--script`), the scheduler and the nodes, never by the client role that every user holds.

On a real redis-server with the roles `labq admin acl --apply` generates, a private munged, real
unprivileged users running the real CLI, and the real scheduler and worker daemons. And what those
roles must let every user read: a user's own `labq prio`, the published ranking patched (issue 39).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest
import redis

from labq.scheduler.store import acl
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, start_redis, unix_user, wait_for

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="real users and role password files need root and useradd")]
K = Keys()
TAG = uuid.uuid4().hex[:10]
DB_PASSWORD = f"hunter2-{TAG}"            # in the script's text
WANDB = f"wandb-{TAG}"                    # exported with --export
# Over codec.SHARED_SPEC: an array of it used to store one shared {script, argv} for all its tasks.
SCRIPT = (f"#!/bin/sh\n# {'train ' * 60}\nexport DB_PASSWORD={DB_PASSWORD}\n"
          "echo \"ran $DB_PASSWORD $WANDB_API_KEY ${LABQ_ARRAY_TASK_ID:-}\"\n")

LAB = """
[redis]
url = "{url}"
password_file = "{pw}"
[scheduler]
tick = 0.2
node_lease = "10s"
[security]
auth = "munge"
munge_socket = "{munge}"
admins = ["root"]
[worker]
name = "n1"
gpus = 0
cpus = 2
mem = "4G"
slots = 2
spool = "{spool}"
run_as = "self"
allow_root = true
"""


class Lab:
    def __init__(self, rp, munged, d):
        self.rp, self.d = rp, d
        self.pw_path = os.path.join(d, "secrets")
        self.path = os.path.join(d, "labq.toml")
        with open(self.path, "w") as f:
            f.write(f'[redis]\nurl = "{rp.url}"\npassword_file = "{self.pw_path}"\n')
        p = subprocess.run([sys.executable, "-m", "labq", "--config", self.path, "admin", "acl", "--apply",
                            "--node", "n1"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        self.pw = acl.read_passwords(self.pw_path)
        with open(self.path, "w") as f:     # the world-readable config, as the admin guide writes it
            f.write(LAB.format(url=f"unix://{acl.CLIENT}:{self.pw[acl.CLIENT]}@{rp.sock}", pw=self.pw_path,
                               munge=munged.socket, spool=os.path.join(d, "spool")))
        os.chmod(self.path, 0o644)
        self.work = os.path.join(d, "work")
        os.mkdir(self.work)
        os.chmod(self.work, 0o1777)
        self.script = os.path.join(d, "train.sh")
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        os.chmod(self.script, 0o644)

    def role(self, role: str) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.rp.sock, username=role, password=self.pw[role],
                           decode_responses=True)

    def labq(self, pw, *args) -> subprocess.CompletedProcess:
        """The real CLI as user `pw` (None: root), its own uid and group, a minimal environment."""
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "USER": pw.pw_name if pw else "root",
               "LOGNAME": pw.pw_name if pw else "root", "LABQ_NO_SYSTEM_CONFIG": "1"}
        ids = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []} if pw else {}
        return subprocess.run([sys.executable, "-m", "labq", "--config", self.path, *args], env=env, cwd=self.work,
                              capture_output=True, text=True, timeout=120, **ids)

    def submit(self, pw, *flags) -> int:
        p = self.labq(pw, "sub", "--parsable", "-t", "10m", "-D", self.work, f"--export=WANDB_API_KEY={WANDB}",
                      *flags, self.script)
        assert p.returncode == 0, p.stderr
        return int(p.stdout.strip().split("_")[0])


@pytest.fixture(scope="module")
def lab(munged):
    rp = start_redis(perm="777")
    d = tempfile.mkdtemp(prefix="labq-private-", dir="/tmp")
    os.chmod(d, 0o755)
    lab = Lab(rp, munged, d)
    logs = {what: open(os.path.join(d, f"{what}.log"), "w") for what in ("scheduler", "worker")}
    procs = [subprocess.Popen([sys.executable, "-m", "labq", "--config", lab.path, what], stdout=subprocess.DEVNULL,
                              stderr=logs[what]) for what in ("scheduler", "worker")]
    try:
        s = lab.role(acl.SCHEDULER)
        wait_for(lambda: s.get(K.leader) and s.smembers(K.nodes), 90, what="the scheduler to lead and n1 to register")
        with unix_user("lqa") as alice, unix_user("lqb") as bob:
            lab.alice, lab.bob = alice, bob
            lab.single = lab.submit(alice, "-H")
            lab.array = lab.submit(alice, "-H", "-a", "1-3")
            yield lab
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        rp.proc.terminate()
        rp.proc.wait(10)
        shutil.rmtree(rp.dir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def _denied(fn, *a) -> bool:
    try:
        fn(*a)
    except redis.exceptions.NoPermissionError:
        return True
    except redis.ResponseError as e:
        return "NOPERM" in str(e)
    return False


def _read(c: redis.Redis, key: str, kind: str):
    return {"string": lambda: c.get(key), "hash": lambda: c.hgetall(key), "list": lambda: c.lrange(key, 0, -1),
            "set": lambda: c.smembers(key), "zset": lambda: c.zrange(key, 0, -1),
            "stream": lambda: c.xrange(key)}[kind]()


def test_no_key_the_client_role_reads_holds_a_script_or_an_exported_secret(lab):
    """The reproduction: `redis-cli -u $CLIENT_URL GET labq:job:N` printed `export DB_PASSWORD=…`,
    and the exported WANDB_API_KEY sat in a key a node, and the client, could read. Every key
    in Redis is read as labq-client the way its type allows: what it may read holds neither."""
    s, c = lab.role(acl.SCHEDULER), lab.role(acl.CLIENT)
    keys = sorted(s.scan_iter(f"{K.p}:*", count=1000))
    readable, secret_keys = [], []
    for key in keys:
        kind = s.type(key)
        whole = json.dumps(_read(s, key, kind), default=str)
        if DB_PASSWORD in whole or WANDB in whole:
            secret_keys.append(key)
        try:
            got = _read(c, key, kind)
        except redis.exceptions.NoPermissionError:
            continue
        readable.append(key)
        text = json.dumps(got, default=str)
        assert DB_PASSWORD not in text and WANDB not in text, f"labq-client reads a secret in {key}"
    assert K.job(lab.single) in readable and K.job(lab.array + 1) in readable, "records stay public"
    assert secret_keys, "the secrets are kept somewhere (for the node that runs the job)"
    for ref in (lab.single, lab.array):
        assert _denied(c.get, K.script(ref)) and _denied(c.get, K.job_env(ref))
    assert json.loads(c.get(K.job(lab.single)))["user"] == lab.alice.pw_name


def test_show_script_is_for_its_owner_and_admins_only(lab):
    """`labq show --script ID` asks the scheduler (munge says who asks): the owner and admins get
    the script, anyone else is refused in one line (exit 3); `show --json` never leaks it."""
    for jid in (str(lab.single), f"{lab.array}_2"):
        theirs = lab.labq(lab.bob, "show", "--script", jid)
        assert theirs.returncode == 3 and theirs.stderr.count("\n") == 1 and "Traceback" not in theirs.stderr, \
            (theirs.returncode, theirs.stderr)
        assert lab.alice.pw_name in theirs.stderr and DB_PASSWORD not in theirs.stdout + theirs.stderr
        public = lab.labq(lab.bob, "show", "--json", jid)
        assert public.returncode == 0, public.stderr
        shown = json.loads(public.stdout)
        assert shown["script"] is None and shown["command"][0] == "<script>" and shown["export"] == "NONE"
        assert DB_PASSWORD not in public.stdout and WANDB not in public.stdout
        for who in (lab.alice, None):      # the owner, then root (an admin)
            own = lab.labq(who, "show", "--script", jid)
            assert own.returncode == 0 and own.stdout == SCRIPT, (own.returncode, own.stderr)
        mine = lab.labq(lab.alice, "show", "--json", jid)
        assert mine.returncode == 0, mine.stderr
        assert json.loads(mine.stdout)["script"] == SCRIPT
        env = lab.labq(lab.alice, "show", "--env", jid)
        assert env.returncode == 0 and env.stdout == f"WANDB_API_KEY={WANDB}\n", (env.returncode, env.stderr)
        theirs = lab.labq(lab.bob, "show", "--env", jid)
        assert theirs.returncode == 3 and WANDB not in theirs.stdout + theirs.stderr, theirs.stderr
    missing = lab.labq(lab.bob, "show", "--script", "999999")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr


def test_a_node_role_reads_only_what_was_dispatched_to_it(lab):
    """A node role reads no submission's script or environment, only the copies the scheduler
    handed over to that node at dispatch (keys.handover), and never another node's."""
    s, n1 = lab.role(acl.SCHEDULER), lab.role(acl.node_role("n1"))
    for ref in (lab.single, lab.array):
        assert _denied(n1.get, K.script(ref)) and _denied(n1.get, K.job_env(ref))
    s.set(K.handover("n2", lab.single, "script"), SCRIPT)     # as if dispatched to another node
    assert _denied(n1.get, K.handover("n2", lab.single, "script"))
    assert n1.get(K.handover("n1", lab.single, "script")) is None, "a held job was dispatched nowhere"
    s.delete(K.handover("n2", lab.single, "script"))


def test_the_node_role_runs_scripted_jobs_with_their_exported_environment(lab):
    """n1's role reads what it runs: the script and the exported variables reach the job."""
    jid = lab.submit(lab.alice)
    arr = lab.submit(lab.alice, "-a", "1-2")
    s = lab.role(acl.SCHEDULER)

    def ended(i):
        raw = s.get(K.job(i))
        return raw and json.loads(raw).get("state") in ("CD", "F", "NF", "CA", "TO")
    wait_for(lambda: all(ended(i) for i in (jid, arr, arr + 1)), 180, what="the scripted jobs to end")
    log = open(os.path.join(lab.d, "worker.log")).read()[-3000:]
    assert [json.loads(s.get(K.job(i)))["state"] for i in (jid, arr, arr + 1)] == ["CD"] * 3, log
    assert open(os.path.join(lab.work, f"labq-{jid}.out")).read().split() == ["ran", DB_PASSWORD, WANDB]
    assert open(os.path.join(lab.work, f"labq-{arr}_2.out")).read().split()[:3] == ["ran", DB_PASSWORD, WANDB]
    left = [key for key in s.scan_iter(f"{K.p}:handover:*")]
    assert left == [], f"the handed-over copies go once the jobs started: {left}"


def test_a_users_own_prio_is_the_published_ranking_patched_under_the_client_role(lab):
    """`labq prio` of a real unprivileged user who just submitted a job and a held 1,000-task array
    (a rest), under the labq-client role: the leader's published ranking with their jobs patched in
    (its index, the changed jobs' and rests' listing, the rest's row: keys the generated roles let
    every user read), as of the ranking's time, not ranked from the rows; another user sees the
    ranking as published, with the count of changes since."""
    s = lab.role(acl.SCHEDULER)
    for _ in range(3):      # the leader may publish anew between the submits and `prio`: then again
        wait_for(lambda: s.exists(K.ranking) and not s.exists(K.ranking_since), 60, what="a ranking of a quiet queue")
        at = s.get(K.ranking).partition("\n")[0]
        job = lab.submit(lab.alice, "-H")
        arr = lab.submit(lab.alice, "-H", "-a", "1-1000")
        own, theirs = lab.labq(lab.alice, "prio"), lab.labq(lab.bob, "prio")
        if s.get(K.ranking).partition("\n")[0] == at:
            break
    else:
        pytest.fail("the leader published a ranking between the submits and prio three times")
    assert own.returncode == 0 and "Traceback" not in own.stderr and "NOPERM" not in own.stderr, own.stderr
    head, *lines = own.stdout.splitlines()
    assert "; as of " in head, "the published ranking, patched: not ranked from the rows"
    assert any(line.split()[0] == str(job) for line in lines) and any(line.startswith(f"{arr}_[1-") for line in lines)
    assert s.hget(K.ranking_mine, lab.alice.pw_name) == "*" and f"\n{arr}:" in s.hget(K.ranking_mine,
                                                                                       "\n" + lab.alice.pw_name)
    assert theirs.returncode == 0 and "job changes since" in theirs.stdout.splitlines()[0], theirs.stderr
    assert not any(line.startswith(f"{arr}_") for line in theirs.stdout.splitlines()), "as published: before it"
