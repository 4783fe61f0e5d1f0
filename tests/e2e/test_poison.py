"""Poison entries on real processes: a real redis-server and two real `labq scheduler` processes
(a leader and a standby). Entries written straight into an inbox or the events stream, each of
which used to crash every scheduler on every restart, are answered or dead-lettered; both
schedulers live on, a restarted leader never meets them again, and good requests still work."""
import json
import os
import shutil
import signal
import tempfile

import pytest

from labq.cli.embedded import Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import GROUP, Keys
from tests.harness import E2E_MARKS, push, taken, wait_for

pytestmark = E2E_MARKS

K = Keys()
CONFIG = """
[scheduler]
tick = 0.2
"""
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "time_limit": 600}

# op, body text: each one stopped the scheduler before (issue 10).
POISON_REQUESTS = [
    ("submit", json.dumps({**BODY, "array": [0, 10 ** 19, 1]})),
    ("submit", json.dumps({**BODY, "time_limit": int("9" * 400)})),
    ("submit", json.dumps({**BODY, "time_limit": 10 ** 12})),
    ("submit", json.dumps({**BODY, "mem": int("9" * 400)})),
    ("submit", json.dumps({**BODY, "begin": int("9" * 400)})),
    ("submit", '{"argv": ["true"], "workdir": "/tmp", "begin": 1e400}'),
    ("submit", '{"argv": ["true"], "workdir": "/tmp", "begin": NaN}'),
    ("cancel", "[]"),
    ("hold", '"x"'),
    ("submit", "[" * 100_000 + "]" * 100_000),
    ("submit", json.dumps({**BODY, "script": "x" * (20 << 20)})),
    ("submit", "{not json"),
    ("", "{}"),
]


class Two:
    """Redis, a leader and a standby; one node registered by hand (nothing runs jobs)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-poison-", dir="/tmp")
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(CONFIG)
        self.cfg = config.load(self.cfg_path)
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfg_path, log=self.log)
        self.stack.start_redis()
        self.client = Client(self.cfg, url=self.stack.url)
        self.r = self.client.store.r
        AgentStore(self.r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(2)],
                                       "h", 1, 3600)
        for name in ("s1", "s2"):
            self.stack.start(name, "scheduler")

    def leader(self) -> str:
        me = wait_for(lambda: self.r.get(K.leader), 60, what="a leader")
        pid = int(me.split(":")[1])
        return next(n for n, p in self.stack.procs.items() if p.pid == pid)

    def daemon_log(self) -> str:
        self.log.flush()
        with open(os.path.join(self.dir, "daemons.log")) as f:
            return f.read()

    def close(self):
        for name in ("s1", "s2", "redis"):
            self.stack.stop(name)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def two():
    t = Two()
    yield t
    t.close()


def replies(r, rid):
    return [json.loads(x) for x in r.lrange(K.reply(rid), 0, -1)]


def test_poison_requests_and_events_are_answered_and_never_met_again(two):
    r, user = two.r, current_user()
    good = two.client.submit(BODY)["job_id"]
    wait_for(lambda: (j := two.client.read.job(good)) and j.state == states.RUNNING, 60, what="job 1 to run")
    for i, (op, body) in enumerate(POISON_REQUESTS):
        push(r, user, {"rid": f"p{i}", "op": op, "body": body})
    push(r, user, {"op": "submit"})   # no rid: answered on the entry id
    agent = AgentStore(r, K)
    agent.post("finished", good, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": "abc"})
    r.xadd(K.events, {"kind": "finished", "job": "x" * 100, "attempt": "1", "body": "{}"})
    r.xadd(K.events, {"kind": "started", "job": str(good), "attempt": "1", "body": "[" * 50_000})
    r.xadd(K.events, {"kind": "meteor"})
    r.lpush(K.wake, f"user:{user}")

    after = two.client.submit(BODY)     # the queue still answers, after every poison entry
    assert after["ok"] and after["job_id"] == good + 1
    for i, (op, _) in enumerate(POISON_REQUESTS):
        got = replies(r, f"p{i}")
        assert len(got) == 1 and not got[0]["ok"] and got[0]["code"] in (2, 3), (op, got)
        assert "\n" not in got[0]["error"] and len(got[0]["error"]) < 400, got
    assert "max_array_size" in replies(r, "p0")[0]["error"]
    assert "max_time_limit" in replies(r, "p2")[0]["error"]
    assert "nested 100000 deep" in replies(r, "p9")[0]["error"]
    assert "max_request_bytes" in replies(r, "p10")[0]["error"]
    dead = wait_for(lambda: len(r.xrange(K.dead)) >= 4 and r.xrange(K.dead), 30, what="4 dead letters")
    reasons = [f["reason"] for _, f in dead]
    assert any("end_time" in x for x in reasons) and any("kind" in x for x in reasons), reasons
    assert two.stack.dead() == []
    # The job the bad event named is untouched; a good event ends it.
    assert two.client.read.job(good).state == states.RUNNING
    agent.post("finished", good, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": 0})
    wait_for(lambda: two.client.read.job(good).state == states.COMPLETED, 60, what="the good event")
    assert r.xpending(K.events, GROUP)["pending"] == 0 and taken(r) == 0

    # kill -9 the leader; the standby leads and meets none of it again.
    leader = two.leader()
    two.stack.stop(leader, sig=signal.SIGKILL)
    r.delete(K.leader)      # the lease would lapse in 10 s; a killed leader's lease is no one's
    third = two.client.submit(BODY)
    assert third["ok"] and two.leader() != leader
    assert len(r.xrange(K.dead)) == len(dead)
    assert all(len(replies(r, f"p{i}")) == 1 for i in range(len(POISON_REQUESTS)))
    assert two.stack.dead() == []
