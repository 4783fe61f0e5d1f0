"""The ids of the active jobs that ran (Keys.ran, issue 39 item 4): the scheduler keeps the set in the
same transactions as the job records, so it equals {active jobs with an attempt or on a node} after
submits, starts, requeues, ends, the archive and a new leader's rebuild; `labq report`'s reader
(ThinReader.ran) reads those records alone, and the `stat` rows (or every record) where the set is
absent (a scheduler that predates it) or counts more ids than there are active jobs."""
from labq.scheduler.jobs import states
from labq.scheduler.store import codec
from labq.scheduler.store.archive import Archive, Archiver
from tests.harness import BODY, CFG, K, act, finish, setup, submit, thin, woke

T0 = 1_800_000_000.0


def _records(r) -> list:
    return [codec.loads(r.get(K.job(int(i)))) for i in r.zrange(K.active, 0, -1)]


def _want(r) -> set[str]:
    return {str(j.id) for j in _records(r) if j.state != states.PENDING or j.attempts}


def _kept(r) -> set[str]:
    got = set(r.smembers(K.ran))
    assert "-" in got, "the scheduler's mark: the set is kept"
    return got - {"-"}


def _reads(read, monkeypatch) -> tuple[list[int], int]:
    """(the ids ran() gives, how many records it asked for)."""
    asked, pipe = [], read._pipe
    monkeypatch.setattr(read, "_pipe", lambda cmds: asked.extend(len(c) - 1 for c in cmds if c[0] == "MGET")
                        or pipe(cmds))
    ids = [j.id for j in read.ran()]
    monkeypatch.undo()
    return ids, sum(asked)


def test_the_set_follows_the_records_and_report_reads_only_those(conns, tmp_path, monkeypatch):
    r, raw = conns
    s = setup(r, raw, T0)
    for i in range(3):
        submit(r, "alice", {**BODY, "time_limit": 600}, f"r{i}")       # 1-3 run (a GPU each)
    submit(r, "alice", {**BODY, "gpus": 4}, "big")                       # 4 waits for the 4 GPUs
    submit(r, "alice", {**BODY, "hold": True}, "held")                   # 5 held
    submit(r, "alice", {**BODY, "array": [0, 3, 1]}, "arr")              # 6-9: one runs, the rest wait
    s.tick(T0 + 1, woke(r))
    assert _kept(r) == _want(r) and {"1", "2", "3"} <= _want(r) and "4" not in _want(r)
    # requeued: pending again, with an attempt
    assert act(r, s, T0 + 2, "q", "requeue", ["1"])["ok"]
    finish(r, 1, 1, "cancelled", -15, T0 + 3)
    s.tick(T0 + 4)
    assert _kept(r) == _want(r) and len(_records(r)[0].attempts) == 2
    # ended: out of the set with the record
    for jid in (2, 3):
        finish(r, jid, 1, "completed", 0, T0 + 10)
    s.tick(T0 + 11)
    s.tick(T0 + 12)
    assert _kept(r) == _want(r) and not {"2", "3"} & _kept(r)
    # cancelled while pending, never ran
    assert act(r, s, T0 + 13, "c", "cancel", ["5"])["ok"]
    assert _kept(r) == _want(r)
    # the node goes: job 1 back to pending, with its attempts (and nowhere to run)
    r.hset(K.node("n1"), "hb", T0 + 14)
    r.delete(K.node_lease("n1"))
    s.tick(T0 + 100)
    s.tick(T0 + 100 + CFG.fence_margin)     # fenced: the scheduler may requeue it
    assert [(j.state, len(j.attempts)) for j in _records(r)][0] == (states.PENDING, 2)
    assert _kept(r) == _want(r) == {"1"}
    read = thin(r)
    want = sorted(int(i) for i in _want(r))
    ids, asked = _reads(read, monkeypatch)
    assert ids == want and asked == len(want), "only the records of jobs that ran are read"
    # the archive moves ended jobs: the set is unchanged
    Archiver(r, K, Archive(str(tmp_path / "a.sqlite")), keep=0).step(T0 + 500)
    assert _kept(r) == _want(r) and r.zcard(K.history) == 0
    # a new leader writes it afresh: a stale id and a missing one (as an older scheduler leaves it) go
    r.srem(K.ran, str(want[0]))
    r.sadd(K.ran, "99")
    s.store.rebuild_stat_rows(_records(r))
    assert _kept(r) == _want(r)
    assert _reads(read, monkeypatch) == (ids, len(ids))
    # Absent (an older scheduler): the `stat` rows say which ran; more ids than active jobs: likewise
    # (were the 1000s read, they would count).
    n_active = r.zcard(K.active)
    r.delete(K.ran)
    assert _reads(read, monkeypatch) == (ids, len(ids))
    s.store.rebuild_stat_rows(_records(r))
    bogus = range(1000, 1001 + n_active)
    r.sadd(K.ran, *bogus)
    assert _reads(read, monkeypatch) == (ids, len(ids))
    r.srem(K.ran, *bogus)
    # The set alone: no rows needed; neither: every active record is read.
    r.delete(K.stat_rows)
    assert _reads(read, monkeypatch) == (ids, len(ids))
    r.delete(K.ran)
    assert _reads(read, monkeypatch) == (ids, n_active) and n_active > len(ids)
