"""`labq report` from the totals the scheduler keeps (store/totals.py, money/totals.py) prints what the
full computation over every record prints (report.by over acct_rows and ran()), to the byte, over
random histories on a real redis-server: jobs ended within one hour and across hours (split), jobs
without attempts, usage and preemption, records rewritten after their end, partly folded, archived
(their part taken out), a new leader's rebuild, and windows with and without partial hours; and the
keys are not trusted once another leader leads."""
import json
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from labq.cli import report as report_cli
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.money import report as rep, totals as tot
from labq.scheduler.store import resp, totals, writes
from labq.scheduler.store.thinreads import ThinReader
from tests.harness import K, ended_job

T0 = 1_800_000_000.0          # on an hour's edge
LEADER = "sched:1:a"
KEYS = (("account",), ("user",), ("status",), ("account", "user"), ("qos", "project", "status"),
        ("user", "account", "qos"))


def _job(rng, jid: int) -> Job:
    """An ended job near T0: most attempts within one hour, some across hours (split), some without."""
    if rng.random() < 0.2:
        j = ended_job(rng, jid)       # spread over months, runs up to days: mostly split
        return replace(j, qos=rng.choice(("normal", "high")), project=rng.choice((None, "p1", "p2")))
    end = T0 + rng.uniform(0, 30 * 3600)
    atts, t = [], end
    for n in reversed(range(rng.choice((0, 1, 1, 1, 2, 3)))):
        run = rng.choice((0, 1, 59, rng.uniform(1, 900), rng.uniform(1, 5000)))
        last = not atts
        usage = rng.choice((None, {"gpu_idle_s": rng.uniform(0, run)}, {"gpu_util_mean": rng.uniform(0, 100)},
                            {"gpu_idle_s": 0.0, "gpu_util_mean": 37.25}))
        atts.insert(0, Attempt(n + 1, f"n{rng.randrange(3)}", tuple(f"GPU-{g}" for g in range(rng.choice((0, 1, 2)))),
                               start_time=t - run, dispatch_time=t - run - rng.choice((0, 0.5)), end_time=t,
                               outcome=rng.choice(("completed", "exit", "oom")) if last else "preempted",
                               lost_work_s=0.0 if last else rng.uniform(0, run), usage=usage,
                               cost=rng.randrange(10 ** 8)))
        t -= run + rng.uniform(0, 300)
    state = rng.choice((states.COMPLETED, states.COMPLETED, states.FAILED, states.CANCELLED, states.TIMEOUT))
    return Job(id=jid, user=rng.choice(("alice", "bob", "carol")), account=rng.choice(("eta", "theta", "")),
               qos=rng.choice(("normal", "high")), project=rng.choice((None, "p1", "p2")), gpus=rng.choice((0, 1, 2)),
               cpus=rng.randrange(1, 9), state=state, attempts=tuple(atts), end_time=end,
               start_time=atts[0].start_time if atts else None, submit_time=T0 - 86_400)


def _txn(r):
    def txn(build):
        p = r.pipeline(transaction=True)
        build(p)
        p.execute()
    return txn


def _both(read, lo, hi, keys):
    """(full, kept): report.by over every record, as cli/report.py reads them without the totals, and
    over its reads with them (None where it would not use them)."""
    full = rep.by(read.acct_rows(lo, views=True) + read.ran(), keys, {}, lo, hi)
    kept = report_cli._kept(SimpleNamespace(read=read), keys, lo, hi)
    return full, None if kept is None else rep.by(kept[1], keys, {}, lo, hi, kept[0])


def _windows(rng):
    yield 0, float("inf")
    yield T0, float("inf")
    yield 0, T0 + rng.uniform(0, 30 * 3600)         # all before --until: cells, not the all-hours sums
    yield 1.0, float("inf")                          # since a second after the epoch: cells too
    for _ in range(6):
        lo = T0 + rng.choice((0, 3600 * rng.randrange(30), rng.uniform(-3600, 30 * 3600)))
        yield lo, rng.choice((float("inf"), lo + rng.uniform(3600, 20 * 3600), lo + 7200 * rng.randrange(1, 10)))


@pytest.mark.redis
@pytest.mark.parametrize("seed", range(4))
def test_totals_print_what_every_record_gives(redis_server, seed, monkeypatch):
    monkeypatch.setattr(totals, "FOLD", 37)      # folds in batches (HSCAN), some left waiting
    r = redis_server.client()
    r.flushall()
    rng = random.Random(seed)
    conn = resp.Connection(redis_server.url)
    read = ThinReader(conn, K, lambda e: AssertionError(e))
    r.set(K.leader, LEADER)
    p = r.pipeline(transaction=False)
    totals.rebuild(p, K, [], LEADER)
    p.execute()
    jobs = {i: _job(rng, i) for i in range(1, 301)}
    archived: set[int] = set()
    compared = 0
    for step in range(12):
        batch = rng.sample(sorted(set(jobs) - archived), 40)
        if step % 4 == 1:     # records rewritten after their end (a late usage report)
            for i in batch[:10]:
                j = jobs[i]
                if j.attempts:
                    jobs[i] = replace(j, attempts=j.attempts[:-1] + (replace(j.attempts[-1], cost=j.attempts[-1].cost + 7,
                                      usage={"gpu_util_mean": 50.5}),))
        p = r.pipeline(transaction=False)
        writes.put_jobs(p, K, [jobs[i] for i in batch])
        p.execute()
        if step % 3 == 0:
            totals.fold(r, K, _txn(r), lambda ids: [jobs[int(i)] for i in ids if r.exists(K.job(i))])
        if step == 7:     # the archiver's pass: records gone, their part taken out of the cells
            gone = [str(i) for i in rng.sample(sorted(int(i) for i in r.zrange(K.history, 0, -1)), 30)]
            p = r.pipeline(transaction=True)
            totals.drop(r, K, p, gone)
            p.delete(*(K.job(int(i)) for i in gone))
            p.zrem(K.history, *gone)
            p.hdel(K.acct_rows, *gone)
            p.execute()
            archived |= {int(i) for i in gone}
        if step == 9:     # a new leader: every ended job folded again from its record
            p = r.pipeline(transaction=True)
            totals.rebuild(p, K, r.zrange(K.history, 0, -1), LEADER)
            p.execute()
            totals.fold(r, K, _txn(r), lambda ids: [jobs[int(i)] for i in ids])
        for lo, hi in _windows(rng):
            keys = rng.choice(KEYS)
            full, fast = _both(read, lo, hi, keys)
            if hi - lo >= 2 * tot.HOUR:
                assert fast is not None
            if fast is not None:
                assert json.dumps(fast) == json.dumps(full), (step, lo, hi, keys)
                compared += 1
    while totals.fold(r, K, _txn(r), lambda ids: [jobs[int(i)] for i in ids]):
        pass
    assert not r.hlen(K.report_new)
    full, fast = _both(read, 0, float("inf"), ("account",))
    assert json.dumps(fast) == json.dumps(full) and full
    # Only whole hours' cells and the few records they leave out are read.
    cells, ids, _ = totals.read(read, T0, float("inf"))
    assert ids == [] and cells     # no edges, nothing unfolded: no record read
    assert compared > 50
    # Another leader leads (an older labq after a downgrade: it keeps no totals): not trusted.
    r.set(K.leader, "sched:2:b")
    assert totals.read(read, 0, float("inf")) is None


def test_contribution_is_the_rows_sums():
    """A job's kept part is report.Row's sums over its ended attempts; across hours it is split."""
    a = Attempt(1, "n1", ("GPU-0",), dispatch_time=T0 + 10, start_time=T0 + 11, end_time=T0 + 100.5,
                outcome="completed", cost=2_500_000, usage={"gpu_util_mean": 40.0})
    j = Job(id=7, user="u", account="acc", gpus=1, cpus=2, state=states.COMPLETED, attempts=(a,), end_time=T0 + 100.5)
    cell, vec = tot.parse(tot.contribution(j, T0 + 100.5))
    assert json.loads(cell) == [int(T0 // 3600), "acc", "u", j.qos, j.project, states.COMPLETED]
    assert vec[:4] == [1, 1, 1, 1] and vec[4] == 90_500_000 and vec[5] == 2 * 90_500_000 and vec[6] == 2_500_000
    early = replace(a, attempt=1, end_time=T0 - 5, outcome="preempted")
    text = tot.contribution(replace(j, attempts=(early, replace(a, attempt=2))), T0 + 100.5)
    h = int(T0 // 3600)
    # split: its dims, completed and ended, then per hour of its attempts their sums (no job count)
    assert text.split("\t")[1:] == ['["acc","u","normal","","CD"]', "1 1", f"{h - 1} 1 0 0 2500000 0 0 0 0 0 0",
                                    f"{h} 1 90500000 181000000 2500000 0 0 0 0 90500000 3620000000000000"]
    assert tot.split(text, h, None, ()) == ('"acc","u","normal","","CD"', [1, 1, 1, *map(int, text.split("\t")[4].split()[1:])])
    assert tot.split(text, h - 1, h + 1, (h - 2,))[1][3] == 2 and tot.split(text, h - 1, None, (h,)) == "raw"
    assert tot.split(text, h + 1, None, (h,)) == "raw" and tot.split(text, h + 1, None, ()) is None
    assert tot.contribution(replace(j, attempts=()), T0) == ""
