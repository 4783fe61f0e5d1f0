"""`labq prio`'s table (priotable.table, made column by column for 10,000 pending jobs) prints what the
row-by-row formatter before it printed (`_old` below: cli/prio.py as of bade641; priotable.py now): singles, runs of an
array's tasks with the same factors (one `42_[5-9]` line, each its own with -r), runs broken by a
factor, a single or another array between them, with and without the short-job column, and none."""
import random

import pytest

from labq.cli import statview
from labq.scheduler import priotable as prio, tables
from labq.scheduler.jobs.model import Job
from labq.scheduler.multifactor import Factors


def _old(shown, f, w, expand):
    short = bool(w["short_job_weight"])
    rows = []
    for j in shown:
        x = f[j.id]
        row = (j.user, j.account, j.qos, f"{x.priority:.2f}", f"{w['qos_weight'] * x.qos:.2f}",
               f"{w['age_weight'] * x.age:.2f}", f"{w['fairshare_weight'] * x.fairshare:.2f}",
               f"-{w['burst_penalty'] * x.burst:.2f}" if x.burst else "0",
               *((f"{w['short_job_weight'] * x.short:.2f}",) if short else ()))
        if (not expand and rows and rows[-1][1] == row and j.array_id is not None
                and rows[-1][0][-1].startswith(f"{j.array_id}_")):
            rows[-1][0].append(j.display_id)
        else:
            rows.append(([j.display_id], row))
    return statview.table([(", ".join(tables.compact_ids(ids)), *row) for ids, row in rows],
                          prio.HEADERS + ((prio.SHORT,) if short else ()))


def _queue(rng):
    jobs, f, jid = [], {}, 1
    for _ in range(60):
        kind = rng.choice(("single", "array", "array"))
        n = 1 if kind == "single" else rng.randrange(1, 7)
        aid = jid if kind == "array" else None
        base = Factors(0, rng.choice((0.0, 100.0, 3.0)), rng.random(), rng.choice((1.0, 0.5, 0.123456)),
                       rng.choice((0.0, 0.0, 1.0)), 0.0, rng.choice((0.0, 0.25)))
        for k in range(n):
            age = base.age if rng.random() < 0.8 else rng.random()
            x = base._replace(job_id=jid, age=age, priority=round(base.qos + age * 10 + base.fairshare * 50, 6))
            jobs.append(Job(jid, rng.choice(("alice", "bob")), rng.choice(("eta", "phi")), qos=rng.choice(("normal", "low")),
                            array_id=aid, array_index=(k * rng.choice((1, 1, 2)) if aid else None)))
            f[jid] = x
            jid += 1
    return jobs, f


@pytest.mark.parametrize("seed", range(6))
def test_the_table_prints_what_the_row_by_row_formatter_printed(seed):
    rng = random.Random(seed)
    jobs, f = _queue(rng)
    rng.shuffle(jobs) if seed % 3 == 0 else None     # an order that splits runs
    for short in (0.0, 7.0):
        w = prio.Weights(dict(qos_weight=1.5, age_weight=10.0, fairshare_weight=50.0, burst_penalty=20.0,
                              short_job_weight=short))
        for expand in (False, True):
            assert prio.table(jobs, f, w, expand) == _old(jobs, f, w, expand), (seed, short, expand)
    w = prio.Weights(dict(qos_weight=1.0, age_weight=1.0, fairshare_weight=1.0, burst_penalty=1.0, short_job_weight=0))
    assert prio.table([], {}, w, False) == _old([], {}, w, False)


@pytest.mark.parametrize("values", [[0.0, -0.0, 1.5, 0.0], [-0.0, 0.0, -0.0], [0.0, 2.0] * 50, [-0.0] * 3, [], [1.0, 1.0]])
def test_each_formats_every_value_as_fmt_does_signed_zeros_too(values):
    two = "{:.2f}".format
    assert prio.each(list(values), two) == list(map(two, values))
    burst = lambda b: f"-{20.0 * b:.2f}" if b else "0"     # noqa: E731 - _table's burst cell
    assert prio.each(list(values), burst) == list(map(burst, values))
