"""Job records to and from JSON. Tuples become lists on the way out and come back as tuples."""
import json
from dataclasses import fields
from sys import intern

from ..model import Attempt, Job

_TUPLE_FIELDS = {"argv", "tags", "gpu_uuids", "commit", "rates", "deps", "retry_on", "env"}
_ATTEMPT_TUPLES = {"gpus", "charges"}
_JOB_FIELDS = {f.name for f in fields(Job)}
_ATTEMPT_FIELDS = {f.name for f in fields(Attempt)}


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


_JOB_NAMES = tuple(f.name for f in fields(Job) if f.name != "attempts")
JOB_NAMES = _JOB_NAMES
_ATTEMPT_NAMES = tuple(f.name for f in fields(Attempt))
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(job: Job) -> str:
    # dataclasses.asdict deep-copies every value; json already writes tuples as lists, so a shallow
    # dict is the same text at a fraction of the cost (this runs for every job on every change).
    d = {k: getattr(job, k) for k in _JOB_NAMES}
    d["attempts"] = [{k: getattr(a, k) for k in _ATTEMPT_NAMES} for a in job.attempts]
    return _ENCODER.encode(d)


def loads(text) -> Job:
    d = json.loads(text)
    return from_dict(d)


# Text that many records share (users, accounts, QoS, reasons, one array's script): interned on
# decode, so 100,000 loaded jobs hold one copy of each, not 100,000.
_SHARED = ("user", "account", "qos", "project", "budget", "workdir", "gpu_type", "node", "state", "reason", "detail",
           "name", "out", "err", "script", "earmark")


def from_dict(d: dict) -> Job:
    kw = {k: v for k, v in d.items() if k in _JOB_FIELDS}
    for k in _TUPLE_FIELDS & kw.keys():
        kw[k] = _tuples(kw[k])
    for k in _SHARED:
        v = kw.get(k)
        if type(v) is str:
            kw[k] = intern(v)
    if "argv" in kw and all(type(a) is str for a in kw["argv"]):
        kw["argv"] = tuple(map(intern, kw["argv"]))
    kw["attempts"] = tuple(_attempt(a) for a in kw.get("attempts", ()))
    return Job(**kw)


def _attempt(d: dict) -> Attempt:
    kw = {k: v for k, v in d.items() if k in _ATTEMPT_FIELDS}
    for k in _ATTEMPT_TUPLES & kw.keys():
        kw[k] = _tuples(kw[k])
    return Attempt(**kw)
