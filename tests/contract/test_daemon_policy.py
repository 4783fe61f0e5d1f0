"""The daemon applying the deeper policy: preemption (control, PR, requeue with lost work), fair-share
usage kept in Redis, and reclaim of borrowed GPUs — on fakeredis and a real redis-server."""
import json

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import codes, states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.reads import Reader
from tests.harness import FROZEN, K, job, submit, woke

CFG = config.loads("""
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
grace = "45s"
min_runtime = "1m"
[accounts.a]
users = ["alice"]
guarantee = 2
[accounts.b]
users = ["bob"]
guarantee = 2
""")
BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 7200}
NOW = 1_800_000_000.0


def _setup(r, raw, gpus=2):
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(gpus)], "h", 1,
                              10 ** 9)
    s = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s.tick(NOW)
    return s


def test_preemption_end_to_end_through_the_store(conns):
    r, raw = conns
    s = _setup(r, raw)
    submit(r, "alice", {**BODY, "gpus": 2, "qos": "low", "account": "a"}, "low")
    s.tick(NOW, woke(r))
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"start_time": NOW})
    agent.post("checkpoint", 1, 1, "n1", {})
    s.tick(NOW + 1)
    # A normal job arrives before the low one has run min_runtime: deferred, nothing preempted.
    submit(r, "alice", {**BODY, "account": "a"}, "hi")
    s.tick(NOW + 30, woke(r))
    assert job(r, 2).reason == states.PREEMPTION_DEFERRED and job(r, 1).state == states.RUNNING
    s.tick(NOW + 120)
    low = job(r, 1)
    assert low.state == states.PREEMPTING and low.preempted_for == 2
    assert r.get(K.control(1)) == "preempt:45"
    assert job(r, 2).reason == states.PREEMPTING_FOR
    s.tick(NOW + 130)                       # draining: no second preemption, still waiting
    assert job(r, 2).reason == states.PREEMPTING_FOR
    agent.post("finished", 1, 1, "n1", {"outcome": "preempted", "exit_code": None, "end_time": NOW + 150,
                                        "last_checkpoint": NOW + 100})
    s.tick(NOW + 151)
    low, hi = job(r, 1), job(r, 2)
    assert hi.state == states.RUNNING
    assert low.state == states.PENDING and low.restart_count == 1 and low.preempt_count == 1
    assert low.attempts[0].outcome == "preempted" and low.attempts[0].lost_work_s == 50.0
    # The low job's usage went into fair share: (2 GPUs + 1 CPU / 16) × 150 s.
    usage = Reader(r, K).usage()
    assert usage["a"][0] == 309.375 and usage["a"][1] > 0
    assert json.loads(r.hget(K.usage, "a"))[0] == 309.375


def test_a_lender_asking_for_its_guarantee_reclaims_borrowed_gpus(conns):
    r, raw = conns
    s = _setup(r, raw, gpus=4)
    submit(r, "bob", {**BODY, "gpus": 4, "account": "b"}, "big")        # 2 own + 2 lent by a
    s.tick(NOW, woke(r))
    assert job(r, 1).state == states.RUNNING and job(r, 1).borrowed
    AgentStore(r, K).post("started", 1, 1, "n1", {"start_time": NOW})
    submit(r, "alice", {**BODY, "gpus": 2, "account": "a"}, "mine")
    s.tick(NOW + 5, woke(r))   # no min_runtime for a reclaim: at once
    assert job(r, 1).state == states.PREEMPTING and r.get(K.control(1)) == "preempt:120"
    assert "guarantee" in job(r, 1).detail


def test_test_only_gives_the_expected_start_of_a_job_that_would_wait(conns):
    from tests.harness import reply
    r, raw = conns
    s = _setup(r, raw)
    submit(r, "alice", {**BODY, "gpus": 2, "account": "a", "time_limit": 3600}, "run")
    s.tick(NOW, woke(r))
    submit(r, "alice", {**BODY, "gpus": 2, "account": "a", "test_only": True}, "ask")
    s.tick(NOW + 10, woke(r))
    got = reply(r, "ask")
    assert got["starts_now"] is False and got["expected_start"] == NOW + 3600 + CFG.kill_wait


def test_a_big_commit_extends_the_lease_to_outlive_it(conns, monkeypatch):
    from labq.scheduler.jobs import rest
    from tests.harness import reply
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # a big commit: 5,000 records (a big array is one rest)
    r, raw = conns
    s = _setup(r, raw)
    seen = []
    real_txn = s.store.txn

    def txn(build):
        seen.append(r.pttl(K.leader))
        return real_txn(build)
    s.store.txn = txn
    submit(r, "alice", {**BODY, "account": "a", "array": [1, 5000, 1]}, "big")
    s.tick(NOW, woke(r))
    assert reply(r, "big")["count"] == 5000 and "job_ids" not in reply(r, "big")
    assert max(seen) > s.lease_s * 1000          # lease + 0.1 ms per job written, before the write


def test_a_lapsed_lease_taken_afresh_reloads_what_another_leader_wrote(conns):
    r, raw = conns
    s1 = _setup(r, raw)
    r.delete(K.leader)                      # s1 stalls past its lease...
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    submit(r, "alice", {**BODY, "account": "a"}, "by-s2")
    assert s2.tick(NOW + 1, woke(r))        # ...s2 leads meanwhile and admits a job...
    s2.store.release_leader()               # ...and stops
    assert s1.tick(NOW + 2)                 # s1 takes the free lease: it must not trust its memory
    assert 1 in s1.jobs and s1.jobs[1].state == job(r, 1).state


def test_with_backfill_off_the_daemon_plans_over_its_kept_backlog_as_a_whole_pass_would(conns):
    """The daemon's passes over its kept Backlog (policy/kept.py, backfill off) while jobs are
    submitted, start, end and get new reasons: each pass decides as the per-job pass over the same
    snapshot, and the jobs behind the blocker say so."""
    from labq.scheduler import policy
    r, raw = conns
    cfg = config.loads('[scheduler]\nbackfill_depth = 0\n[accounts.a]\nusers = ["alice"]\n')
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(2)], "h", 1, 10 ** 9)
    s = Scheduler(r, cfg, me="s1", clock=FROZEN)
    s.tick(NOW)
    seen = []
    real = policy.plan

    def checked(snap, c, **kw):
        got = real(snap, c, **kw)
        seen.append(("backlog" in kw, got, policy.plan_per_job(snap, c)))
        return got
    policy.plan = checked
    try:
        agent = AgentStore(r, K)
        for k, gpus in enumerate((1, 2, 1, 1, 2, 1)):          # job 2 (two GPUs) blocks the rest
            submit(r, "alice", {**BODY, "gpus": gpus, "account": "a"}, f"r{k}")
        s.tick(NOW + 1, woke(r))
        assert job(r, 1).node == "n1" and job(r, 2).state == states.PENDING
        assert job(r, 3).reason == states.PRIORITY and job(r, 3).detail == codes.BEHIND_BLOCKER
        assert r.get(K.blocker) == "2"                         # named once, in the pass's commit
        agent.post("started", 1, 1, "n1", {"start_time": NOW + 1})
        s.tick(NOW + 2)
        agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 3})
        s.tick(NOW + 3)
        s.tick(NOW + 4)
        assert job(r, 2).node == "n1"                          # the blocker starts once room is back
        assert job(r, 3).reason == states.RESOURCES            # and the next job blocks the rest
        assert job(r, 4).reason == states.PRIORITY and job(r, 4).detail == codes.BEHIND_BLOCKER
        assert r.get(K.blocker) == "3"
    finally:
        policy.plan = real
    assert seen and all(kept for kept, _, _ in seen)
    for _, got, whole in seen:
        assert sorted(got.places, key=lambda p: p.job_id) == sorted(whole.places, key=lambda p: p.job_id)
        assert {p.job_id: (p.reason, p.detail) for p in got.pending} == \
            {p.job_id: (p.reason, p.detail) for p in whole.pending}


def test_with_backfill_off_a_new_blocker_rewrites_none_of_the_records_behind_it(redis_server, monkeypatch, capsys):
    """Issue 41: the jobs behind the blocker keep their records when the blocker changes (their
    detail does not name it); the pass writes the new blocker's id into one key, and `labq show`
    (text and --json) names it from there."""
    from labq.cli import hot
    from labq.scheduler.store import writes
    from labq.scheduler.thinclient import ThinClient
    r = redis_server.client()
    r.flushall()
    cfg = config.loads('[scheduler]\nbackfill_depth = 0\n[accounts.a]\nusers = ["alice"]\n')
    agent = AgentStore(r, K)
    agent.register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(2)], "h", 1, 10 ** 9)
    s = Scheduler(r, cfg, me="s1", clock=FROZEN)
    s.tick(NOW)
    for k, gpus in enumerate((1, 2, 1, 1, 1, 1, 1, 1)):      # job 2 (two GPUs) blocks 3..8
        submit(r, "alice", {**BODY, "gpus": gpus, "account": "a"}, f"r{k}")
    s.tick(NOW + 1, woke(r))
    assert r.get(K.blocker) == "2" and job(r, 8).detail == codes.BEHIND_BLOCKER
    written = []
    real = writes.put_jobs
    monkeypatch.setattr(writes, "put_jobs", lambda p, k, jobs, **kw: (written.extend(j.id for j in jobs),
                                                                      real(p, k, jobs, **kw))[1])
    agent.post("started", 1, 1, "n1", {"start_time": NOW + 1})
    s.tick(NOW + 2)
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": NOW + 3})
    for t in range(3, 3 + 2 * int(cfg.tick) + 2):          # past a pass with reasons
        s.tick(NOW + t)
    assert job(r, 2).node == "n1" and job(r, 3).reason == states.RESOURCES
    assert r.get(K.blocker) == "3"                           # the new blocker, named once...
    assert 3 in written and not set(written) & {4, 5, 6, 7, 8}, written     # ...and no record behind it rewritten
    c = ThinClient(redis_server.url)
    hot.show(c, "5")
    assert "reason: Priority — behind job 3, which waits for resources (backfill off)" in capsys.readouterr().out
    hot.show(c, "5", as_json=True)
    got = json.loads(capsys.readouterr().out)
    assert got["behind_job"] == "3" and got["reason_detail"] == codes.behind("3")
    hot.show(c, "3", as_json=True)                           # the blocker itself waits on Resources
    got = json.loads(capsys.readouterr().out)
    assert got["behind_job"] is None and got["reason"] == states.RESOURCES
