"""Issue 39 item 1: a PENDING array is one record (a rest) until its tasks start, as a held one is.
The scheduler keeps a window of its first tasks as records (state.window: what plan() must see to
decide as over every task, tests/property/test_array_window.py) and makes more as they start; del,
hold and release of the array whole act on the rest at once; dependencies and a new leader see the
tasks as they were. Fakeredis and a real redis-server."""
import time

from labq.scheduler.daemon import state
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import rest, states
from labq.scheduler.store import reads
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, CFG, FROZEN, K, act as _act, finish, setup, submit_ok as _submit, thin as _thin, woke

N = 10_000
SMALL = {**BODY, "gpus": 0, "cpus": 1, "mem": 0}


def _pending_in_window(s, a):
    """The array's pending records before its first resting task (what the window counts)."""
    first = s.rests[a].runs[0][0] if a in s.rests else N
    return sorted(j.id for j in s.jobs.values() if j.array_id == a and j.state == states.PENDING and j.id - a < first)


def _running(s, a):
    return sorted(j.id for j in s.jobs.values() if j.array_id == a and j.state in states.ON_NODE)


def test_a_pending_array_is_one_rest_and_a_window_of_records_that_follows_its_starts(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    w = state.window(s.nodes, s.cfg)
    running = _running(s, a)
    assert len(running) == 16 and running == list(range(a, a + 16))
    assert len(_pending_in_window(s, a)) == w - 16 and r.zcard(K.active) == w < N
    assert s.rests[a].left == N - w and s.tally.pending == N - 16
    assert len(reads.Reader(r, K).active()) == N and len(_thin(r).stat_rows()[0]) == N
    # four tasks end: the next pass sees the window whole again (16 more records, from the front)
    # and starts four more
    for jid in running[:4]:
        finish(r, jid, 1, "completed", 0, now + 5)
    s.tick(now + 6, woke(r))
    assert _running(s, a) == list(range(a + 4, a + 20))
    assert len(_pending_in_window(s, a)) == w - 4 and s.rests[a].runs[0][0] == w + 16
    assert s.tally.pending == N - 20 and r.zcard(K.active) == len(s.jobs) == w + 12


def test_the_rest_of_a_pending_array_carries_the_reason_of_its_window(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    # The rest takes the window's reason before each pass (a pass's own new reasons, the next one):
    # two passes that change nothing, and it says what the window says.
    for k in (1, 2):
        s.tick(now + k * (CFG.tick + 1), woke(r))
    last = max(_pending_in_window(s, a))
    assert s.jobs[last].reason not in (states.NONE, "")
    assert (s.rests[a].template.reason, s.rests[a].template.detail) == (s.jobs[last].reason, s.jobs[last].detail)
    assert reads.Reader(r, K).job(a + N - 1).reason == s.jobs[last].reason


def test_del_of_a_pending_array_ends_its_rest_as_one_record(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    w = state.window(s.nodes, s.cfg)
    got = _act(r, s, now + 1, "del", "cancel", [str(a)])
    # one run for the window's tasks and the rest's (as `labq del` prints it: A_[16-9999] cancelled)
    assert got["ok"] and got["runs"][-1] == {"state": states.CANCELLED, "array": a, "from": 16, "to": N - 1}, got["runs"]
    assert sum(x["to"] - x["from"] + 1 for x in got["runs"]) == N, got["runs"][:4]
    ended = {j.id: j for j in reads.Reader(r, K).ended()}
    assert ended[a + w].display_id == f"{a}_[{w}-{N - 1}]" and ended[a + w].task_count == N - w
    assert len(ended) == 1 + w - 16 and all(ended[i].state == states.CANCELLED for i in ended)
    assert not s.rests and s.tally.pending == 0 and r.hlen(K.rests) == 0
    assert all(s.jobs[i].cancel_requested for i in range(a, a + 16)) and len(s.jobs) == 16
    s.tick(now + 2, woke(r))
    assert not s.rests and len(s.jobs) == 16, "a window made again after the array was cancelled"


def test_hold_and_release_of_a_pending_array_whole_act_on_its_rest(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    w = state.window(s.nodes, s.cfg)
    keys = r.dbsize()
    got = _act(r, s, now + 1, "hold", "hold", [str(a)])
    # the running tasks cannot be held (each an error, as for an array of records)
    assert {"state": "held", "array": a, "from": 16, "to": N - 1} in got["runs"], got["runs"]
    assert not got["ok"] and got["error"].count("not pending") == 16, got["error"][:200]
    assert s.rests[a].template.held and s.rests[a].template.reason == states.HELD
    assert all(s.jobs[i].held for i in _pending_in_window(s, a)) and s.rests[a].left == N - w
    assert r.dbsize() - keys <= 6, f"{r.dbsize() - keys} keys for a hold of one rest"
    assert reads.Reader(r, K).job(a + N - 1).held
    s.tick(now + 2, woke(r))
    assert s.rests[a].left == N - w, "a held rest made more records"
    got = _act(r, s, now + 3, "rel", "release", [str(a)])
    assert {"state": "released", "array": a, "from": 16, "to": N - 1} in got["runs"], got["runs"]
    assert not s.rests[a].template.held and not any(s.jobs[i].held for i in _pending_in_window(s, a))
    finish(r, a, 1, "completed", 0, now + 4)
    s.tick(now + 5, woke(r))
    assert a + 16 in _running(s, a) and len(_pending_in_window(s, a)) == w - 1


def test_a_job_after_a_resting_task_of_a_pending_array_waits_for_it(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    d = _submit(r, s, now + 1, "dep", {**BODY, "dependency": f"afterok:{a}_5000"}, user="bob")["job_id"]
    s.tick(now + 2, woke(r))
    dep = reads.Reader(r, K).job(d)
    assert dep.state == states.PENDING and dep.reason == states.DEPENDENCY, (dep.reason, dep.detail)
    assert f"{a}_5000" in dep.detail and a + 5000 not in s.ended


def test_a_new_leader_takes_the_rest_and_its_window_as_they_are(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    window, left = _pending_in_window(s, a), s.rests[a].left
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    r.delete(K.leader)
    s2.tick(now + 1)
    # its first pass sees the window whole (the node is full: nothing more started)
    now_pending, w = _pending_in_window(s2, a), state.window(s2.nodes, s2.cfg)
    assert now_pending[:len(window)] == window and len(now_pending) == w and s2.rests[a].left == left - 16
    assert s2.tally.pending == s.tally.pending == N - 16 and _running(s2, a) == _running(s, a)


def _resolve(r, text):
    """What `labq show TEXT` finds (ThinClient.resolve over the test's connection)."""
    c = ThinClient.__new__(ThinClient)
    c.read = _thin(r)
    return c.resolve(text)


def test_show_of_a_task_finds_it_resting_and_after_del_of_the_whole_array(conns):
    """`labq show A_i` of a task that is no record of its own: resting (the rest's template), and
    after `del A` (the one record A_[i-j] that ended it) — its own id, index and state, not 'no such
    job'. Failed before for the second: the ended tasks had no record to find."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    w = state.window(s.nodes, s.cfg)
    [t] = _resolve(r, f"{a}_5000")
    assert (t.id, t.display_id, t.state) == (a + 5000, f"{a}_5000", states.PENDING)
    assert _act(r, s, now + 1, "del", "cancel", [str(a)])["ok"]
    for i in (w - 1, w, 5000, N - 1):
        [t] = _resolve(r, f"{a}_{i}")
        assert (t.id, t.display_id, t.state, t.task_count) == (a + i, f"{a}_{i}", states.CANCELLED, 1), i
    assert [t.display_id for t in _resolve(r, f"{a}_[{w - 1}-{w + 1}]")] == [f"{a}_{i}" for i in (w - 1, w, w + 1)]
    assert _resolve(r, f"{a}_{N}") == []


def test_show_of_a_task_of_a_held_array_deleted_whole_with_a_step(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "hold": True, "array": [0, 2 * N - 2, 2]})["job_id"]
    assert _act(r, s, now + 1, "del7", "cancel", [f"{a}_14"])["ok"]
    assert _act(r, s, now + 2, "del", "cancel", [str(a)])["ok"]
    [one] = [j for j in reads.Reader(r, K).ended() if j.task_count > 1]
    assert one.display_id == f"{a}_[0-12:2,16-{2 * N - 2}:2]"
    for i, jid in ((0, a), (12, a + 6), (14, a + 7), (16, a + 8), (2 * N - 2, a + N - 1)):
        [t] = _resolve(r, f"{a}_{i}")
        assert (t.id, t.display_id, t.state) == (jid, f"{a}_{i}", states.CANCELLED), i
    assert _resolve(r, f"{a}_13") == []


def test_release_and_requeue_of_a_rest_they_leave_as_it_is_build_none_of_its_tasks(conns, monkeypatch):
    """`release A` of a pending rest and `requeue A` change nothing of the resting tasks: one verdict
    for them all (the reply's run), not every task built as a Job in the request (before: 9,900)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "array": [0, N - 1, 1]})["job_id"]
    w = state.window(s.nodes, s.cfg)
    built, real = [], rest.Rest.tasks
    monkeypatch.setattr(rest.Rest, "tasks", lambda self, positions=None: built.append(
        got := real(self, positions)) or got)
    got = _act(r, s, now + 1, "rel", "release", [str(a)])
    assert {"state": "released", "array": a, "from": 16, "to": N - 1} in got["runs"], got["runs"]
    got = _act(r, s, now + 2, "rq", "requeue", [str(a)])
    assert {"state": "pending (nothing to requeue)", "array": a, "from": 16, "to": N - 1} in got["runs"], got["runs"]
    assert max(map(len, built), default=0) <= w, [len(b) for b in built]
    assert s.rests[a].left > N - 2 * w and not s.rests[a].template.held


def test_del_of_a_task_that_ended_inside_the_one_record_of_del_a_finds_it(conns):
    """`labq del A_i` (the scheduler's lookup, daemon/lookup.py) of a task that ended inside the one
    record `del A` made (A_[i-j]), or as a record of its own: "already ended", never "no such job".
    Failed before: the lookup looked for an array's tasks in memory only (the active jobs and rests)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**SMALL, "hold": True, "array": [0, 2 * N - 2, 2]})["job_id"]
    assert _act(r, s, now + 1, "del7", "cancel", [f"{a}_14"])["ok"]
    assert _act(r, s, now + 2, "del", "cancel", [str(a)])["ok"]
    for i, rid in ((14, "again7"), (0, "again0"), (16, "again16"), (2 * N - 2, "again-last")):
        got = _act(r, s, now + 3, rid, "cancel", [f"{a}_{i}"])
        assert got["results"] == [{"id": f"{a}_{i}", "ok": False, "error": f"job {a}_{i} already ended"}], got
    got = _act(r, s, now + 3, "odd", "cancel", [f"{a}_13", f"{a}_{2 * N}"])
    assert [x["error"] for x in got["results"]] == [f"no such job: {a}_13", f"no such job: {a}_{2 * N}"]
