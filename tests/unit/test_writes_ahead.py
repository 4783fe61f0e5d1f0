"""writes._encoded_runs: the RESP of each record and stat row written ahead of a big array's transaction
is byte for byte what encoding each job on its own gives, whether its run was cut from one template
(ids and indices spliced in) or encoded task by task."""
from dataclasses import replace

import pytest
from hypothesis import example, given, settings, strategies as st

from labq.scheduler.jobs import states
from labq.scheduler.jobs.jobspec import expand
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.store import codec, statrows, writes
from labq.scheduler.store.keys import Keys
from tests.harness import assert_spliced

K = Keys("labq")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**9), st.integers(1, 40), st.sampled_from([1, 3]), st.text(max_size=12),
       st.lists(st.sampled_from(["held", "started", "name", "plain"]), max_size=4))
def test_each_record_is_what_encoding_the_job_alone_gives(first, n, step, name, changes):
    base = Job(id=0, user="ann", account="x", name=name or "t", argv=("python", "ü.py"), array_id=first,
               array_count=n, submit_time=1.5)
    jobs = [replace(base, id=first + i, array_index=i * step) for i in range(n)]
    for c, at in zip(changes, range(0, n, 3)):
        j = jobs[at]
        jobs[at] = {"held": replace(j, held=True, reason=states.HELD),
                    "started": replace(j, attempts=(Attempt(1, "n", (), start_time=2.0),)),
                    "name": replace(j, name="-7777777771"),      # a stand-in's digits in the text itself
                    "plain": replace(j, array_id=None, array_index=None)}[c]
    got = list(writes._encoded(K, jobs))
    assert [g[0] for g in got] == [j.id for j in jobs]
    for (jid, rec, row), j in zip(got, jobs):
        assert rec == writes._bulk2(K.job(j.id), codec.dumps(j))
        assert row == writes._bulk2(str(j.id), statrows.dumps(j))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**9), st.integers(1, 60), st.sampled_from([1, 3, 7]), st.integers(0, 12),
       st.lists(st.tuples(st.integers(0, 59), st.sampled_from(["held", "started", "name", "copy", "plain"])),
                max_size=5),
       st.booleans(), st.integers(1, 50))
def test_runs_are_the_records_one_by_one(first, n, step, lo, changes, made, run_max):
    """_encoded_runs (runs spliced from a template, with or without expand's tasks to recognise by
    identity) gives the ids, records and rows that encoding each job on its own gives, whatever the
    batch did to some tasks after expand (replaced, restarted, renamed, or an equal copy)."""
    template = Job(id=0, user="ann", account="x", name="t", argv=("python", "ü.py"), submit_time=1.5)
    tasks = expand(template, first, list(range(lo, lo + n * step, step)))
    jobs = list(tasks)
    for at, c in changes:
        if at < n:
            j = jobs[at]
            jobs[at] = {"held": replace(j, held=True, reason=states.HELD),
                        "started": replace(j, attempts=(Attempt(1, "n", (), start_time=2.0),)),
                        "name": replace(j, name="-7777777771"),
                        "copy": replace(j),          # equal, but not expand's object
                        "plain": replace(j, array_id=None, array_index=None)}[c]
    mp = pytest.MonkeyPatch()
    mp.setattr(writes, "RUN_MAX", run_max)
    try:
        runs = list(writes._encoded_runs(K, jobs, {first: tasks} if made else None))
    finally:
        mp.undo()
    assert [i for ids, _, _ in runs for i in ids] == [j.id for j in jobs]
    assert b"".join(rec for _, rec, _ in runs) == b"".join(writes._bulk2(K.job(j.id), codec.dumps(j)) for j in jobs)
    assert b"".join(row for _, _, row in runs) == b"".join(writes._bulk2(str(j.id), statrows.dumps(j)) for j in jobs)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 40), st.sampled_from([1, 3]), st.integers(0, 12),
       st.lists(st.tuples(st.integers(0, 39), st.sampled_from(["reason", "started", "name", "plain", "ended"])),
                max_size=6), st.booleans())
@example(1, 2, 1, 0, [(0, "ended"), (1, "ended")], False)     # a run of ended tasks: acct rows (seen in CI)
def test_texts_of_a_batch_are_each_jobs_own(first, n, step, lo, changes, plain_first):
    """splice.texts (put_jobs' records and rows, runs of alike array tasks spliced from one template)
    gives each job the record codec.dumps gives and, where it gives one, the row statrows.dumps gives (an
    ended job: the acct row acctrows.redis_row gives)."""
    template = Job(id=0, user="ann", account="x", name="t", argv=("python", "ü.py"), submit_time=1.5)
    jobs = [replace(j, reason=states.PRIORITY, detail="higher-priority jobs took the free resources")
            for j in expand(template, first, list(range(lo, lo + n * step, step)))]
    for at, c in changes:
        if at < n:
            j = jobs[at]
            jobs[at] = {"reason": replace(j, reason=states.RESOURCES),
                        "started": replace(j, attempts=(Attempt(1, "n", (), start_time=2.0),)),
                        "name": replace(j, name="-7777777772"),
                        "plain": replace(j, array_id=None, array_index=None),
                        "ended": replace(j, state=states.CANCELLED, end_time=3.0)}[c]
    if plain_first:
        jobs.insert(0, replace(template, id=first - 1))
    assert_spliced(jobs)
