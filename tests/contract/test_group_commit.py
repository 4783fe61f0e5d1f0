"""Group commit on a real redis-server: everything read in one batch is one fenced transaction, the
replies come with it, one failing entry is answered alone while the rest commits, pending counts are
kept as jobs change, and a big array is written in bounded chunks ahead of its transaction."""
import json
from dataclasses import replace

import pytest
import redis

from labq.scheduler.daemon.handlers import Handlers
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.daemon.state import Tally
from labq.scheduler.jobs import rest, states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store import codec
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import SWEEP_TOML, push, taken

K = Keys()
NOW = 1_800_000_000.0
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 60,
        "account": "eta", "hold": True}     # held: they stay pending, so the plan writes nothing


@pytest.fixture
def real_conns(redis_server):
    c = redis_server.client()
    c.flushall()
    yield c, redis.Redis(unix_socket_path=redis_server.sock)
    c.close()


def started(r, raw, cfg=None, now=NOW):
    AgentStore(r, K).register("n1", 4, 8 << 30, 4, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    s = Scheduler(r, cfg or config.loads(SWEEP_TOML), me="s1", clock=lambda: now)
    s.tick(now)
    return s


def send(r, user, rid, op="submit", body=BODY):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps(body)})


def reply(r, rid):
    got = r.lrange(K.reply(rid), 0, -1)
    return json.loads(got[-1]) if got else None


def execs(r) -> int:
    return int(r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))


def reload_inboxes(s):
    """Nothing to learn since the one request list (issue 34): kept so the tests read as before."""


def test_one_transaction_for_all_requests_read_together(real_conns):
    r, raw = real_conns
    s = started(r, raw)
    for i in range(40):
        send(r, "alice" if i % 2 else "bob", f"r{i}")
    reload_inboxes(s)
    before = execs(r)
    s.tick(NOW + 1)
    # The batch, the lease renewal and the plan: a handful, not one per request.
    assert execs(r) - before <= 4
    got = [reply(r, f"r{i}") for i in range(40)]
    assert all(g and g["ok"] for g in got), got
    ids = {g["job_id"] for g in got}
    assert len(ids) == 40
    assert {int(x) for x in r.zrange(K.active, 0, -1)} == ids
    assert taken(r) == 0


def test_a_failing_entry_is_answered_alone_and_the_rest_commits(real_conns, monkeypatch):
    r, raw = real_conns
    s = started(r, raw)
    real = Handlers.submit

    def submit(self, user, body, now):
        if body.get("name") == "poison":
            raise KeyError("boom")
        return real(self, user, body, now)

    monkeypatch.setattr(Handlers, "submit", submit)
    send(r, "alice", "a1")
    send(r, "alice", "bad", body={**BODY, "name": "poison"})
    send(r, "alice", "a2")
    reload_inboxes(s)
    s.tick(NOW + 1)
    assert reply(r, "a1")["ok"] and reply(r, "a2")["ok"]
    bad = reply(r, "bad")
    assert bad["ok"] is False and "internal error" in bad["error"]
    assert len(r.zrange(K.active, 0, -1)) == 2
    assert taken(r) == 0


def test_a_retry_in_the_same_batch_is_answered_not_redone(real_conns):
    r, raw = real_conns
    s = started(r, raw)
    send(r, "alice", "same")
    send(r, "alice", "same")
    reload_inboxes(s)
    s.tick(NOW + 1)
    assert len(r.lrange(K.reply("same"), 0, -1)) == 2
    assert len(r.zrange(K.active, 0, -1)) == 1


def test_pending_counts_are_kept_across_a_batch(real_conns):
    r, raw = real_conns
    cfg = replace(config.loads(SWEEP_TOML), max_pending_per_user=3)
    s = started(r, raw, cfg)
    for i in range(5):
        send(r, "alice", f"p{i}")
    reload_inboxes(s)
    s.tick(NOW + 1)
    oks = [reply(r, f"p{i}")["ok"] for i in range(5)]
    assert oks == [True, True, True, False, False]
    assert "max_pending_per_user=3" in reply(r, "p3")["error"]
    send(r, "alice", "c", op="cancel", body={"ids": [str(reply(r, "p0")["job_id"])]})
    send(r, "alice", "p5")
    s.tick(NOW + 2)
    assert reply(r, "c")["ok"] and reply(r, "p5")["ok"]
    fresh = Tally(s.jobs.values())
    assert (s.tally.pending, s.tally.pending_by_user, s.tally.active_by_user, s.tally.on_node) == \
        (fresh.pending, +fresh.pending_by_user, +fresh.active_by_user, fresh.on_node)


def test_a_big_array_is_written_ahead_in_chunks_and_survives_a_restart(real_conns, monkeypatch):
    from labq.scheduler.store import writes
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # the records' path (a big held array is one rest)
    r, raw = real_conns
    s = started(r, raw)
    sizes = []
    real = writes.put_new_jobs

    def spy(rr, k, jobs, *rest):
        sizes.append(len(jobs))
        return real(rr, k, jobs, *rest)

    monkeypatch.setattr(writes, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(writes, "put_new_jobs", spy)
    send(r, "alice", "arr", body={**BODY, "array": [0, 2499, 1]})
    reload_inboxes(s)
    s.tick(NOW + 1)
    got = reply(r, "arr")
    assert got["ok"] and got["count"] == 2500
    assert sizes == [2500]
    assert r.zcard(K.active) == 2500
    j = codec.loads(r.get(K.job(got["last_job_id"])))
    assert (j.state, j.array_index) == (states.PENDING, 2499)
    again = Scheduler(r, config.loads(SWEEP_TOML), me="s1", clock=lambda: NOW + 2)
    again.tick(NOW + 2)
    assert len(again.jobs) == 2500 and again.tally.pending == 2500


def test_new_reasons_for_many_jobs_are_written_in_bounded_chunks(real_conns, monkeypatch):
    from labq.scheduler.daemon import planning
    r, raw = real_conns
    monkeypatch.setattr(planning, "REASON_CHUNK", 500)
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # the records' path (a big array is one rest)
    s = started(r, raw)
    # Not held (a held job carries its reason from the submit on): the pass starts a few and gives
    # the other ~2,000 a reason.
    send(r, "alice", "arr", body={**BODY, "hold": False, "array": [0, 1999, 1]})
    reload_inboxes(s)
    before = execs(r)
    s.tick(NOW + 1)                        # the submit, then a plan of the queue it made
    assert reply(r, "arr")["ok"]
    assert execs(r) - before >= 5          # the batch, then ~2,000 new reasons in four transactions of 500
    got = [codec.loads(r.get(K.job(j))) for j in range(reply(r, "arr")["job_id"], reply(r, "arr")["last_job_id"] + 1)]
    assert {j.reason for j in got if j.state == states.PENDING} == {states.PRIORITY}
    assert sum(j.state == states.PENDING for j in got) >= 1990


def test_a_plan_pass_that_changes_nothing_writes_nothing(real_conns, monkeypatch):
    """Issue 13 part 3: once a queue's reasons are written, later passes over the same queue (the
    clock moves, nothing else) write no job record and no `stat` row. (The top blocked job's reason
    said "expected to start in 88s", rewritten at every tick, before it said when.)"""
    from labq.scheduler.store import writes
    r, raw = real_conns
    s = started(r, raw)
    # One GPU on the node: the first task is dispatched, the other 1,499 wait (Resources/Priority).
    send(r, "alice", "arr", body={**BODY, "hold": False, "gpus": 1, "array": [0, 1499, 1]})
    reload_inboxes(s)
    s.tick(NOW + 1)
    s.tick(NOW + 2)
    assert reply(r, "arr")["ok"]
    assert len({codec.loads(t).reason for t in r.mget([K.job(j) for j in s.jobs])}) >= 2
    written, real = [], writes.put_jobs

    def spy(p, k, jobs, **kw):
        written.extend(jobs)
        return real(p, k, jobs, **kw)
    monkeypatch.setattr(writes, "put_jobs", spy)
    rows, records = r.hgetall(K.stat_rows), r.mget([K.job(j) for j in s.jobs])
    for t in range(3, 9):
        s.tick(NOW + t)
    assert [(j.id, j.reason, j.detail) for j in written] == []
    assert r.hgetall(K.stat_rows) == rows and r.mget([K.job(j) for j in s.jobs]) == records


def test_an_array_changed_in_its_own_batch_is_written_and_counted_as_its_jobs_are(real_conns, monkeypatch):
    """A new array's tasks are staged as a whole and encoded from one template, recognised by being
    the very objects expand made: tasks the same batch then released or cancelled are written as
    they are, and the records, stat rows and counts equal what each job gives on its own."""
    from labq.scheduler.store import statrows
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # the records' path (a big held array is one rest)
    r, raw = real_conns
    s = started(r, raw)
    send(r, "alice", "a1", body={**BODY, "array": [0, 1199, 1]})
    send(r, "alice", "a2", body={**BODY, "array": [5, 1204, 1], "name": "second"})
    reload_inboxes(s)
    s.tick(NOW + 1)         # the inboxes are read from here on
    first = reply(r, "a1")["job_id"]
    send(r, "bob", "a3", body={**BODY, "array": [0, 1499, 1]})
    reload_inboxes(s)
    s.tick(NOW + 2)
    third = reply(r, "a3")["job_id"]
    assert reply(r, "a2")["ok"] and third
    # One batch: a fourth array, then two of its tasks changed before the batch is written.
    send(r, "alice", "a4", body={**BODY, "array": [0, 1099, 1]})
    fourth = third + 1500
    send(r, "alice", "rel", op="release", body={"ids": [str(fourth + 5)]})
    send(r, "alice", "can", op="cancel", body={"ids": [str(fourth + 7), str(first + 3)]})
    s.tick(NOW + 3)
    assert reply(r, "a4")["job_id"] == fourth and reply(r, "rel")["ok"] and reply(r, "can")["ok"]
    active = sorted(int(i) for i in r.zrange(K.active, 0, -1))
    assert active == sorted(s.jobs)
    assert fourth + 7 not in s.jobs and first + 3 not in s.jobs and len(active) == 1200 + 1200 + 1500 + 1100 - 2
    records = r.mget([K.job(i) for i in active])
    assert [codec.loads(x) for x in records] == [s.jobs[i] for i in active]
    rows = r.hmget(K.stat_rows, [str(i) for i in active])
    assert rows == [statrows.dumps(s.jobs[i]) for i in active]
    assert codec.loads(r.get(K.job(fourth + 7))).state == states.CANCELLED
    assert s.jobs[fourth + 5].held is False and s.jobs[fourth + 6].held is True
    fresh = Tally(s.jobs.values())
    assert (s.tally.pending, s.tally.pending_by_user, s.tally.active_by_user, s.tally.active_by_account,
            s.tally.on_node) == (fresh.pending, +fresh.pending_by_user, +fresh.active_by_user,
                                 +fresh.active_by_account, fresh.on_node)


def test_passes_that_change_many_reasons_keep_records_rows_and_index_equal_to_the_jobs(real_conns):
    """Reasons given to a big array's tasks pass after pass are written from one template per run
    (splice.texts), and jobs already in the active index are not added again: the records, rows
    and index still equal the scheduler's jobs."""
    from labq.scheduler.store import statrows
    r, raw = real_conns
    s = started(r, raw)
    send(r, "alice", "arr", body={**BODY, "hold": False, "array": [0, 1499, 1]})
    reload_inboxes(s)
    reasons = set()
    for t in range(1, 6):
        s.tick(NOW + t)
        reasons |= {(j.state, str(j.reason)) for j in s.jobs.values()}
        active = sorted(int(i) for i in r.zrange(K.active, 0, -1))
        assert active == sorted(s.jobs)
        assert [codec.loads(x) for x in r.mget([K.job(i) for i in active])] == [s.jobs[i] for i in active]
        assert r.hmget(K.stat_rows, [str(i) for i in active]) == [statrows.dumps(s.jobs[i]) for i in active]
    assert reply(r, "arr")["ok"] and len(reasons) >= 2


def test_put_jobs_adds_to_the_index_only_the_jobs_it_is_told_are_new(real_conns):
    from labq.scheduler.jobs.model import Job
    from labq.scheduler.store import statrows, writes
    r, _ = real_conns
    a, b = Job(id=1, user="u", account="a"), Job(id=2, user="u", account="a")
    with r.pipeline() as p:
        writes.put_jobs(p, K, [a, b], new={2})
        p.execute()
    assert r.zrange(K.active, 0, -1) == ["2"]
    assert r.hmget(K.stat_rows, ["1", "2"]) == [statrows.dumps(a), statrows.dumps(b)]
    assert codec.loads(r.get(K.job(1))) == a


def test_a_held_submit_carries_the_reason_the_plan_gives_so_the_first_pass_writes_nothing(real_conns, monkeypatch):
    from labq.scheduler.jobs.jobspec import HELD_DETAIL
    from labq.scheduler.store import writes
    r, raw = real_conns
    s = started(r, raw)
    send(r, "alice", "held", body={**BODY, "array": [0, 1199, 1]})
    send(r, "alice", "one", body=BODY)
    reload_inboxes(s)
    written, real = [], writes.put_jobs

    def spy(p, k, jobs, **kw):
        jobs = list(jobs)
        written.extend(j for j in jobs if j.id not in kw.get("new", ()))
        return real(p, k, jobs, **kw)
    monkeypatch.setattr(writes, "put_jobs", spy)
    s.tick(NOW + 1)          # the submits, then the first pass over them
    s.tick(NOW + 2)
    assert reply(r, "held")["ok"] and reply(r, "one")["ok"]
    assert written == []
    assert {(j.reason, j.detail) for j in s.jobs.values()} == {(states.HELD, HELD_DETAIL)}
    assert {(codec.loads(x).reason, codec.loads(x).detail) for x in r.mget([K.job(i) for i in s.jobs])} == \
        {(states.HELD, HELD_DETAIL)}
