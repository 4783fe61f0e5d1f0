"""splice.texts splices runs of single jobs alike but for id and submit time (a group commit of submits
from one shell, jobspec.job_from_submit's copies) from one encoding with stand-ins (issue 39): each
job's record and row are exactly what codec.dumps and statrows.dumps (acctrows.redis_row when ended)
give it, whatever else differs in the run."""
from dataclasses import replace

from hypothesis import example, given, settings, strategies as st

from labq.scheduler.jobs import jobspec, states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.store import codec, splice
from tests.harness import assert_spliced

TEMPLATE = Job(id=0, user="ann", account="x", name="t", argv=("python", "ü.py"), submit_time=1.5, held=True,
               reason=states.HELD, detail=jobspec.HELD_DETAIL, env=(("A", "1"),))


def _copy(job: Job, jid: int, at) -> Job:
    """A job as a cached submit makes it: the same values but id and submit time."""
    return replace(job, id=jid, submit_time=at)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10**9), st.lists(st.sampled_from([1e9 + 0.5, 1.7e9, 2.0, 123456789.123456, 0.0, 7]),
                                        min_size=1, max_size=12),
       st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["name", "started", "ended", "equal", "array",
                                                                 "stand-in", "true"])), max_size=5))
@example(1, [1.5, 2.5], [(1, "true")])
@example(9, [1.5, 2.5, 3.5], [(1, "stand-in")])
def test_runs_of_alike_single_jobs_get_each_jobs_own_texts(first, times, changes):
    jobs = [_copy(TEMPLATE, first + i, t) for i, t in enumerate(times)]
    for at, c in changes:
        if at < len(jobs):
            j = jobs[at]
            jobs[at] = {"name": replace(j, name="other"),
                        "started": replace(j, attempts=(Attempt(1, "n", (), start_time=2.0),)),
                        "ended": replace(j, state=states.CANCELLED, end_time=3.0),
                        "equal": replace(j, argv=tuple(list(j.argv))),          # equal, not the same object
                        "array": replace(j, array_id=j.id, array_index=0, array_count=1),
                        "stand-in": replace(j, name=repr(splice.TS)),
                        "true": replace(j, cpus=True)}[c]                        # True == 1, its text is not
    assert_spliced(jobs)


def test_a_group_commit_of_copies_encodes_once(monkeypatch):
    """Failed before: each of the 50 copies was encoded on its own (50 codec.dumps)."""
    calls = []
    real = codec.dumps
    monkeypatch.setattr(codec, "dumps", lambda job, *a: calls.append(job.id) or real(job, *a))
    jobs = [_copy(TEMPLATE, 100 + i, 1.7e9 + i) for i in range(50)]
    got = list(splice.texts(jobs))
    assert calls == [splice.ID]
    assert [rec for _, rec, _ in got] == [real(j).encode() for j in jobs]
