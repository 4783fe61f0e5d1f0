"""Issue 35, item 3: a node whose runners take no work is noticed. Its runner frozen (SIGSTOP), an
attempt dispatched there is withdrawn at start_timeout; the node is then `unhealthy` (the reason in
`labq nodes`, an alert, the labq_node metric's state) and gets no work - the job waits for, then
runs on, another node - until a runner of it proves alive again. A real scheduler, agents and Redis."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from labq.cli.embedded import Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.jobs import states
from labq.scheduler.settings import config
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, wait_for

pytestmark = E2E_MARKS

K = Keys("labq")
CONFIG = """
[scheduler]
tick = 0.1
kill_wait = "1s"
node_lease = "10s"
start_timeout = 3
[accounts.eta]
users = ["{user}"]
[worker]
name = "{name}"
gpus = 1
cpus = 2
mem = "4G"
slots = 1
spool = "{spool}"
run_as = "self"
"""


class Site:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-health-", dir="/tmp")
        self.cfgs = {}
        for name in ("node-a", "node-b"):
            self.cfgs[name] = path = os.path.join(self.dir, f"{name}.toml")
            with open(path, "w") as f:
                f.write(CONFIG.format(user=current_user(), name=name, spool=os.path.join(self.dir, f"spool-{name}")))
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfgs["node-a"], log=self.log)
        self.stack.start_redis()
        self.stack.start("scheduler", "scheduler")
        self.client = Client(config.load(self.cfgs["node-a"]), url=self.stack.url)
        self.r = self.client.store.r

    def start_agent(self, name):
        argv = [sys.executable, "-m", "labq.cli.main", "--config", self.cfgs[name], "worker"]
        self.stack.procs[name] = subprocess.Popen(argv, env=self.stack.env(), stdout=self.log, stderr=self.log,
                                                  process_group=0)
        wait_for(lambda: any(n.name == name and n.state == "up" for n in self.client.nodes()), 60, what=f"{name} up")

    def runner_pid(self, name) -> int:
        v = wait_for(lambda: [x for x in self.r.hvals(K.node_runners(name)) if x.startswith("idle")], 60,
                     what=f"{name}'s runner idle")[0]
        return int(v.split("pid=")[1].split()[0])

    def nodes_json(self) -> dict:
        p = subprocess.run(self.stack.command("nodes", "--json"), env=self.stack.env(), capture_output=True,
                           text=True, timeout=60)
        return {d["name"]: d for d in json.loads(p.stdout)}

    def close(self):
        self.stack.stop_all(timeout=20)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def site():
    s = Site()
    yield s
    s.close()


def test_a_node_whose_runners_are_frozen_is_unhealthy_and_gets_no_work(site):
    from labq.cli.subcore import build_body
    site.start_agent("node-a")
    frozen = site.runner_pid("node-a")
    os.kill(frozen, signal.SIGSTOP)
    try:
        body = build_body({"account": "eta", "gpus": "1", "time_": "10m", "chdir": site.dir},
                          ["/bin/true"], None)
        jid = site.client.submit(body)["job_id"]
        # withdrawn at start_timeout; then never dispatched to node-a again while it is unhealthy
        j = wait_for(lambda: (x := site.client.read.job(jid)) and x.attempts and x.attempts[0].outcome and x,
                     60, what="the first attempt withdrawn")
        assert j.attempts[0].outcome == "withdrawn" and j.attempts[0].node == "node-a", j.attempts
        shown = wait_for(lambda: (d := site.nodes_json()["node-a"]) and d["state"] == "unhealthy" and d, 30,
                         what="node-a unhealthy")
        assert f"job {jid} attempt 1" in shown["reason"] and "within 3s" in shown["reason"], shown
        alerts = [f for _, f in site.r.xrange(K.alerts) if f.get("kind") == "node_unhealthy"]
        assert len(alerts) == 1 and alerts[0]["scope"] == "node:node-a", alerts
        p = subprocess.run(site.stack.command("nodes"), env=site.stack.env(), capture_output=True, text=True,
                           timeout=60)
        assert "node-a: unhealthy: no runner took job" in p.stdout, p.stdout
        # A withdrawn attempt goes to another node: the one that comes up now.
        site.start_agent("node-b")
        done = wait_for(lambda: (x := site.client.read.job(jid)) and x.state in states.TERMINAL and x, 60,
                        what="the job to end")
        assert done.state == states.COMPLETED and [a.node for a in done.attempts] == ["node-a", "node-b"], \
            done.attempts
    finally:
        os.kill(frozen, signal.SIGCONT)
    # Thawed, its runner's heartbeat makes node-a healthy again.
    wait_for(lambda: site.nodes_json()["node-a"]["state"] == "up", 60, what="node-a healthy again")
    assert not site.r.exists(K.node_health("node-a"))
