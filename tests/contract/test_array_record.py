"""Issue 39 item 1: a held array is one record, whatever its task count (DESIGN §11: "a 10,000-task
array submitted in ≤ 100 ms (one record, whatever its task count)"). What this spec counts is what
the submit writes (keys), not time: a held 10,000-task array adds as many keys as a held
10-task one, or fewer; its tasks stay what users see (stat, show, wait, dependencies, release,
del) and a new leader finds them. Fakeredis and a real redis-server."""
import json
import time

from labq.cli import statview
from labq.scheduler.daemon import state
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.store import acctrows, reads, statrows
from tests.harness import BODY, CFG, FROZEN, K, act as _act, setup, submit_ok as _submit, thin as _thin, woke

N = 10_000
HELD = {**BODY, "hold": True}


def test_a_held_array_adds_the_keys_of_one_record_whatever_its_task_count(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    before = r.dbsize()
    small = _submit(r, s, now, "small", {**HELD, "array": [1, 10, 1]}, user="bob")
    mid = r.dbsize()
    big = _submit(r, s, now + 1, "big", {**HELD, "array": [1, N, 1]})
    after = r.dbsize()
    assert small["count"] == 10 and big["count"] == N and big["last_job_id"] == big["job_id"] + N - 1
    assert after - mid <= mid - before, (f"a held {N}-task array added {after - mid} keys, a 10-task one "
                                         f"{mid - before}")


def test_the_tasks_of_a_held_array_are_seen_as_they_were(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    # stat: one line for the array in the human view, every task in the rows (-r, --json's ids)
    rows, _ = _thin(r).stat_rows()
    assert len(rows) == N and {statrows.display_id(x) for x in rows[:2]} == {f"{a}_1", f"{a}_2"}
    lines = statview.rows_cells(rows, now)
    assert [x[statrows.ID] for x in lines] == [f"{a}_[1-{N}]"]
    assert R_cells(lines[0])[statrows.WHERE] == "(Held)"
    # show/wait of one task: the task as submitted, held, with its own id and index
    for reader in (reads.Reader(r, K), _thin(r)):
        t = reader.job(a + 41)
        assert t is not None and t.display_id == f"{a}_42" and t.state == states.PENDING and t.held
        assert t.argv == tuple(BODY["argv"]) and t.array_count == N
        assert [j.id for j in reader.jobs([a, a + N - 1, a + N])] == [a, a + N - 1]
    assert len(reads.Reader(r, K).active()) == N
    # a new leader finds the array: its counts hold it
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    r.delete(K.leader)
    s2.tick(now + 2)
    assert s2.tally.pending == N and s2.tally.pending_by_user["alice"] == N


def test_a_new_leader_writes_a_rests_stat_row_afresh(conns):
    """As the rows of records (rebuild_stat_rows): an older labq's row shape is replaced at start."""
    from labq.scheduler.store import rests
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    fresh = r.hget(K.rests, str(a))
    r.hset(K.rests, str(a), json.dumps({**json.loads(fresh), "row": "an older shape"}))
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    r.delete(K.leader)
    s2.tick(now + 2)
    assert r.hget(K.rests, str(a)) == fresh == rests.row(s2.rests[a])


def R_cells(line):
    return statrows.cells(line[statrows.TAIL])


def test_one_task_released_or_cancelled_diverges_alone(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "gpus": 0, "cpus": 1, "mem": 0, "array": [0, N - 1, 1]})["job_id"]
    keys = r.dbsize()
    got = _act(r, s, now + 1, "rel", "release", [f"{a}_5"])
    assert got["ok"], got
    s.tick(now + 2, woke(r))
    five = reads.Reader(r, K).job(a + 5)
    assert five.state in states.ON_NODE and not five.held, five
    got = _act(r, s, now + 3, "del", "cancel", [f"{a}_7"])
    assert got["ok"] and got["results"][0]["state"] == states.CANCELLED, got
    assert reads.Reader(r, K).job(a + 7).state == states.CANCELLED
    six = reads.Reader(r, K).job(a + 6)
    assert six.state == states.PENDING and six.held
    assert r.dbsize() - keys < 40, f"{r.dbsize() - keys} keys for two tasks that diverged"
    rows, _ = _thin(r).stat_rows()
    shown = [x[statrows.ID] for x in statview.rows_cells(rows, now)]
    assert shown[0] == f"{a}_[0-4]" and f"{a}_[8-{N - 1}]" in shown and f"{a}_5" in shown, shown[:6]


def _unranked(r) -> int:
    """Redis' keys but the published ranking's (store/ranking.py: a rest's change is counted beside it)."""
    return r.dbsize() - len(r.keys(f"{K.ranking}*"))


def test_hold_and_requeue_leave_a_held_array_one_record(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    keys = _unranked(r)
    got = _act(r, s, now + 1, "hold", "hold", [str(a), f"{a}_3"])
    assert got["ok"] and got["runs"][0] == {"state": "held", "array": a, "from": 1, "to": N}, got
    got = _act(r, s, now + 2, "rq", "requeue", [f"{a}_[1-100]"])
    assert got["ok"] and got["runs"][0]["to"] == 100, got
    got = _act(r, s, now + 3, "theirs", "release", [f"{a}_4"], user="bob")
    assert not got["ok"] and "belongs to alice" in got["error"], got
    assert _unranked(r) - keys <= 6, f"{_unranked(r) - keys} keys (only the replies)"
    assert s.rests[a].left == N and not s.jobs and s.tally.pending == N


def test_a_job_that_depends_on_a_held_task_waits_for_it(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    d = _submit(r, s, now + 1, "dep", {**BODY, "dependency": f"afterok:{a}_3"}, user="bob")["job_id"]
    s.tick(now + 2, woke(r))
    dep = reads.Reader(r, K).job(d)
    assert dep.state == states.PENDING and dep.reason == states.DEPENDENCY, (dep.reason, dep.detail)
    assert f"{a}_3" in dep.detail
    assert a + 2 not in s.ended, "a held task was cached as ended"


def test_release_of_the_whole_array_lets_it_run(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "gpus": 0, "cpus": 1, "mem": 0, "array": [1, 2000, 1]})["job_id"]
    got = _act(r, s, now + 1, "rel", "release", [str(a)])
    assert got["ok"], got
    s.tick(now + 2, woke(r))
    jobs = reads.Reader(r, K).active()
    assert len(jobs) == 2000 and not any(j.held for j in jobs)
    assert sum(j.state in states.ON_NODE for j in jobs) == 16
    # The array stays one rest, pending now, with only the window a pass needs as records (this
    # asserted the rest gone, every task a record, before pending arrays rested too).
    assert r.hlen(K.rests) == 1 and not s.rests[a].template.held
    window = state.window(s.nodes, s.cfg)
    assert r.zcard(K.active) == 2000 - s.rests[a].left <= 2 * window < 2000


def test_del_of_a_whole_held_array_ends_its_resting_tasks_as_one_record(conns):
    """Issue 39 step 3: `del A` of a rest is O(1): one ended record `A_[lo-hi]` (CA) with its task
    count, one acct row, the rest and its counts gone."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [0, 1499, 1]})["job_id"]
    keys = r.dbsize()
    got = _act(r, s, now + 1, "del", "cancel", [str(a)])
    assert got["ok"] and got["runs"] == [{"state": "CA", "array": a, "from": 0, "to": 1499}], got
    ended = reads.Reader(r, K).ended()
    assert [(j.display_id, j.state, j.task_count) for j in ended] == [(f"{a}_[0-1499]", "CA", 1500)]
    assert not s.rests and not s.jobs and s.tally.pending == 0
    assert r.hgetall(K.acct_rows) == {str(j.id): acctrows.redis_row(j) for j in ended}
    assert r.hlen(K.rests) == 0 and not r.exists(K.rest(a))
    assert r.dbsize() - keys <= 6, f"{r.dbsize() - keys} keys for one array cancelled whole"
    v = acctrows.redis_rows(r.hvals(K.acct_rows))[0]
    shown = acctrows.finish([v], [0])[0]
    assert (v[acctrows.REDIS_FIELDS.index("tasks")], f"{shown[1]}_{shown[2]}") == (1500, f"{a}_[0-1499]")


def test_del_of_a_held_array_some_of_whose_tasks_diverged(conns):
    """Tasks made records before (one cancelled, one running) end the ordinary way; the tasks still
    resting end as one record naming their runs, with a step."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "gpus": 0, "cpus": 1, "mem": 0, "array": [0, 2 * N - 2, 2]})["job_id"]
    assert _act(r, s, now + 1, "rel", "release", [f"{a}_10"])["ok"]
    s.tick(now + 2, woke(r))
    assert _act(r, s, now + 3, "del7", "cancel", [f"{a}_14"])["ok"]
    got = _act(r, s, now + 4, "del", "cancel", [str(a)])
    assert got["ok"] and sum(x["to"] - x["from"] + 1 for x in got["runs"]) == N - 1, got["runs"][:3]
    ended = {j.id: j for j in reads.Reader(r, K).ended()}
    one = ended[a]
    assert one.display_id == f"{a}_[0-8:2,12,16-{2 * N - 2}:2]" and one.task_count == N - 2, one.display_id
    assert ended[a + 7].state == "CA" and ended[a + 7].task_count == 1
    running = reads.Reader(r, K).job(a + 5)
    assert running.state in states.ON_NODE and running.cancel_requested
    assert r.hlen(K.acct_rows) == 2 and not s.rests and s.tally.pending == 0


def test_the_archiver_keeps_the_script_of_an_array_whose_tasks_rest(conns):
    from labq.scheduler.store import writes
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "argv": [], "script": "#!/bin/sh\necho hi\n", "array": [1, N, 1]})["job_id"]
    assert r.get(K.script(a)) == "#!/bin/sh\necho hi\n"
    writes.drop_specs(r, K, [(a, N)])
    assert r.get(K.script(a)) == "#!/bin/sh\necho hi\n"


def test_del_of_a_whole_held_array_writes_one_acct_row(conns):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    got = _act(r, s, now + 1, "del", "cancel", [str(a)])
    assert got["ok"], got
    assert r.hlen(K.acct_rows) <= 1, f"{r.hlen(K.acct_rows)} acct rows for one array cancelled whole"


def test_the_archive_keeps_the_one_record_of_a_held_array_cancelled_whole(conns, tmp_path):
    from labq.scheduler.store.archive import Archive, Archiver
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, N, 1]})["job_id"]
    assert _act(r, s, now + 1, "del", "cancel", [str(a)])["ok"]
    Archiver(r, K, Archive(str(tmp_path / "h.db")), keep=0).step(now + 10)
    assert r.hlen(K.acct_rows) == 0 and r.zcard(K.history) == 0
    got = Archive(str(tmp_path / "h.db"))
    rows = got.acct_table(0, float("inf"))
    assert [(v[0], v[1], v[6]) for v in rows] == [(a, a, "CA")]
    assert got.jobs([a])[a].display_id == f"{a}_[1-{N}]" and got.jobs([a])[a].task_count == N


def test_a_job_after_any_task_of_a_held_array_cancelled_whole_may_start(conns):
    """`del A` of a held array a pending job depends on: the tasks it names end CA as records of their
    own, so `afterany` is satisfied (as before step 3) and never read as 'no record'."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = _submit(r, s, now, "big", {**HELD, "array": [1, 1500, 1]})["job_id"]
    d = _submit(r, s, now + 1, "dep", {**BODY, "dependency": f"afterany:{a}_3"}, user="bob")["job_id"]
    got = _act(r, s, now + 2, "del", "cancel", [str(a)])
    assert got["ok"], got
    s.tick(now + 3, woke(r))
    dep = reads.Reader(r, K).job(d)
    assert dep.reason != states.DEPENDENCY_NEVER and dep.state != states.CANCELLED, dep.detail
    assert reads.Reader(r, K).job(a + 2).state == states.CANCELLED
    assert not s.rests
