"""Durable or refused, and no phantom submits, on real processes: `labq scheduler` refuses a Redis
without AOF (unless redis.allow_volatile) and a Redis that went backwards, in one line naming what
to do; an accepted loss lets it lead again. A `labq sub` that gives up names its request id and
says it was not submitted; the scheduler that comes up later answers it "expired" and creates
nothing; a request read in time is done once however often the client sent it."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from labq.scheduler.daemon.durability import default_path
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, ROOT, push, start_redis, wait_for

pytestmark = E2E_MARKS
K = Keys()


class Site:
    def __init__(self, appendonly: bool, extra: str = ""):
        self.rp = start_redis(appendonly=appendonly)
        self.dir = tempfile.mkdtemp(prefix="labq-durable-", dir="/tmp")
        self.cfg = os.path.join(self.dir, "labq.toml")
        with open(self.cfg, "w") as f:
            f.write(f'[redis]\nurl = "{self.rp.url}"\n{extra}\n[scheduler]\ntick = 0.2\n')
        self.env = dict(os.environ, LABQ_STATE_DIR=self.dir, PYTHONPATH=ROOT)
        self.r = self.rp.client()
        self.procs = []

    def labq(self, *args, env=None):
        return subprocess.run([sys.executable, "-m", "labq", "--config", self.cfg, *args], env=env or self.env,
                              capture_output=True, text=True, timeout=120)

    def labq_user(self) -> str:
        from labq.scheduler.client import current_user
        return current_user()

    def scheduler(self):
        p = subprocess.Popen([sys.executable, "-m", "labq", "--config", self.cfg, "scheduler"], env=self.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        self.rp.proc.terminate()
        self.rp.proc.wait(10)
        shutil.rmtree(self.rp.dir, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def site(request):
    s = Site(*request.param)
    yield s
    s.close()


@pytest.mark.parametrize("site", [(False,)], indirect=True)
def test_a_redis_without_aof_is_refused(site):
    p = site.scheduler()
    assert p.wait(60) == 3
    err = p.stderr.read()
    assert err.count("\n") == 1 and "no AOF" in err and "redis.allow_volatile = true" in err, err
    assert site.r.get(K.leader) is None and site.r.get(K.seq) is None


@pytest.mark.parametrize("site", [(False, "allow_volatile = true")], indirect=True)
def test_allow_volatile_leads_and_says_so(site):
    site.scheduler()
    wait_for(lambda: site.r.get(K.leader), 60, what="the scheduler to lead")
    for cmd in ("stat", "nodes"):
        out = site.labq(cmd)
        assert out.returncode == 0 and out.stdout.startswith("WARNING: ") and "no AOF" in out.stdout, out


@pytest.mark.parametrize("site", [(True,)], indirect=True)
def test_a_redis_that_went_backwards_is_refused_until_the_loss_is_accepted(site, monkeypatch):
    AgentStore(site.r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    first = site.scheduler()
    for i in range(3):
        out = site.labq("sub", "--parsable", "--", "true")
        assert out.returncode == 0, out.stderr
    monkeypatch.setenv("LABQ_STATE_DIR", site.dir)
    path = default_path("labq", site.rp.url)
    assert path.startswith(site.dir)
    wait_for(lambda: os.path.exists(path) and json.load(open(path))["last_job_id"] == 3, 60,
             what="the state file to say 3")
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0
    site.r.flushall()           # what a Redis restarted without its data looks like
    again = site.scheduler()
    assert again.wait(60) == 3
    err = again.stderr.read()
    assert err.count("\n") == 1, err
    assert "last job id 0" in err and "last job id 3" in err and "labq admin accept-loss" in err, err
    assert site.r.get(K.leader) is None
    out = site.labq("admin", "accept-loss")
    assert out.returncode == 0 and "last job id 3" in out.stdout and "-> last job id 0" in out.stdout, out
    site.scheduler()
    wait_for(lambda: site.r.get(K.leader), 60, what="the scheduler to lead after the accepted loss")
    AgentStore(site.r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    out = site.labq("sub", "--parsable", "--", "true")
    assert out.returncode == 0 and out.stdout.strip() == "1", out    # ids start again: the loss was accepted


@pytest.fixture
def aof_site():
    s = Site(True)
    AgentStore(s.r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    yield s
    s.close()


def test_a_submit_that_gave_up_is_never_done(aof_site):
    t0 = time.monotonic()
    out = aof_site.labq("sub", "--", "true", env={**aof_site.env, "LABQ_TIMEOUT": "2"})
    assert out.returncode == 4 and time.monotonic() - t0 < 30, out
    m = re.search(r"request ([0-9a-f]{32}) was not submitted", out.stderr)
    assert m and out.stderr.count("\n") == 1, out.stderr
    rid = m.group(1)
    assert aof_site.r.llen(K.requests) == 3       # three tries, one request id
    aof_site.scheduler()
    got = wait_for(lambda: aof_site.r.get(K.done(rid)), 60, what="the expired request's answer")
    reply = json.loads(got)
    assert not reply["ok"] and reply["error"].startswith("expired") and reply["code"] == 4
    assert aof_site.r.get(K.seq) is None and aof_site.r.zcard(K.active) == 0      # no job, no id spent
    out = aof_site.labq("sub", "--parsable", "--", "true")                    # the queue works
    assert out.returncode == 0 and out.stdout.strip() == "1", out
    said = aof_site.labq("stat", "--rid", rid)                                 # the command it names answers
    assert said.returncode == 0 and said.stdout.startswith(f"request {rid}: not submitted - expired"), said
    said = aof_site.labq("stat", "--rid", "f" * 32)
    assert said.returncode == 0 and "unknown" in said.stdout, said


def test_retries_of_one_request_id_make_one_job(aof_site):
    user = aof_site.labq_user()
    for _ in range(3):   # what a client's three tries look like when the scheduler was slow
        push(aof_site.r, user, {"rid": "same", "op": "submit", "expires": f"{time.time() + 60:.3f}",
                                    "body": json.dumps({"argv": ["true"], "workdir": "/tmp"})})
    aof_site.r.lpush(K.wake, f"user:{user}")
    aof_site.scheduler()
    wait_for(lambda: aof_site.r.llen(K.reply("same")) == 3, 60, what="three answers")
    answers = [json.loads(x) for x in aof_site.r.lrange(K.reply("same"), 0, -1)]
    assert [a["job_id"] for a in answers] == [1, 1, 1] and aof_site.r.get(K.seq) == "1"


def _unit_env(site, state_dir: str) -> dict:
    """The scheduler unit's environment: $STATE_DIRECTORY, a home it cannot write, no LABQ_STATE_DIR."""
    env = {k: v for k, v in site.env.items() if k not in ("LABQ_STATE_DIR", "XDG_STATE_HOME")}
    return dict(env, STATE_DIRECTORY=state_dir, HOME="/dev/null")     # a home no one, not even root, can write


@pytest.mark.parametrize("site", [(True,)], indirect=True)
def test_the_state_file_is_where_the_unit_says_and_accept_loss_finds_it(site):
    """Issue 36: under the unit the state file ignored $STATE_DIRECTORY (one warning, a rolled-back
    Redis led blind) and accept-loss, run from a shell without the unit's environment, exited 1."""
    sdir = os.path.join(site.dir, "var-lib-labq-scheduler")
    os.mkdir(sdir, 0o750)
    site.env = _unit_env(site, sdir)
    AgentStore(site.r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    first = site.scheduler()
    for _ in range(3):
        assert site.labq("sub", "--parsable", "--", "true").returncode == 0
    wait_for(lambda: [f for f in os.listdir(sdir) if f.endswith(".json")], 60, what="a state file in $STATE_DIRECTORY")
    path = os.path.join(sdir, [f for f in os.listdir(sdir) if f.endswith(".json")][0])
    wait_for(lambda: json.load(open(path))["last_job_id"] == 3, 60, what="the state file to say 3")
    assert site.r.get(K.state_file) == path
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0
    site.r.set(K.seq, 1)                  # an older backup restored: ids behind what was handed out
    again = site.scheduler()
    assert again.wait(60) == 3
    err = again.stderr.read()
    assert "went backwards" in err and path in err, err
    shell = {k: v for k, v in site.env.items() if k != "STATE_DIRECTORY"}    # an admin's shell
    out = site.labq("admin", "accept-loss", env=shell)
    assert out.returncode == 0 and out.stdout.startswith(f"{path}: last job id 3") and "-> last job id 1" in out.stdout, out
    site.scheduler()
    wait_for(lambda: site.r.get(K.leader), 60, what="the scheduler to lead after the accepted loss")


@pytest.mark.parametrize("site", [(True,)], indirect=True)
def test_a_leader_that_cannot_write_its_state_file_refuses_to_lead(site):
    site.env = _unit_env(site, "/dev/null/state")      # ENOTDIR, even for root
    p = site.scheduler()
    assert p.wait(60) == 3
    err = p.stderr.read()
    assert err.count("\n") == 1 and "cannot write the state file /dev/null/state/" in err, err
    assert site.r.get(K.leader) is None
