"""A mass cancel (issue 39 item 3) commits in chunks, one transaction each, and its reply names runs
of ids: every task ends CA (a running one is told to stop), the table, tallies and budget
commitments come out right, and a leader that dies between chunks leaves a state its successor
finishes, answering with everything cancelled. On fakeredis and a real redis-server."""
import json
import time

import pytest

from labq.scheduler.daemon import handlers
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import rest, states
from labq.scheduler.store import writes
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, CFG, FROZEN, K, job, push, reply, setup, taken, woke

N = 2_500


def send(r, user, op, body, rid):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps(body)})
    r.lpush(K.wake, f"user:{user}")


@pytest.fixture(autouse=True)
def as_records(monkeypatch):
    """The chunks of a cancel of many records: a 2,500-task array as records, not one rest (a cancel
    of a rest whole is one record: tests/contract/test_array_record.py)."""
    monkeypatch.setattr(rest, "REST_MIN", 10**9)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(handlers, "CHUNK", 1_000)     # 3 chunks of a 2,500-task array


def _array(r, s):
    send(r, "alice", "submit", {**BODY, "array": [0, N - 1, 1]}, "arr")
    s.tick(time.time(), woke(r))
    got = reply(r, "arr")
    assert got["ok"], got
    first = got["job_id"]
    running = [i for i in range(first, first + N) if job(r, i).state in states.ON_NODE]
    assert 0 < len(running) <= 4
    return first, running


def _all_cancelled(r, s, first, running):
    for i in range(first, first + N):
        j = job(r, i)
        if i in running:
            assert j.cancel_requested and r.get(K.control(i)) == "cancel"
        else:
            assert j.state == states.CANCELLED, (i, j.state)
    assert set(s.jobs) == set(running)
    assert s.tally.active_by_user["alice"] == len(running)
    assert r.zcard(K.active) == len(running)
    assert r.get(K.partial("del")) is None and taken(r) == 0


def _said(got, first, running):
    """Every task named once, the runs as `labq del` prints them."""
    assert got["ok"] and got["runs_only"] and len(got["results"]) == 0
    names = [d for run in got["runs"] for d in _ids(run)]
    assert sorted(names) == sorted(f"{first}_{i}" for i in range(N))
    cancelling = {f"{first}_{i - first}" for i in running}
    assert {d for run in got["runs"] if run["state"] == "cancelling" for d in _ids(run)} == cancelling
    assert len(got["runs"]) <= 2 * len(running) + 1     # runs, not one entry per task


def _ids(run):
    return [f"{run['array']}_{i}" for i in range(run["from"], run["to"] + 1)]


def test_a_mass_cancel_commits_in_chunks_and_names_runs(conns, small_chunks, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    first, running = _array(r, s)
    partial = []
    real = writes.put_partial
    monkeypatch.setattr(writes, "put_partial", lambda p, k, rid, runs: (partial.append(runs), real(p, k, rid, runs)))
    send(r, "alice", "cancel", {"ids": [str(first)]}, "del")
    s.tick(time.time(), woke(r))
    _said(reply(r, "del"), first, running)
    assert len(partial) == 4 and partial[-1] is None       # 3 chunks, each its own commit, then the reply
    _all_cancelled(r, s, first, running)
    # What the leader holds is what a successor loads from Redis: tallies and commitments alike.
    r.delete(K.leader)
    fresh = Scheduler(r, CFG, me="s2", clock=FROZEN)
    fresh.tick(time.time() + 1)
    assert set(fresh.jobs) == set(s.jobs)
    assert fresh.tally.active_by_account == s.tally.active_by_account
    now = time.time() + 1
    assert fresh.snapshot(now).spent == s.snapshot(now).spent


class Died(BaseException):
    """A leader's death between two chunks of a cancel (kill -9)."""


def test_a_leader_dead_between_chunks_leaves_what_its_successor_finishes(conns, small_chunks, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    first, running = _array(r, s)
    real, calls = writes.put_partial, []

    def dies_on_second(p, k, rid, runs):
        calls.append(runs)
        if len(calls) == 2:
            raise Died()          # inside the second chunk's transaction: it is never written
        real(p, k, rid, runs)
    monkeypatch.setattr(writes, "put_partial", dies_on_second)
    send(r, "alice", "cancel", {"ids": [str(first)]}, "del")
    with pytest.raises(Died):
        s.tick(time.time(), woke(r))
    assert reply(r, "del") is None
    committed = sum(job(r, i).state == states.CANCELLED for i in range(first, first + N))
    assert committed == handlers.CHUNK - sum(i < first + handlers.CHUNK for i in running)   # the first chunk, whole
    assert r.get(K.partial("del")) is not None
    monkeypatch.setattr(writes, "put_partial", real)
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    s2.tick(time.time() + 1)
    _said(reply(r, "del"), first, running)
    _all_cancelled(r, s2, first, running)


def test_the_client_expands_runs_into_the_results_it_always_gave(conns, small_chunks):
    r, raw = conns
    s = setup(r, raw, time.time())
    first, running = _array(r, s)
    c = ThinClient.__new__(ThinClient)
    c.request = lambda op, body: _asked(r, s, op, body)
    got = c.act_on("cancel", [str(first)])
    assert len(got["results"]) == N and all(x["ok"] for x in got["results"])
    assert {x["id"] for x in got["results"]} == {f"{first}_{i}" for i in range(N)}


def _asked(r, s, op, body):
    send(r, "alice", op, body, "asked")
    s.tick(time.time(), woke(r))
    return reply(r, "asked")


class Clock:
    """The scheduler's wall clock (what it checks a client's expiry against), moved by the test."""
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def _late_cancel(r, s, monkeypatch, first, late_after: int):
    """A cancel whose client's expiry passes once `late_after` chunks are written."""
    clock, real, written = Clock(time.time()), writes.put_partial, []
    s.clock = clock

    def put(p, k, rid, runs):
        real(p, k, rid, runs)
        written.append(runs)
        if len(written) >= late_after:
            clock.t += 60           # the tick went on past the client's deadline
    monkeypatch.setattr(writes, "put_partial", put)
    push(r, "alice", {"rid": "del", "op": "cancel", "body": json.dumps({"ids": [str(first)]}),
                      "expires": f"{clock.t + 30:.3f}"})
    r.lpush(K.wake, "user:alice")
    return clock


def _answered(r, s, clock):
    """Ticks until the cancel is answered (a commit refused as expired reloads; a later tick answers)."""
    for _ in range(3):
        s.tick(clock.t, woke(r))
        if r.exists(K.reply("del")):
            return
    raise AssertionError("the cancel was never answered")


def test_a_mass_cancel_begun_before_its_clients_deadline_is_finished_and_answered(conns, small_chunks, monkeypatch):
    """The first chunk was committed in time: the cancel goes on to its end and its answer is the
    cancel's, never 'expired' (which the client reads as nothing done, while every task had ended)."""
    r, raw = conns
    s = setup(r, raw, time.time())
    first, running = _array(r, s)
    clock = _late_cancel(r, s, monkeypatch, first, late_after=1)
    _answered(r, s, clock)
    _said(reply(r, "del"), first, running)
    _all_cancelled(r, s, first, running)


def test_a_mass_cancel_whose_deadline_passes_before_its_first_chunk_does_nothing(conns, small_chunks, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    first, running = _array(r, s)
    clock = _late_cancel(r, s, monkeypatch, first, late_after=0)
    real_flush = s.flush

    def late_flush():
        clock.t += 60     # in time when screened, late when its first chunk is written
        real_flush()
    s.flush = late_flush
    _answered(r, s, clock)
    got = reply(r, "del")
    assert got is not None and not got["ok"] and "expired" in got["error"], got
    assert not any(job(r, i).state == states.CANCELLED for i in range(first, first + N))
