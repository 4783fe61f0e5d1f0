"""The scheduler daemon over a store, with the agent played by hand through AgentStore.

Runs on fakeredis and on a real redis-server (the same tests, like huey's StorageTests), so the
transaction, stream and lease logic is checked against the real thing, not only the fake.
"""
import json
import time

import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, CFG, FROZEN, SWEEP_TOML, K, job, one_admitted, push, reply, setup, submit, woke


def test_submit_admit_dispatch_finish_charge(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    for i in range(6):
        submit(r, "alice", BODY, f"r{i}")
    s.tick(now, woke(r))
    assert [reply(r, f"r{i}")["job_id"] for i in range(6)] == [1, 2, 3, 4, 5, 6]
    jobs = [job(r, i) for i in range(1, 7)]
    assert [j.state for j in jobs] == ["R"] * 4 + ["PD"] * 2
    assert {u for j in jobs[:4] for u in j.gpu_uuids} == {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}
    assert jobs[4].reason == states.PRIORITY    # the same pass gave the room to older jobs
    # One entry per admitted attempt on the node's dispatch list, with only (job, attempt), oldest last.
    assert r.lrange(K.dispatch("n1"), 0, -1) == ["4:1", "3:1", "2:1", "1:1"]
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"pid": 123, "start_time": now + 1})
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": now + 1801})
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": now + 1801})  # duplicate
    s.tick(now + 1802)
    j1 = job(r, 1)
    assert j1.state == states.COMPLETED and j1.exit_code == 0
    assert j1.attempts[0].cost == 1_000_000   # $2/h × 1800 s: billed from the process's start, not admission
    assert r.hgetall(K.spent()) == {"eta-sweep": str(1_000_000)}
    assert len(r.xrange(K.ledger)) == 1          # the duplicate event charged nothing
    assert job(r, 5).state == states.RUNNING     # the freed GPU went to the next job at once


def test_a_repeated_request_id_is_answered_not_redone(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", BODY, "same")
    s.tick(time.time(), woke(r))
    submit(r, "alice", BODY, "same")
    s.tick(time.time(), woke(r))
    assert r.zcard(K.active) == 1 and r.llen(K.reply("same")) == 2


def test_refusals_and_bad_requests_change_nothing(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", {**BODY, "gpus": 5}, "big")
    submit(r, "alice", {**BODY, "gpus": 4, "time_limit": 20 * 3600}, "costly")
    submit(r, "alice", {**BODY, "cpus": "four"}, "bad")
    push(r, "alice", {"rid": "junk", "op": "submit", "body": "{not json"})
    s.tick(time.time(), woke(r))
    assert reply(r, "big")["code"] == 3 and "4 GPUs" in reply(r, "big")["error"]
    assert reply(r, "costly")["code"] == 3 and "$160.07" in reply(r, "costly")["error"]
    assert reply(r, "bad")["code"] == 2 and "cpus" in reply(r, "bad")["error"]
    assert reply(r, "junk")["code"] == 2
    assert r.zcard(K.active) == 0 and not r.exists(K.seq)


def test_max_wait_expires_uncharged(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "gpus": 4}, "a")
    submit(r, "alice", {**BODY, "gpus": 1, "max_wait": 30}, "b")
    s.tick(now, woke(r))
    s.tick(now + 31)
    b = job(r, 2)
    assert b.state == states.EXPIRED and b.attempts == () and b.cost == 0
    assert r.zscore(K.history, "2") is not None and not r.zscore(K.active, "2")


def test_cancel_pending_and_running(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "gpus": 4}, "a")
    submit(r, "alice", BODY, "b")
    s.tick(now, woke(r))
    r.hset(K.attempt(1, 1), "claimed", "n1:123")       # a runner took it: the cancel goes through it
    push(r, "bob", {"rid": "c0", "op": "cancel", "body": json.dumps({"ids": ["1"]})})
    r.lpush(K.wake, "user:bob")
    push(r, "alice", {"rid": "c1", "op": "cancel", "body": json.dumps({"ids": ["1", "2"]})})
    s.tick(now + 1, woke(r))
    assert reply(r, "c0")["ok"] is False and "belongs to alice" in reply(r, "c0")["error"]
    assert job(r, 2).state == states.CANCELLED
    assert r.get(K.control(1)) == "cancel" and job(r, 1).state == states.RUNNING
    assert r.lrange(K.node_control("n1", 1), 0, -1) == ["cancel"], "the runner's blocking read wakes"
    AgentStore(r, K).post("finished", 1, 1, "n1", {"outcome": "cancelled", "exit_code": -15, "end_time": now + 2})
    s.tick(now + 3)
    assert job(r, 1).state == states.CANCELLED and not r.exists(K.control(1))


def test_an_unclaimed_attempt_is_withdrawn_uncharged_and_del_ends_it_at_once(conns):
    """Dispatched, but no runner took it (none came, or the entry was lost with Redis): after
    scheduler.start_timeout it is withdrawn and requeued, charged nothing, and its GPU is free;
    `labq del` of such a job ends it at once instead of "cancelling" forever."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "gpus": 4}, "a")
    AgentStore(r, K).runner_state("n1", 0, "idle")      # the node's agent runs persistent runners
    s.tick(now, woke(r))
    r.delete(K.dispatch("n1"))                          # lost: no runner will ever see it
    s.tick(now + CFG.start_timeout - 1)
    assert job(r, 1).state == states.RUNNING
    s.tick(now + CFG.start_timeout + 1)
    j = job(r, 1)
    assert j.attempts[0].outcome == "withdrawn" and j.attempts[0].cost == 0 and j.restart_count == 0
    assert r.hget(K.attempt(1, 1), "claimed") == "withdrawn", "a late runner cannot claim it now"
    assert len(r.xrange(K.ledger)) == 0 and j.cost == 0
    # Requeued; its node, whose runners took nothing, is unhealthy (issue 35): no work there until a
    # runner proves alive (its state written after the mark), then attempt 2 goes on the dispatch list.
    assert j.state == states.PENDING and r.hget(K.node_health("n1"), "reason").startswith("no runner took job 1")
    assert [n.state for n in s.nodes] == ["unhealthy"]
    r.hset(K.node_runners("n1"), "0", f"idle pid=1 {now + CFG.start_timeout + 1.5:.3f}")
    s.tick(now + CFG.start_timeout + 2)
    j = job(r, 1)
    assert j.state == states.RUNNING and len(j.attempts) == 2 and r.lrange(K.dispatch("n1"), 0, -1) == ["1:2"]
    assert not r.exists(K.node_health("n1"))
    push(r, "alice", {"rid": "d", "op": "cancel", "body": json.dumps({"ids": ["1"]})})
    r.lpush(K.wake, "user:alice")
    s.tick(now + CFG.start_timeout + 3, woke(r))
    j = job(r, 1)
    assert j.state == states.CANCELLED and j.attempts[1].outcome == "withdrawn" and j.cost == 0


def test_a_claimed_attempt_is_never_withdrawn(conns):
    r, s, now = one_admitted(conns)
    AgentStore(r, K).runner_state("n1", 0, "running 1.1")
    r.hset(K.attempt(1, 1), mapping={"claimed": "n1:1", "hb": now + 10 * CFG.start_timeout})
    s.tick(now + 10 * CFG.start_timeout)
    assert job(r, 1).state == states.RUNNING and len(job(r, 1).attempts) == 1


def test_an_attempt_claimed_and_never_started_is_lost_a_lease_and_margin_after_its_claim(conns):
    """A runner that won the claim and then died or stopped before `started` leaves no heartbeat,
    and its node stays up: the attempt is lost from its claim on, like a silent runner's from its
    last beat. It stayed `R` forever (the test_fencing run where Redis restarted mid-dispatch)."""
    r, s, now = one_admitted(conns)
    r.hset(K.attempt(1, 1), mapping={"claimed": "n1:123", "claimed_at": now + 1})
    s.tick(now + 1 + CFG.node_lease + CFG.fence_margin)
    assert len(job(r, 1).attempts) == 1 and job(r, 1).attempts[0].outcome is None
    s.tick(now + 2 + CFG.node_lease + CFG.fence_margin)
    j = job(r, 1)
    a = j.attempts[0]
    assert a.outcome == "node_failure" and a.end_time == now + 1 and j.restart_count == 1, a
    assert j.state == states.RUNNING and len(j.attempts) == 2, "requeued, and placed again on the node (still up)"


@pytest.mark.parametrize("ran", [True, False])
def test_node_failure_requeues_and_charges_to_the_last_heartbeat(conns, ran):
    r, s, now = one_admitted(conns)
    r.hset(K.attempt(1, 1), "claimed", "n1:123")
    if ran:
        AgentStore(r, K).post("started", 1, 1, "n1", {"pid": 123, "start_time": now})
        s.tick(now + 1, woke(r))
    r.hset(K.node("n1"), "hb", now + 360)
    r.delete(K.node_lease("n1"))
    s.tick(now + 1000)
    # Fencing: the node's runners kill their jobs by the lease's end; the scheduler gives them
    # fence_margin more before it may start the job anywhere else.
    assert job(r, 1).state == states.RUNNING
    s.tick(now + 1000 + CFG.fence_margin - 0.1)
    assert job(r, 1).state == states.RUNNING
    s.tick(now + 1000 + CFG.fence_margin)
    j = job(r, 1)
    assert j.state == states.PENDING and j.restart_count == 1 and j.reason == states.NODE_DOWN
    # 360 s at $2/h; claimed but no process ever started: nothing (the allocation alone is not billed).
    assert j.attempts[0].outcome == "node_failure" and j.attempts[0].cost == (200_000 if ran else 0)
    assert r.hgetall(K.spent()) == ({"eta-sweep": "200000"} if ran else {})


def test_a_new_leader_recovers_everything_and_a_deposed_one_writes_nothing(conns):
    r, raw = conns
    now = time.time()
    s1 = setup(r, raw, now)
    submit(r, "alice", BODY, "a")
    s1.tick(now, woke(r))
    # s1 "dies" without releasing its lease; the lease expires; s2 takes over.
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    assert s2.tick(now + 10)
    assert s2.jobs[1].state == states.RUNNING
    submit(r, "alice", BODY, "b")
    assert s1.tick(now + 11, woke(r)) is False           # s1 cannot act without the lease
    assert reply(r, "b") is None
    s2.tick(now + 12, ["user:alice"])
    assert reply(r, "b")["job_id"] == 2


def test_unacknowledged_events_are_redelivered_to_the_next_leader(conns):
    r, raw = conns
    now = time.time()
    s1 = setup(r, raw, now)
    submit(r, "alice", BODY, "a")
    s1.tick(now, woke(r))
    # s1 read the event but died before acknowledging it (simulated by reading without a tick).
    AgentStore(r, K).post("finished", 1, 1, "n1", {"outcome": "exit", "exit_code": 3, "start_time": now,
                                                   "end_time": now + 60})
    s1.store.read_group([K.node_events("n1")], pending=False)
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    s2.tick(now + 61)
    j = job(r, 1)
    assert j.state == states.FAILED and j.exit_code == 3 and len(r.xrange(K.ledger)) == 1


def test_drain_takes_nothing_new_and_resume_reopens(conns):
    r, s, now = one_admitted(conns)
    for who, rid, op in (("alice", "d0", "drain"), ("root", "d1", "drain")):
        push(r, who, {"rid": rid, "op": op, "body": json.dumps({"node": "n1"})})
        r.lpush(K.wake, f"user:{who}")
    submit(r, "alice", BODY, "b")
    s.tick(now + 1, woke(r))
    assert reply(r, "d0")["code"] == 3 and reply(r, "d1")["ok"]
    assert job(r, 1).state == states.RUNNING          # what runs there finishes
    assert job(r, 2).state == states.PENDING and job(r, 2).reason == states.NODE_DOWN
    push(r, "root", {"rid": "r1", "op": "resume", "body": json.dumps({"node": "n1"})})
    s.tick(now + 2, ["user:root"])
    assert job(r, 2).state == states.RUNNING


def test_labq_checkpoint_is_recorded_and_bounds_lost_work(conns):
    r, s, now = one_admitted(conns)
    for who, rid in (("bob", "c0"), ("alice", "c1")):
        push(r, who, {"rid": rid, "op": "checkpoint", "body": json.dumps({"job_id": 1})})
        r.lpush(K.wake, f"user:{who}")
    s.tick(now + 100, woke(r))
    assert reply(r, "c0")["code"] == 2 and reply(r, "c1")["ok"]
    assert job(r, 1).attempts[0].last_checkpoint == now + 100
    AgentStore(r, K).post("finished", 1, 1, "n1", {"outcome": "timeout", "end_time": now + 130})
    s.tick(now + 131)
    assert job(r, 1).attempts[0].lost_work_s == 30.0


def test_hold_and_release(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", {**BODY, "gpus": 4}, "a")
    submit(r, "alice", {**BODY, "hold": True}, "b")
    s.tick(now, woke(r))
    assert job(r, 2).reason == states.HELD
    push(r, "alice", {"rid": "h", "op": "hold", "body": json.dumps({"ids": ["1"]})})
    push(r, "alice", {"rid": "r", "op": "release", "body": json.dumps({"ids": ["2"]})})
    r.lpush(K.wake, "user:alice")
    s.tick(now + 1, woke(r))
    assert reply(r, "h")["ok"] is False and "not pending" in reply(r, "h")["error"]
    assert reply(r, "r")["ok"] and not job(r, 2).held
    assert job(r, 2).reason == states.RESOURCES      # released: now it waits only for the GPUs job 1 holds


def test_the_queue_is_bounded(conns):
    r, raw = conns
    now = time.time()
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [], "h", 1, 3600)
    small = config.loads(SWEEP_TOML + "[scheduler]\nmax_pending = 4\nmax_pending_per_user = 2\n")
    s = Scheduler(r, small, me="s1", clock=FROZEN)
    s.tick(now)
    body = {**BODY, "gpus": 0, "cpus": 16}    # each fills the node, so all but the first pend
    users = ["alice", "alice", "alice", "alice", "bob", "carol", "carol"]
    for i, user in enumerate(users):
        submit(r, user, body, f"q{i}")
        s.tick(now + i, woke(r))
    got = [reply(r, f"q{i}") for i in range(len(users))]
    # q0 runs; q1, q2 pend; q3 would be alice's third pending job; q4, q5 fill the queue to 4; q6 overflows.
    assert [g.get("code", 0) if not g["ok"] else 0 for g in got] == [0, 0, 0, 3, 0, 0, 3]
    assert "max_pending_per_user=2" in got[3]["error"] and "max_pending=4" in got[6]["error"]
    assert r.zcard(K.active) == 5


def test_a_stale_placement_is_rejected_by_the_applier_not_written(conns, monkeypatch, caplog):
    """The daemon applies a plan through applier.apply_plan: a placement on a GPU another job holds
    (a policy bug, played here by a plan made before job 1 was admitted) is logged and left out."""
    from labq.scheduler import policy
    from labq.scheduler.daemon.metrics import Metrics
    from labq.scheduler.jobs.plan import Place, Plan
    r, s, now = one_admitted(conns)
    held = job(r, 1).gpu_uuids[0]
    submit(r, "alice", BODY, "b")
    real = policy.plan

    def stale(snap, cfg, **kw):
        p = real(snap, cfg, **kw)
        return Plan(places=(Place(2, "n1", (held,), (), (), 0),), pending=p.pending, starts=p.starts)
    monkeypatch.setattr(policy, "plan", stale)
    s.metrics = Metrics("127.0.0.1:0")
    try:
        with caplog.at_level("WARNING", logger="labq.scheduler"):
            s.tick(now + 1, woke(r))
        assert s.metrics.registry.get_sample_value("labq_plan_rejected_total", {"kind": "Place"}) == 1
    finally:
        s.metrics.server.shutdown()
    assert reply(r, "b")["ok"] is True
    assert job(r, 2).state == states.PENDING and job(r, 2).gpu_uuids == ()
    assert r.lrange(K.dispatch("n1"), 0, -1) == ["1:1"], "nothing dispatched for job 2"
    assert f"plan not applied: job 2 on n1: GPU {held} is not free" in caplog.text


def test_a_tick_renews_the_lease_once_a_third_of_it_has_passed_and_otherwise_only_looks(conns):
    """Renewing the lease is four round trips and an fsync: a leader that renewed within a third of
    the lease only checks (one GET) that the lease is still its own before it reads requests."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)

    calls = []
    real = s.store.acquire_leader

    def acquire(ttl):
        calls.append(ttl)
        return real(ttl)
    s.store.acquire_leader = acquire

    def renewals():
        return len(calls)
    before = renewals()
    for i in range(3):
        submit(r, "alice", BODY, f"q{i}")
        assert s.tick(now + 1 + i, woke(r))
        assert reply(r, f"q{i}")["ok"]
    assert renewals() == before
    s.renewed -= s.lease_s / 3          # a third of the lease later
    assert s.tick(now + 5)
    assert renewals() == before + 1 and r.pttl(K.leader) > s.lease_s * 1000 * 0.9
    r.set(K.leader, "someone-else")     # the lease is another's: not trusted from memory
    submit(r, "alice", BODY, "late")
    assert s.tick(now + 6, woke(r)) is False and reply(r, "late") is None


def test_many_small_commits_hand_memory_back_like_one_big_one(conns, monkeypatch):
    """A lab's loop of `labq sub` makes one small commit per batch: memory went back to the system only
    after a single commit of BIG_COMMIT records, never here, and 100,000 single pending jobs held 460 MB
    where a scheduler restarted on the same jobs holds about half (bench/memory_bench.py singles)."""
    from labq.scheduler.daemon import loop
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    released = []
    monkeypatch.setattr(loop, "release_memory", lambda: released.append(s.written))
    monkeypatch.setattr(loop, "BIG_COMMIT", 10)
    for i in range(12):
        submit(r, "alice", dict(BODY, hold=True), f"m{i}")
        s.tick(now, woke(r))
    assert all(reply(r, f"m{i}")["ok"] for i in range(12))
    assert released, "no release after 12 small commits past BIG_COMMIT records in all"
