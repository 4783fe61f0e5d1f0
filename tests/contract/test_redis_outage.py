"""A Redis outage delays a job's record, never changes it (issue 35 item 2; found by bench/soak.py).

The soak's run: Redis killed for 8.8 s (node lease 4 s); a job ended with exit 0 during it, its
runner kept the result and could not post it; 0.7 s after Redis came back the scheduler declared
the job "lost on node (last heartbeat 9s ago)" - a heartbeat no runner could have written while
Redis was away - recorded a node failure and ran the finished work again. The scheduler now counts
a runner's silence only from when it could see Redis again: every node gets node_lease +
fence_margin from then to beat or post what it holds, as after a heartbeat.

The daemon over a store with the agent played by hand, as tests/contract/test_daemon.py; the
outage goes through the scheduler's own loop (a tick that raises ConnectionError).
"""
import pytest
import redis

from labq.scheduler.jobs import states
from labq.scheduler.store.agentside import AgentStore
from tests.harness import CFG, K, finish, job, one_admitted

SILENCE = CFG.node_lease + CFG.fence_margin


def outage(s) -> None:
    """One round of the scheduler's loop with Redis away: its error path, as in production."""
    def failing(now, woke=()):
        raise redis.ConnectionError("Error 111 connecting to redis.sock. Connection refused.")

    rounds = []
    s.tick = failing
    try:
        s._loop(lambda: rounds.append(1) or len(rounds) > 1)
    finally:
        del s.tick
    assert len(rounds) == 2 and not s.leading


def running(conns, lapsed: bool):
    """Job 1 started on n1 at `now`, its runner's last beat at now + 1, then Redis away until
    `back` (3 x lease + margin later): (r, s, now, back). `lapsed`: the node's lease expired
    meanwhile (a key with a TTL outlives no outage longer than it)."""
    r, s, now = one_admitted(conns)
    r.hset(K.attempt(1, 1), mapping={"claimed": "n1:123"})
    AgentStore(r, K).post("started", 1, 1, "n1", {"pid": 123, "start_time": now})
    r.hset(K.attempt(1, 1), "hb", now + 1)
    s.tick(now + 1)
    assert job(r, 1).state == states.RUNNING
    outage(s)
    if lapsed:
        r.delete(K.node_lease("n1"))
    return r, s, now, now + 1 + 3 * SILENCE


@pytest.mark.parametrize("lapsed", [False, True], ids=["node-up", "node-lease-lapsed"])
def test_a_job_that_ended_during_a_long_redis_outage_completes_once(conns, lapsed):
    r, s, now, back = running(conns, lapsed)
    s.tick(back)
    assert [a.outcome for a in job(r, 1).attempts] == [None], "lost on a silence nobody could break"
    s.tick(back + SILENCE - 0.5)
    assert job(r, 1).state == states.RUNNING and len(job(r, 1).attempts) == 1
    # The runner kept its result through the outage (worker/results.py) and posts it now.
    finish(r, 1, 1, "completed", 0, now + 5, began=now)
    s.tick(back + SILENCE - 0.4)
    j = job(r, 1)
    assert j.state == states.COMPLETED and j.exit_code == 0 and j.restart_count == 0, j
    assert [a.outcome for a in j.attempts] == ["completed"]
    assert j.attempts[0].end_time == now + 5 and j.attempts[0].cost == 5 * 2_000_000 // 3600, "billed as it ran"


@pytest.mark.parametrize("lapsed", [False, True], ids=["node-up", "node-lease-lapsed"])
def test_a_runner_silent_past_the_grace_after_an_outage_is_still_lost(conns, lapsed):
    r, s, now, back = running(conns, lapsed)
    s.tick(back)
    s.tick(back + SILENCE + 0.1)
    j = job(r, 1)
    assert j.restart_count == 1 and j.attempts[0].outcome == "node_failure", j
    if not lapsed:
        assert j.attempts[0].end_time == now + 1, "charged to the last heartbeat"
