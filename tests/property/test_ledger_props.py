"""Properties of the ledger over random job streams, through the real daemon on fakeredis with an
injected clock: without an override, available never goes negative; the charges add up to every
attempt's allocation × time × rate; no attempt is charged twice, across scheduler restarts and
redelivered events; `ledger.verify` finds nothing wrong."""
import json

import fakeredis
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.client import Client
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.money import ledger, pricing
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.reads import Reader
from tests.harness import push

K = Keys()
CFG = config.loads("""
[rates]
gpu_hour = 2.0
cpu_hour = 0.1
overhead_per_attempt = 0.01
[accounts.eta]
users = ["alice"]
[[budgets]]
name = "usd"
account = "eta"
limit = 20.0
reserve = 0.1
[[budgets]]
name = "gpuh"
account = "eta"
unit = "gpu_hours"
limit = 6.0
""")
T0 = 1_800_000_000.0

steps = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 2), st.integers(60, 4 * 3600)),
    st.tuples(st.just("advance"), st.integers(1, 3000)),
    st.tuples(st.just("finish"), st.integers(0, 50), st.floats(0, 1), st.sampled_from(["completed", "exit", "preempted"])),
    st.tuples(st.just("restart"),),
), min_size=1, max_size=30)


class World:
    def __init__(self):
        server = fakeredis.FakeServer(version=(7, 0))
        self.r = fakeredis.FakeRedis(server=server, decode_responses=True)
        self.raw = fakeredis.FakeRedis(server=server)
        AgentStore(self.r, K).register("n1", 32, 256 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)],
                                       "h", 1, 10 ** 9)
        self.now, self.n, self.gen, self.last = T0, 0, 0, None
        self.s = self._leader()
        self.tick()

    def _leader(self):
        self.gen += 1
        return Scheduler(self.r, CFG, me=f"s{self.gen}", clock=lambda: 0.0)

    def tick(self):
        self.s.tick(self.now)

    def running(self):
        return sorted((j for j in Reader(self.r, K).active() if j.state in states.ON_NODE), key=lambda j: j.id)

    def finish(self, job, end, outcome):
        a = job.current
        body = {"outcome": outcome, "exit_code": 0 if outcome == "completed" else 1, "start_time": a.dispatch_time,
                "end_time": end}
        AgentStore(self.r, K).post("finished", job.id, a.attempt, "n1", body)
        self.last = (job.id, a.attempt, body)

    def step(self, s):
        if s[0] == "submit":
            self.n += 1
            body = {"argv": ["true"], "workdir": "/tmp", "gpus": s[1], "cpus": 2, "time_limit": s[2], "account": "eta"}
            push(self.r, "alice", {"rid": f"r{self.n}", "op": "submit", "body": json.dumps(body)})
        elif s[0] == "advance":
            self.now += s[1]
            # The runner enforces the time limit: an attempt past it ends `timeout` at the limit.
            for j in self.running():
                if j.current.dispatch_time + j.time_limit <= self.now:
                    self.finish(j, j.current.dispatch_time + j.time_limit, "timeout")
        elif s[0] == "finish":
            run = self.running()
            if run:
                j = run[s[1] % len(run)]
                d = j.current.dispatch_time
                self.finish(j, min(self.now, d + s[2] * j.time_limit), s[3])
        else:
            self.r.delete(K.leader)          # the leader dies; the next one recovers
            self.s = self._leader()
            if self.last:                    # and an agent redelivers the last end it reported
                AgentStore(self.r, K).post("finished", self.last[0], self.last[1], "n1", self.last[2])
        self.tick()

    def check(self):
        rd = Reader(self.r, K)
        for b in Client(CFG, r=self.r, user="alice").balances(self.now):
            assert b.available >= 0, b
        entries = rd.ledger_all()
        charges = [e for e in entries if e["type"] == "charge"]
        assert len({(e["key"], e["budget"]) for e in charges}) == len(charges), "an attempt charged twice"
        jobs = rd.active() + rd.ended()
        ended = [(j, a) for j in jobs for a in j.attempts if a.end_time is not None]
        assert len(charges) == 2 * len(ended)
        for name, unit in (("usd", "usd"), ("gpuh", "gpu_hours")):
            want = sum(ledger.charge(pricing.rate(j, unit, "fake", CFG), a.dispatch_time, a.end_time, unit, CFG)
                       for j, a in ended)
            assert sum(int(e["amount"]) for e in charges if e["budget"] == name) == want
            assert int(rd.spent().get(name, 0)) == want
        assert sum(a.cost for _, a in ended) == sum(int(e["amount"]) for e in charges if e["budget"] == "usd")
        assert ledger.verify(entries, rd.spent(), rd.ledger_keys(), jobs) == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_random_job_streams_keep_the_ledger(plan):
    w = World()
    for s in plan:
        w.step(s)
        w.check()
