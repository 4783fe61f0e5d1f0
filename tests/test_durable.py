"""Durable or refused, on real processes: `labq scheduler` refuses a Redis without AOF (unless
redis.allow_volatile) and a Redis that went backwards, in one line naming what to do; an accepted
loss lets it lead again."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from labq.scheduler.durability import default_path
from labq.scheduler.model import Gpu
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.conftest import ROOT, start_redis, wait_for

pytestmark = [pytest.mark.redis]
if not shutil.which("redis-server"):
    pytestmark.append(pytest.mark.skipif(not os.environ.get("CI"), reason="redis-server is not installed"))
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
