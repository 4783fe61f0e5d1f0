"""store/jobview.py decodes a job record into what codec.loads gives, without the job model: the same
value for every field of model.Job and model.Attempt and for each derived property, on records of
every shape (pending, running, a gang, an array task, an array_runs record, ended with attempts)."""
from dataclasses import MISSING, fields

import pytest

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.store import codec, jobview

PROPERTIES = ("display_id", "task_count", "has_script", "on_nodes", "total_gpus", "current", "cost")

RUN = Attempt(1, "n1", ("GPU-0",), start_time=10.5, dispatch_time=10.0, cost=7, charges=(("b", 3),),
              usage={"max_rss": 5})
ENDED = Attempt(2, "n2", ("GPU-1", "GPU-2"), start_time=20.0, end_time=80.0, outcome="exit", exit_code=3, cost=11,
                lost_work_s=2.5, last_checkpoint=50.0, dispatch_time=19.5,
                parts=(("n2", ("GPU-1",)), ("n3", ("GPU-2",))))
JOBS = [
    Job(1, "alice", "eta"),
    Job(2, "bob", "phi", argv=("python", "train.py"), name="t", gpus=1, cpus=4, mem=1 << 30, state=states.RUNNING,
        node="n1", gpu_uuids=("GPU-0",), start_time=10.5, commit=(("b", 9),), rates=(("b", 2),), cost_rate=5,
        attempts=(RUN,), tags=(("k", "v"),), deps=(("afterok", (1,)),), retry_on=(3, 4)),
    Job(3, "carol", "eta", nodes=2, gpus=1, state=states.FAILED, parts=(("n2", ("GPU-1",)), ("n3", ("GPU-2",))),
        exit_code=3, end_time=80.0, attempts=(RUN, ENDED), scripted=True, reason=states.PRIORITY),
    Job(9, "dan", "eta", array_id=7, array_index=2, array_count=4, held=True, reason=states.HELD),
    Job(7, "dan", "eta", array_id=7, array_runs=((3, 9, 2), (12, 12, 1)), state=states.CANCELLED),
    Job(30, "dan", "eta", array_id=27, array_index=3, array_runs=((3, 9, 2), (12, 12, 1)), state=states.CANCELLED),
    Job(11, "erin", "eta", est=60, learned_est=50, learned_basis="p75", warn_signal=("USR1", 60), deadline=99.0,
        preemptible=False, requeue=False, umask=0o077, export="ALL", preempt_count=1, borrowed=True),
]


def test_the_defaults_are_the_models():
    assert jobview.JOB_DEFAULTS == {f.name: f.default for f in fields(Job) if f.default is not MISSING}
    assert jobview.JOB_REQUIRED == tuple(f.name for f in fields(Job) if f.default is MISSING and
                                         f.default_factory is MISSING)
    assert jobview.ATTEMPT_DEFAULTS == {f.name: f.default for f in fields(Attempt) if f.default is not MISSING}
    assert jobview.ATTEMPT_REQUIRED == tuple(f.name for f in fields(Attempt) if f.default is MISSING and
                                             f.default_factory is MISSING)
    assert [f.name for f in fields(Attempt) if f.default_factory is not MISSING] == ["usage"]


def _same(view, model, names):
    """Each value equal and of the model's type; a state code or reason the model holds as a member of
    states.State or states.Reason (a StrEnum: a default's) may be the view's plain text of it (jobs/codes.py:
    equal and hashed alike, as the model's own state read from a record is), so that the views import no
    `enum` (issue 39 item 4)."""
    for name in names:
        got, want = getattr(view, name), getattr(model, name)
        kind = str if isinstance(want, (states.State, states.Reason)) and type(got) is str else type(want)
        assert (got, type(got)) == (want, kind), name


@pytest.mark.parametrize("job", JOBS, ids=lambda j: str(j.id))
def test_a_view_has_every_value_the_model_has(job):
    text = codec.dumps(job)
    model, view = codec.loads(text), jobview.loads(text)
    _same(view, model, [f.name for f in fields(Job) if f.name != "attempts"] + [p for p in PROPERTIES
                                                                                 if p != "current"])
    assert len(view.attempts) == len(model.attempts)
    for va, ma in zip(view.attempts, model.attempts):
        _same(va, ma, [f.name for f in fields(Attempt)])
    for index in range(15):     # model.Job.task_at: a task of an array_runs record (`show A_5` after `del A`)
        got, want = view.task_at(index), model.task_at(index)
        assert (got is None) == (want is None), index
        if want is not None:
            _same(got, want, [f.name for f in fields(Job) if f.name != "attempts"] + ["display_id", "task_count"])
    assert (view.current is None) == (model.current is None)
    if model.current is not None:
        _same(view.current, model.current, [f.name for f in fields(Attempt)])


def test_an_array_task_takes_its_argv_from_the_shared_spec():
    long = ("x" * (codec.SHARED_SPEC + 1),)
    job = Job(21, "dan", "eta", argv=long, array_id=20, array_index=1)
    text = codec.dumps(job)
    spec = {"argv": list(long)}
    assert jobview.loads(text, lambda a: spec if a == 20 else None).argv == codec.loads(text, lambda a: spec).argv \
        == long
    assert jobview.loads(text).argv == codec.loads(text).argv == ()


def test_the_usage_dict_is_each_attempts_own():
    """A record without `usage` (model.Attempt's default_factory): each view gets a dict of its own."""
    text = '{"id":1,"user":"u","account":"a","attempts":[{"attempt":1,"node":"n","gpus":[]}]}'
    a, b = jobview.loads(text), jobview.loads(text)
    a.attempts[0].usage["x"] = 1
    assert b.attempts[0].usage == {} == codec.loads(text).attempts[0].usage


def test_a_replaced_view_is_a_copy_with_the_changes():
    """privateview.with_script gives `labq show --json` its owner's script so."""
    view = jobview.loads(codec.dumps(JOBS[2]))
    got = view.replaced(script="#!/bin/sh\n")
    assert (got.script, got.id, got.attempts, got.has_script) == ("#!/bin/sh\n", 3, view.attempts, True)
    assert view.script is None


def test_many_records_decode_at_once_to_what_each_gives_and_keep_only_their_own_fields():
    """loads_many (one json.loads for a chunk: `labq prio` at 10,000 pending) gives loads' views; a view
    holds what its record says, the defaults are the class's (not ~75 copied into each of 10,000)."""
    texts = [codec.dumps(j) for j in JOBS]
    many, one = jobview.loads_many(texts), [jobview.loads(t) for t in texts]
    names = [f.name for f in fields(Job) if f.name != "attempts"] + [p for p in PROPERTIES if p != "current"]
    for a, b in zip(many, one, strict=True):
        _same(a, b, names)
    assert jobview.loads_many([]) == []
    assert set(vars(many[0])) == {"id", "user", "account", "attempts"}, "a pending job's view: its record's fields"
