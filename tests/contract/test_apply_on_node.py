"""The daemon checks a pass's plan (applier.apply_plan) against the jobs on nodes as its tally keeps
them, not against every active job: the applier's room on a node it places on is found from the
running mapping, and with the whole table there it read each pending record (issue 41)."""
from labq.scheduler.daemon import applier
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import FROZEN, K, job, submit, woke

BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 7200}
NOW = 1_800_000_000.0


def test_each_pass_is_applied_against_the_jobs_on_nodes_alone(conns, monkeypatch):
    r, _ = conns
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(2)], "h", 1, 10 ** 9)
    s = Scheduler(r, config.loads('[accounts.a]\nusers = ["alice"]\n'), me="s1", clock=FROZEN)
    s.tick(NOW)
    seen = []
    real = applier.apply_plan

    def spy(p, pending, running, nodes, now, **kw):
        seen.append((dict(running), {i: j for i, j in pending.items() if j.state in states.ON_NODE}))
        return real(p, pending, running, nodes, now, **kw)
    monkeypatch.setattr(applier, "apply_plan", spy)
    for k in range(4):                      # one runs (GPU-0), one more fits, two wait
        submit(r, "alice", {**BODY, "account": "a", "gpus": 1 if k < 2 else 2}, f"r{k}")
    s.tick(NOW + 1, woke(r))
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"start_time": NOW + 1})
    s.tick(NOW + 2)
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 3})
    s.tick(NOW + 3)
    submit(r, "alice", {**BODY, "account": "a"}, "r4")
    s.tick(NOW + 4, woke(r))
    assert job(r, 2).node == "n1" and job(r, 3).state == states.PENDING
    assert len(seen) >= 3 and any(on for on, _ in seen)
    for running, on_node in seen:
        assert running == on_node           # the very records, and none pending
