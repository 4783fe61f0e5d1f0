"""Issue 35: recovery never loses the leader lease. With ~200k recently ended jobs each state
reload took 15-23 s against a 10 s lease: the lease lapsed under every reload, the leader reloaded
13 times in a row, every client call failed for 4.8 minutes and an innocent cancel was
dead-lettered. Here the reload is made slow by injection (one of its reads waits 2.5 leases)."""
import random
import time
from dataclasses import replace

from labq.scheduler.daemon import crashguard
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.store import writes
from labq.scheduler.store.reads import Reader
from labq.scheduler.store.state import SchedulerStore
from tests.harness import BODY, CFG, FROZEN, K, ended_job, job, push, reply, setup, submit, woke

LEASE = 2.0        # renewed every third of it: a loaded machine has 1.3 s to run the keeper


class SlowReload(SchedulerStore):
    """A store whose state reload takes `slow` seconds longer (standing in for 200k ended jobs)."""
    slow = 2.5 * LEASE
    reloads = 0

    def active_jobs(self):
        SlowReload.reloads += 1
        time.sleep(self.slow)          # the injected slowness itself, not a synchronisation
        return super().active_jobs()


def slow_leader(r, raw, me, store=SlowReload):
    s = Scheduler(r, CFG, me=me, clock=FROZEN, store=store(r, K, me))
    s.lease_s = LEASE
    return s


def test_a_reload_longer_than_the_lease_keeps_it_and_answers_what_waited(conns):
    r, raw = conns
    now = time.time()
    s1 = setup(r, raw, now)
    submit(r, "alice", BODY, "a")
    s1.tick(now, woke(r))
    assert job(r, 1).state == states.RUNNING
    r.delete(K.leader)                                   # s1 dies; s2 takes over with a slow reload
    submit(r, "alice", BODY, "b")
    push(r, "alice", {"rid": "c", "op": "cancel", "body": '{"ids": ["1"]}'})
    SlowReload.reloads = 0
    s2 = slow_leader(r, raw, "s2")
    assert s2.tick(now + 1, woke(r)) is True, "the lease lapsed under the reload"
    assert r.get(K.leader) == "s2" and r.pttl(K.leader) > 0
    assert reply(r, "b")["ok"] and reply(r, "c")["ok"]
    assert job(r, 1).cancel_requested and r.xlen(K.dead) == 0        # nothing dead-lettered
    for i in range(3):                                   # the next ticks do not reload again
        assert s2.tick(now + 2 + i, woke(r)) is True
    assert SlowReload.reloads == 1
    other = Scheduler(r, CFG, me="s3", clock=FROZEN)
    assert other.tick(now + 5) is False                  # and nobody else could lead meanwhile


def test_a_reload_that_another_scheduler_overtook_is_not_used(conns):
    """The keeper renews only a lease that is still ours: one taken by another scheduler during
    the reload makes it stale, and this scheduler does not lead on it."""
    r, raw = conns
    now = time.time()
    setup(r, raw, now)
    r.delete(K.leader)

    class Thief(SlowReload):
        slow = LEASE

        def active_jobs(self):
            r.set(K.leader, "s9", px=60_000)             # another scheduler holds the lease now
            return super().active_jobs()
    s2 = slow_leader(r, raw, "s2", Thief)
    assert s2.tick(now + 1) is False
    assert r.get(K.leader) == "s9"


def test_the_crash_guard_rebuild_reads_a_bounded_number_of_ended_jobs(conns):
    """The reload's part that grew with the ended jobs (each decoded whole): now the attempts'
    (end, user, outcome) of at most REBUILD_JOBS of the newest, read from the records' JSON."""
    r, _ = conns
    rng, now = random.Random(7), 1_000_000.0
    jobs = [replace(ended_job(rng, i), end_time=now - 100 + i) for i in range(1, 31)]
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, jobs)
    p.execute()
    got = Reader(r, K).attempt_ends(now - 90, 10)       # jobs 11..30 ended since; the 10 newest are read
    want = [(a.end_time, j.user, a.outcome) for j in reversed(jobs[20:]) for a in j.attempts]
    assert got == want
    assert Reader(r, K).attempt_ends(now - 90, 0) == []
    g = crashguard.CrashGuard(2, 600)
    g.rebuild_ends([(now - 10, "alice", "exit"), (now - 700, "alice", "exit"), (now - 5, "bob", "timeout")], now)
    assert g.recent == {"alice": [now - 10]}
