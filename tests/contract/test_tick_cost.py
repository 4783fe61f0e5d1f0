"""What every tick costs whatever the queue holds (issue 39 item 3: a fixed cost per batch ≤ 1 ms): the
checks for lost and unclaimed attempts look at the jobs holding a node, never walk the pending queue
(10,000 pending jobs made them ~1.4 ms of every tick, 100,000 ~14 ms), and a tick's round trips to
Redis do not grow with the requests it answers."""
import json

from redis.connection import AbstractConnection

from labq.scheduler.daemon.planning import Planner
from labq.scheduler.jobs import states
from labq.scheduler.store import envs
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, CFG, K, job, one_admitted, reply, setup, submit, woke

NOW = 1_800_000_000.0


class Walked(dict):
    """The scheduler's job table, counting the walks over all of it."""
    walks = 0

    def values(self):
        Walked.walks += 1
        return super().values()

    def items(self):
        Walked.walks += 1
        return super().items()

    def __iter__(self):
        Walked.walks += 1
        return super().__iter__()


def test_lost_and_unclaimed_attempts_are_found_without_walking_the_pending_queue(conns):
    r, s, now = one_admitted(conns)
    for i in range(30):
        submit(r, "alice", {**BODY, "hold": True}, f"h{i}")
    s.tick(now + 1, woke(r))
    assert len(s.jobs) == 31 and job(r, 1).state == states.RUNNING
    s.jobs = Walked(s.jobs)
    Walked.walks = 0
    s.events.lost_attempts(now + 2)
    s.events.unclaimed(now + 2)
    assert Walked.walks == 0
    # The running job is still the one they judge: never claimed, it is withdrawn after start_timeout.
    AgentStore(r, K).runner_state("n1", 0, "idle")      # the node's agent runs persistent runners
    r.delete(K.dispatch("n1"))                          # lost: no runner will ever see it
    s.events.unclaimed(now + s.cfg.start_timeout + 10)
    assert job(r, 1).attempts[0].outcome == "withdrawn"
    assert Walked.walks == 0


def test_a_woken_wait_empties_the_wake_list_in_one_round_trip(real_redis, monkeypatch):
    """The loop's wait between ticks: BLPOP, then DEL of the tokens left, was two round trips a tick."""
    s = setup(real_redis, None, NOW)
    real_redis.lpush(K.wake, "user:alice", "user:bob", "user:carol")
    sent = []
    send = AbstractConnection.send_packed_command

    def counted(c, *a, **kw):
        sent.append(1)
        return send(c, *a, **kw)
    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    assert s.store.wait_wake(5.0) is True
    assert len(sent) == 1 and real_redis.llen(K.wake) == 0
    assert s.store.wait_wake(0.05) is False       # nothing pushed: the wait times out, not woken


def test_submits_read_the_budgets_balances_once_a_batch_not_once_each(real_redis, monkeypatch):
    """The intake of a tick that answers 10 submits, with budgets set: each submit read the whole
    spent hash (HGETALL, a round trip) for its budget check. Now: the tick's first look (store.look),
    the moves, the done keys and the balances with the commit's fence (WATCH, the lease), and
    MULTI..EXEC: 4 round trips, 16 before (6 before the fence carried the done keys and balances)."""
    assert CFG.budgets
    s = setup(real_redis, None, NOW)
    for i in range(10):
        submit(real_redis, "alice", {**BODY, "hold": True}, f"r{i}")
    sent = []
    send = AbstractConnection.send_packed_command

    def counted(c, *a, **kw):
        sent.append(1)
        return send(c, *a, **kw)
    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    s.now = NOW + 1
    s.inboxes.intake(NOW + 1, pending=False)
    trips = len(sent)
    assert real_redis.llen(K.requests) == 0 and len(real_redis.lrange(K.reply("r9"), 0, -1)) == 1
    assert trips <= 4, f"{trips} round trips"


def test_jobs_submitted_from_one_shell_share_one_copy_of_its_environment(conns):
    """Each pending single job held its own copy of the exported environment (~2 KB a job from a
    login shell), and each submit encoded it again for Redis; what is stored is unchanged."""
    r, raw = conns
    s = setup(r, raw, NOW)
    env = {f"VAR{i}": f"value {i} " * 5 for i in range(40)}
    for i in range(3):
        submit(r, "alice", {**BODY, "hold": True, "export": "ALL", "env": dict(env)}, f"e{i}")
    submit(r, "alice", {**BODY, "hold": True, "export": "ALL", "env": {**env, "VAR0": "other"}}, "other")
    s.tick(NOW + 1, woke(r))
    jobs = sorted(s.jobs.values(), key=lambda j: j.id)
    assert len(jobs) == 4 and jobs[0].env == tuple(sorted(env.items()))
    assert jobs[1].env is jobs[0].env and jobs[2].env is jobs[0].env
    assert jobs[3].env is not jobs[0].env and dict(jobs[3].env)["VAR0"] == "other"
    for j in jobs:
        assert json.loads(envs.text(r, K, j.id)) == [list(p) for p in j.env]


def test_a_tick_that_took_only_held_submits_waits_for_the_ticks_plan(conns, monkeypatch):
    """Every tick planned whenever no wake-up was waiting, whatever it had changed: one plan per
    batch of held submits (~1-2 ms at 10,000 pending). A submit that can run is planned at once."""
    r, raw = conns
    s = setup(r, raw, NOW)
    plans = []
    plan = Planner._schedule     # the policy pass, composed by the scheduler (daemon/planning.py)
    monkeypatch.setattr(Planner, "_schedule", lambda self, *a: (plans.append(a[0]), plan(self, *a))[1])
    tick = s.cfg.tick
    for i in range(3):
        submit(r, "alice", {**BODY, "hold": True}, f"h{i}")
        s.tick(NOW + (i + 1) * tick / 10, woke(r))
        assert reply(r, f"h{i}")["ok"]
    assert plans == []
    submit(r, "alice", BODY, "runs")
    s.tick(NOW + tick / 2, woke(r))
    assert plans == [NOW + tick / 2] and job(r, reply(r, "runs")["job_id"]).state == states.RUNNING
    s.tick(NOW + tick * 2, woke(r))     # the tick's own plan, news or not
    assert plans[-1] == NOW + tick * 2
