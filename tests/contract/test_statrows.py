"""The `stat` index (store/statrows.py): what `stat` prints from the rows equals what it prints from
the job records (hypothesis over random jobs), and the scheduler keeps the rows with the records in
the same transaction, drops them when jobs end, and rebuilds them when it becomes leader."""
import time

import pytest
from hypothesis import given, settings, strategies as st

from labq.cli import render, statview
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Gpu, Job, Node
from labq.scheduler.settings import config
from labq.scheduler.store import resp, statrows, writes
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.thinreads import ThinReader

NOW = 1_800_000_000.0
CURRENCY = config.loads("").rates.currency      # money is printed in the config's currency
NODES = (Node("a", 16, 64 << 30, 4, (Gpu("G0", 0, "A100"), Gpu("G1", 1, "A100")), "up"),
         Node("b", 8, 32 << 30, 2, (Gpu("G2", 0, "H100"),), "drain"),
         Node("c", 4, 8 << 30, 1, (), "down"))

times = st.none() | st.floats(NOW - 10 * 86400, NOW, allow_nan=False)
attempts = st.builds(Attempt, attempt=st.integers(1, 5), node=st.sampled_from(["a", "b", "c"]), gpus=st.just(()),
                     start_time=times, end_time=times, dispatch_time=times, cost=st.integers(0, 10**9))


@st.composite
def jobs(draw):
    n = draw(st.integers(0, 25))
    ids = sorted(draw(st.sets(st.integers(1, 60), min_size=n, max_size=n)))
    out = []
    for i in ids:
        arr = draw(st.none() | st.integers(max(1, i - 5), i))
        out.append(Job(
            id=i, user=draw(st.sampled_from(["ann", "bob"])), account=draw(st.sampled_from(["x", "y"])),
            name=draw(st.text(max_size=30)), qos=draw(st.sampled_from(["normal", "low"])),
            state=draw(st.sampled_from(sorted(states.ACTIVE))), reason=draw(st.sampled_from(["Priority", "Held"])),
            node=draw(st.sampled_from(["", "a", "b"])), gpus=draw(st.integers(0, 4)), cpus=draw(st.integers(1, 8)),
            mem=draw(st.integers(0, 1 << 36)), array_id=arr, array_index=None if arr is None else i - arr,
            array_count=None if arr is None else 6, cost_rate=draw(st.integers(0, 10**8)),
            attempts=tuple(draw(st.lists(attempts, max_size=3)))))
    return out


def _from_records(jobs, shown, now):
    cells = [render.stat_row(j, now, label, currency=CURRENCY) for label, j in statview.compact(shown)]
    return statview.capacity_line(NODES, jobs) + "\n" + statview.table(cells, statview.STAT_HEADERS)


def _from_rows(jobs, now, **filters):
    """As `stat` reads them: in the hash's order (not the ids'), parsed and sorted."""
    texts = [statrows.dumps(j) for j in jobs]
    rows = statrows.parse(texts[::-1])
    assert [int(r[statrows.ID]) for r in rows] == sorted(j.id for j in jobs)
    return statview.stat_text(NODES, rows, now, currency=CURRENCY, **filters)



@st.composite
def arrays(draw):
    """Arrays of alike tasks (what folding is for), a few of them changed (started, another reason,
    another name), and single jobs between them."""
    out, i = [], 1
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            out.append(_job(i, draw(st.sampled_from(sorted(states.ACTIVE))), gpus=draw(st.integers(0, 2))))
            i += 1
        arr, step, n = i, draw(st.sampled_from([1, 1, 2])), draw(st.integers(1, 12))
        base = dict(user=draw(st.sampled_from(["ann", "bob"])), account="x", name=f"a{arr}", array_id=arr,
                    array_count=n, gpus=draw(st.integers(0, 2)), reason="Priority", state=states.PENDING)
        for k in range(n):
            kw = dict(base, array_index=k * step)
            change = draw(st.sampled_from([None] * 6 + ["state", "reason", "name", "node"]))
            if change == "state":
                kw.update(state=states.RUNNING, node="a", cost_rate=3_600_000,
                          attempts=(Attempt(1, "a", (), start_time=NOW - 60, dispatch_time=NOW - 61),))
            elif change == "reason":
                kw["reason"] = "Held"
            elif change == "name":
                kw["name"] = "other,name"
            elif change == "node":
                kw.update(state=states.RUNNING, node="a")
            out.append(Job(id=i, **kw))
            i += 1
    return out


@settings(max_examples=300, deadline=None)
@given(arrays(), st.sampled_from([None, "ann"]), st.sampled_from([None, {"PD"}, {"R"}]))
def test_folded_rows_print_what_the_records_print(js, user, wanted):
    shown = [j for j in js if (not user or j.user == user) and (not wanted or j.state in wanted)]
    assert _from_rows(js, NOW, user=user, wanted=wanted) == _from_records(js, shown, NOW)


def test_an_array_of_alike_tasks_is_one_line_until_a_task_diverges():
    kw = dict(user="ann", account="x", name="train", array_id=5, array_count=1000)
    js = [Job(id=i, array_index=i - 5, **kw) for i in range(5, 1005)]
    js[500] = Job(id=505, array_index=500, state=states.RUNNING, node="a", **kw)
    cells = statview.rows_cells(statrows.parse([statrows.dumps(j) for j in js]), NOW)
    assert [c[statrows.ID] for c in cells] == ["5_[0-499]", "5_500", "5_[501-999]"]
    assert len(statview.rows_cells(statrows.parse([statrows.dumps(j) for j in js]), NOW, expand=True)) == 1000
    assert _from_rows(js, NOW) == _from_records(js, js, NOW)


@settings(max_examples=100, deadline=None)
@given(arrays(), st.sampled_from(["1", "3_0,2", "2_[0-3]", "1,4_1"]))
def test_picked_ids_and_expand_show_what_the_records_show(js, text):
    from labq.cli import hot
    pick, keep = hot._id_pick(text), hot._id_filter(text)
    shown = [j for j in js if keep(j)]
    rows = statrows.parse([statrows.dumps(j) for j in js])
    got = statview.rows_table(statview.rows_cells(statview.select(rows, picked=pick), NOW, expand=True), currency=CURRENCY)
    assert got == statview.table([render.stat_row(j, NOW, j.display_id, currency=CURRENCY) for j in shown],
                                 statview.STAT_HEADERS)


@settings(max_examples=300, deadline=None)
@given(jobs(), st.floats(NOW, NOW + 86400, allow_nan=False))
def test_rows_print_what_the_records_print(js, now):
    assert _from_rows(js, now) == _from_records(js, js, now)
    assert _from_rows(js, now) == _from_records(js, js, now)


@settings(max_examples=100, deadline=None)
@given(jobs(), st.sampled_from([None, "ann"]), st.sampled_from([None, "y"]), st.sampled_from([None, {"PD"}, {"R", "CG"}]))
def test_filters_select_the_same_jobs(js, user, account, wanted):
    shown = [j for j in js if (not user or j.user == user) and (not account or j.account == account)
             and (not wanted or j.state in wanted)]
    assert _from_rows(js, NOW, user=user, account=account, wanted=wanted) == _from_records(js, shown, NOW)


def _job(i, state=states.PENDING, **kw):
    return Job(id=i, user="ann", account="x", name=f"j{i}", state=state, **kw)


# -- real Redis: the write path and the reader ----------------------------------------------------
@pytest.fixture
def thin(redis_server, real_redis):
    c = resp.Connection(redis_server.url)
    yield ThinReader(c, Keys("labq"), lambda e: AssertionError(e))
    c.close()


@pytest.mark.redis
def test_rows_are_written_and_dropped_with_the_records(real_redis, thin):
    k = Keys("labq")
    running = _job(2, states.RUNNING, node="a", gpus=1, cost_rate=3_600_000,
                   attempts=(Attempt(1, "a", ("G0",), start_time=NOW - 60, dispatch_time=NOW - 61),))
    with real_redis.pipeline() as p:
        writes.put_jobs(p, k, [_job(1), running, _job(3)])
        p.execute()
    rows, names = thin.stat_rows()
    assert [r[statrows.ID] for r in rows] == ["1", "2", "3"] and statrows.cells(rows[1][statrows.TAIL])[statrows.WHERE] == "a"
    line = statview.rows_table(statview.rows_cells(rows, NOW), currency=CURRENCY).splitlines()[2].split()
    assert line[0] == "2" and line[8] == render.stat_row(running, NOW, currency=CURRENCY)[8] == "$0.06"   # from the process start (issue 35)
    with real_redis.pipeline() as p:
        writes.put_jobs(p, k, [_job(3, states.COMPLETED, end_time=NOW)])
        p.execute()
    rows, _ = thin.stat_rows()
    assert [r[statrows.ID] for r in rows] == ["1", "2"] and real_redis.hlen(k.stat_rows) == 2


@pytest.mark.redis
def test_missing_rows_make_the_reader_fall_back_and_the_scheduler_rebuilds_them(real_redis, thin):
    """Data written before the index existed: the reader says so (None), and a scheduler that
    becomes leader writes every row afresh."""
    from labq.scheduler.store.state import SchedulerStore
    k = Keys("labq")
    jobs = [_job(i) for i in range(1, 6)]
    with real_redis.pipeline() as p:
        writes.put_jobs(p, k, jobs)
        p.execute()
    real_redis.delete(k.stat_rows)
    real_redis.hset(k.stat_rows, "99", "stale")
    assert thin.stat_rows()[0] is None
    real_redis.set(k.leader, "me")
    SchedulerStore(real_redis, k, "me").rebuild_stat_rows(jobs)
    rows, _ = thin.stat_rows()
    assert [r[statrows.ID] for r in rows] == ["1", "2", "3", "4", "5"]


@pytest.mark.redis
def test_thin_nodes_match_the_scheduler_view(real_redis, thin):
    """Also `labq nodes` on the fast path: a lease that names another epoch than the record's is a
    node down (its agent is not alive in it), as the scheduler takes it; the GPUs' fields by name."""
    import json

    from labq.scheduler.store.state import SchedulerStore
    k = Keys("labq")
    for n, admin, lease, epoch in (("a", None, "x", ""), ("b", "drain", "x", ""), ("c", None, None, ""),
                                   ("d", None, "e1", "e2"), ("e", None, "e3", "e3"), ("f", None, "x", "")):
        real_redis.sadd(k.nodes, n)
        real_redis.hset(k.node(n), mapping={"cpus": 4, "mem": 1 << 30, "slots": 2, "hb": 5.0, "epoch": epoch,
                                            "gpus": json.dumps([["G-" + n, 0, "A100", 80 << 30], ["H-" + n, 1, "H100", 0]])})
        if lease:
            real_redis.set(k.node_lease(n), lease, px=60_000)
        if admin:
            real_redis.set(k.node_admin(n), admin)
    real_redis.hset(k.node_health("f"), mapping={"reason": "no runner took work"})
    now = time.time()
    full = SchedulerStore(real_redis, k, "reader").nodes(now)
    light = thin.nodes()

    def view(n):
        return (n.name, n.state, n.cpus, n.mem, n.slots, n.last_heartbeat, n.reason,
                [(g.uuid, g.index, g.model, g.mem) for g in n.gpus])
    assert [view(n) for n in full] == [view(n) for n in light]
    assert [n.state for n in light] == ["up", "drain", "down", "down", "up", "unhealthy"]


@pytest.mark.redis
def test_rows_written_ahead_of_their_index_are_skipped(real_redis, thin):
    """A big array's records and rows are written before the transaction that indexes them
    (writes.put_new_jobs): until then, and after a crash in between, readers skip those rows."""
    k = Keys("labq")
    with real_redis.pipeline() as p:
        writes.put_jobs(p, k, [_job(1), _job(2)])
        p.execute()
    ahead = [_job(i, array_id=3, array_index=i - 3, array_count=writes.PREWRITE_MIN)
             for i in range(3, 3 + writes.PREWRITE_MIN)]
    assert len(writes.put_new_jobs(real_redis, k, ahead)) == writes.PREWRITE_MIN
    rows, _ = thin.stat_rows()
    assert [r[statrows.ID] for r in rows] == ["1", "2"]
    with real_redis.pipeline() as p:
        writes.index_jobs(p, k, ahead)
        p.execute()
    rows, _ = thin.stat_rows()
    assert len(rows) == 2 + writes.PREWRITE_MIN and statrows.display_id(rows[-1]) == f"3_{writes.PREWRITE_MIN - 1}"


def test_stat_turns_the_cyclic_collector_off_only_while_it_runs():
    import gc

    from labq.cli import hot

    seen = []

    class Read:
        def stat_rows(self):
            seen.append(gc.isenabled())
            raise RuntimeError("unreachable")

    class C:
        read, user = Read(), "ann"

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        hot.stat(C())
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            hot.stat(C())
        assert not gc.isenabled()       # left as the caller had it
    finally:
        gc.enable()


@pytest.mark.redis
def test_the_rows_of_an_older_shape_go_when_the_scheduler_rebuilds(real_redis, thin):
    """ROWS_VERSION 2 -> 3 left `labq:statrows:v2` (a row for every job that was active at the
    upgrade) in Redis for good: nothing reads it once the scheduler writes v3."""
    from labq.scheduler.store.keys import ROWS_VERSION
    from labq.scheduler.store.state import SchedulerStore
    k = Keys("labq")
    older = [f"labq:statrows:v{v}" for v in range(1, ROWS_VERSION)]
    assert older and k.stat_rows not in older
    for key in older:
        real_redis.hset(key, "1", "a row of an older labq")
    real_redis.hset("labq:statrows:other", "1", "not ours to drop")
    real_redis.set(k.leader, "me")
    SchedulerStore(real_redis, k, "me").rebuild_stat_rows([_job(1)])
    assert [key for key in older if real_redis.exists(key)] == []
    assert real_redis.hlen(k.stat_rows) == 1 and real_redis.exists("labq:statrows:other")
