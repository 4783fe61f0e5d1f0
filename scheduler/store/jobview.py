"""Job records as read-only views, for the thin client's rare commands (`labq nodes`, `share`, `show`):
the same attributes and derived properties as model.Job and model.Attempt, decoded without the model.

Importing the model costs ~14 ms of CPU (dataclasses, and the dataclass decorator building Job's ~75
fields), more than half of what `labq sub` costs in all: issue 39 item 4 wants a rare command to cost
no more than 1.5 times `sub`. A view is what codec.loads would give (a record leaves out the fields at
their default: they come from the tables below), minus the interning; it cannot be changed, and
nothing passes it to the scheduler, dataclasses.replace or the policy.

JOB_DEFAULTS and ATTEMPT_DEFAULTS are model.Job's and model.Attempt's defaults, and the properties
model's: tests/unit/test_jobview.py holds each equal to the model's on the same records.
"""
from ..cjson import loads as _loads  # json.loads's values without `json`, `re` and `enum` (cjson.py)
from ..jobs import arrayid, codes

JOB_REQUIRED = ("id", "user", "account")
JOB_DEFAULTS = {
    "argv": (), "script": None, "name": "", "project": "", "qos": "normal", "budget": "", "workdir": "/",
    "gpus": 0, "gpu_type": "", "cpus": 1, "mem": 0, "nodes": 1, "time_limit": 0, "est": None,
    "learned_est": None, "learned_basis": "", "max_wait": None, "out": "", "err": "", "warn_signal": None,
    "checkpoint_exit_code": None, "tags": (), "array_id": None, "array_index": None, "array_count": None,
    "array_throttle": None, "array_runs": (), "submit_time": 0.0, "request_id": "", "mem_limit": 0,
    "deadline": None, "deps": (), "kill_on_invalid_dep": False, "preemptible": None, "requeue": True, "retries": 0,
    "retry_on": (), "requeue_on_timeout": False, "export": "NONE", "umask": 0o022, "env": (), "scripted": False,
    "state": codes.PENDING, "reason": "None", "detail": "", "restart_count": 0, "held": False, "begin": None,
    "cancel_requested": False, "requeue_requested": False, "retries_used": 0, "eligible_time": None,
    "preempt_count": 0, "preempted_for": None, "preempt_time": None, "borrowed": False, "earmark": "",
    "earmark_gpus": (), "node": "", "gpu_uuids": (), "parts": (), "start_time": None, "end_time": None,
    "exit_code": None, "commit": (), "rates": (), "cost_rate": 0, "attempts": (),
}
ATTEMPT_REQUIRED = ("attempt", "node", "gpus")
ATTEMPT_DEFAULTS = {
    "start_time": None, "end_time": None, "outcome": None, "exit_code": None, "cost": 0, "charges": (),
    "lost_work_s": 0.0, "last_checkpoint": None, "dispatch_time": None, "parts": (),
}
# codec._TUPLE_FIELDS and codec._ATTEMPT_TUPLES: lists in JSON, tuples in a record
_JOB_TUPLES = frozenset({"argv", "tags", "gpu_uuids", "commit", "rates", "deps", "retry_on", "earmark_gpus", "env",
                         "parts", "array_runs"})
_ATTEMPT_TUPLES = frozenset({"gpus", "charges", "parts"})
_JOB_FIELDS = frozenset(JOB_REQUIRED) | JOB_DEFAULTS.keys()
_ATTEMPT_FIELDS = frozenset(ATTEMPT_REQUIRED) | ATTEMPT_DEFAULTS.keys() | {"usage"}


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


# A view's own __dict__ holds what its record says; the defaults are class attributes (set below: all
# immutable, so shared), not copied into each view: ~75 of them per view were a third of decoding
# `labq prio`'s 10,000 pending jobs.
class AttemptView:
    def __init__(self, d: dict):
        self.usage = {}             # model.Attempt's default_factory=dict: each attempt's own
        self.__dict__.update((k, _tuples(v) if k in _ATTEMPT_TUPLES else v) for k, v in d.items()
                             if k in _ATTEMPT_FIELDS)


class JobView:
    def __init__(self, d: dict):
        own = {k: v for k, v in d.items() if k in _JOB_FIELDS}
        for k in _JOB_TUPLES.intersection(own):
            own[k] = _tuples(own[k])
        own["attempts"] = tuple(AttemptView(a) for a in own.get("attempts", ()))
        self.__dict__.update(own)

    def replaced(self, **changes) -> "JobView":
        """A copy with `changes` (dataclasses.replace's part for a view: privateview.with_script)."""
        out = object.__new__(JobView)
        out.__dict__.update(self.__dict__, **changes)
        return out

    # model.Job's properties, the same rules
    @property
    def display_id(self) -> str:
        return arrayid.display_id(self.id, self.array_id, self.array_index, self.array_runs)

    @property
    def task_count(self) -> int:
        return arrayid.task_count(self.array_runs)

    def task_at(self, index: int):
        """model.Job.task_at: task `index` of the tasks this array_runs record stands for, a view."""
        first = self.array_index
        if first is None:
            return None
        for lo, hi, step in self.array_runs:
            if lo <= index <= hi and not (index - lo) % step:
                return self.replaced(id=self.id + (index - first) // step, array_index=index, array_runs=())
        return None

    @property
    def has_script(self) -> bool:
        return self.scripted or bool(self.script)

    @property
    def on_nodes(self) -> tuple:
        return self.parts or ((self.node, self.gpu_uuids),)

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes

    @property
    def current(self):
        return self.attempts[-1] if self.attempts else None

    @property
    def cost(self) -> int:
        return sum(a.cost for a in self.attempts)


for _k, _v in JOB_DEFAULTS.items():
    assert not hasattr(JobView, _k), _k       # a default must not hide a property or a method
    setattr(JobView, _k, _v)
for _k, _v in ATTEMPT_DEFAULTS.items():
    setattr(AttemptView, _k, _v)


def loads(text, specs=None) -> JobView:
    """codec.loads's job as a view; `specs(array_id)` as there (an array's shared argv)."""
    return _view(_loads(text), specs)


def loads_many(texts, specs=None) -> list[JobView]:
    """loads() of each text, the JSON decoded in one call (a third less than a call per record)."""
    return [_view(d, specs) for d in _loads("[" + ",".join(texts) + "]")] if texts else []


def _view(d: dict, specs) -> JobView:
    ref = d.get("spec")
    if ref and specs is not None:
        d.update(specs(ref) or {})
    return JobView(d)
