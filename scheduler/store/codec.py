"""Job records to and from JSON. Tuples become lists on the way out and come back as tuples."""
import json
from dataclasses import asdict, fields

from ..model import Attempt, Job

_TUPLE_FIELDS = {"argv", "tags", "gpu_uuids", "commit", "rates"}
_ATTEMPT_TUPLES = {"gpus", "charges"}
_JOB_FIELDS = {f.name for f in fields(Job)}
_ATTEMPT_FIELDS = {f.name for f in fields(Attempt)}


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def dumps(job: Job) -> str:
    return json.dumps(asdict(job), separators=(",", ":"))


def loads(text) -> Job:
    d = json.loads(text)
    return from_dict(d)


def from_dict(d: dict) -> Job:
    kw = {k: v for k, v in d.items() if k in _JOB_FIELDS}
    for k in _TUPLE_FIELDS & kw.keys():
        kw[k] = _tuples(kw[k])
    kw["attempts"] = tuple(_attempt(a) for a in kw.get("attempts", ()))
    return Job(**kw)


def _attempt(d: dict) -> Attempt:
    kw = {k: v for k, v in d.items() if k in _ATTEMPT_FIELDS}
    for k in _ATTEMPT_TUPLES & kw.keys():
        kw[k] = _tuples(kw[k])
    return Attempt(**kw)
