"""jobspec.expand: an array's tasks are the template with id, array_index and the array's numbers
set, and nothing else changed (the tasks after the first are built slot by slot, not by Job())."""
from dataclasses import fields, replace

from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.jobspec import expand
from labq.scheduler.jobs.model import Job


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10**6), st.integers(0, 50), st.integers(1, 60), st.integers(1, 3), st.none() | st.integers(1, 9),
       st.sampled_from([("true",), ("python", "train.py")]), st.booleans(), st.integers(0, 8))
def test_tasks_are_the_template_with_their_numbers(first, lo, n, step, throttle, argv, held, gpus):
    template = Job(id=0, user="ann", account="x", name="t", argv=argv, held=held, gpus=gpus, tags=("a",))
    indices = list(range(lo, lo + n * step, step))
    got = expand(template, first, indices, throttle)
    want = [replace(template, id=first + i, array_id=first, array_index=ix, array_count=n, array_throttle=throttle)
            for i, ix in enumerate(indices)]
    assert got == want
    assert all(getattr(g, f.name) is not None or getattr(w, f.name) is None
               for g, w in zip(got, want) for f in fields(Job))


def test_a_plain_job_and_an_empty_range():
    template = Job(id=0, user="ann", account="x", name="t", argv=("true",))
    assert expand(template, 7, None) == [replace(template, id=7)]
    assert expand(template, 7, []) == []


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["reason", "detail", "earmark", "held", "state", "name", "attempts", "earmark_gpus"]),
       st.integers(0, 3), st.booleans())
def test_evolve_is_replace(name, v, arr):
    """model.evolve (slots copied by their descriptors) gives the Job dataclasses.replace gives."""
    import pytest

    from labq.scheduler.jobs import states
    from labq.scheduler.jobs.model import evolve
    base = Job(id=9, user="ann", account="x", name="t", argv=("a",), tags=(("k", "v"),), array_id=9 if arr else None,
               array_index=0 if arr else None)
    value = {"reason": states.PRIORITY, "detail": "d" * v, "earmark": "n1", "held": bool(v % 2), "state": states.HELD,
             "name": str(v), "attempts": (), "earmark_gpus": tuple(f"G{i}" for i in range(v))}[name]
    got, want = evolve(base, **{name: value}), replace(base, **{name: value})
    assert got == want and all(getattr(got, f.name) is getattr(want, f.name) for f in fields(Job))
    assert evolve(base) == base and evolve(base) is not base
    with pytest.raises(TypeError):
        evolve(base, no_such_field=1)
