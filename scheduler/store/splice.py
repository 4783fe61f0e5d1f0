"""A group commit's job texts (records and `stat` rows) spliced from one encoding where jobs are alike
but for a number or two (store/writes.py writes them): an array's tasks (id, index) and single jobs
submitted from one shell (id, submit time). Each spliced text is exactly what codec.dumps and
statrows.dumps (acctrows.redis_row, ended) give the job (tests/unit/test_writes_ahead.py,
test_single_splice.py)."""
from dataclasses import replace
from operator import attrgetter, is_

from ..jobs import states
from . import acctrows, codec, statrows

ID, INDEX = -7_777_777_771, -7_777_777_772     # stand-ins, replaced in the encoded text
ALIKE = attrgetter(*(n for n in codec.JOB_NAMES if n not in ("id", "array_index")))
TS = -7_777_777_773.25          # a single job's submit time, stood in (_singles)
_SINGLE = attrgetter(*(n for n in codec.JOB_NAMES if n not in ("id", "submit_time")))


def cut(text: str, second: object = None):
    """`text` (of a job with the stand-ins) as bytes cut around them: (before id, between, after),
    or None unless each stand-in occurs once, the id's first. `second`: the stand-in after the id
    (default: the array index's; TS for a single job's submit time), as repr() writes it."""
    t, i, x = text.encode(), str(ID).encode(), repr(INDEX if second is None else second).encode()
    if t.count(i) != 1 or t.count(x) != 1 or t.index(i) > t.index(x):
        return None
    a, rest = t.split(i)
    b, c = rest.split(x)
    return a, b, c, len(a) + len(b) + len(c)


def texts(jobs):
    """(job, record, row or None) of each job, in order: what codec.dumps and statrows.dumps give (as
    bytes where spliced; for an ended job, acctrows.redis_row's in place of statrows.dumps's). Runs of array tasks alike but for id and index (a pass giving a
    10,000-task array a new reason, twice: `Priority` while others start, then `Resources`) are
    encoded once with stand-ins and each task's texts spliced from the pieces, as _encoded_runs does:
    encoding every record and row was a quarter of such a pass."""
    jobs = list(jobs)
    i, n = 0, len(jobs)
    while i < n:
        job, j = jobs[i], i + 1
        if job.array_id is not None and not job.attempts:
            same = ALIKE(job)
            while j < n and not jobs[j].attempts and ALIKE(jobs[j]) == same:
                j += 1
        elif not job.attempts and _splices_time(job):
            # Single jobs alike but for id and submit time: a group commit of submits from one shell
            # (jobspec.job_from_submit's copies share every other value). Encoding each record and row
            # was ~15 us of the scheduler's ~100 per request (issue 39).
            # The very same values (not merely equal: True == 1, but their texts differ).
            same = _SINGLE(job)
            while j < n and not jobs[j].attempts and _splices_time(jobs[j]) and all(map(is_, _SINGLE(jobs[j]), same)):
                j += 1
            if j - i > 1:
                yield from _singles(jobs[i:j])
                i = j
                continue
        if j - i > 1:
            stand = replace(job, id=ID, array_index=INDEX)
            # A run is alike but for id and index: one state. An ended run (a pending array
            # cancelled) gets its acct rows spliced alike, in place of the stat rows it has no use for.
            of = statrows.dumps if job.state in states.ACTIVE else acctrows.redis_row
            rec, row = cut(codec.dumps(stand)), cut(of(stand))
            if rec is not None and row is not None:
                (ra, rb, rc, _), (wa, wb, wc, _) = rec, row
                join = b"".join
                for x in jobs[i:j]:
                    ib, xb = b"%d" % x.id, b"%d" % x.array_index
                    yield x, join((ra, ib, rb, xb, rc)), join((wa, ib, wb, xb, wc))
                i = j
                continue
        for x in jobs[i:j]:
            yield x, codec.dumps(x), None
        i = j


def _splices_time(job) -> bool:
    """Whether a single job's submit time may be spliced into its texts: a float that is written
    (a record leaves out a field at its default, 0.0)."""
    return job.array_id is None and type(job.submit_time) is float and job.submit_time != 0.0


def _singles(run):
    """texts of a run of single jobs alike but for id and submit time: encoded once with stand-ins,
    each job's texts spliced (the stand-ins' texts must each occur once, else each is encoded)."""
    job = run[0]
    stand = replace(job, id=ID, submit_time=TS)
    of = statrows.dumps if job.state in states.ACTIVE else acctrows.redis_row
    rec, row = cut(codec.dumps(stand), TS), cut(of(stand), TS)
    if rec is None or row is None:
        for x in run:
            yield x, codec.dumps(x), None
        return
    (ra, rb, rc, _), (wa, wb, wc, _) = rec, row
    join = b"".join
    for x in run:
        ib, tb = b"%d" % x.id, repr(x.submit_time).encode()
        yield x, join((ra, ib, rb, tb, rc)), join((wa, ib, wb, tb, wc))
