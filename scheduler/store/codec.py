"""Job records to and from JSON. Tuples become lists on the way out and come back as tuples."""
import json
from dataclasses import MISSING, fields
from operator import attrgetter
from sys import intern

from ..model import Attempt, Job

_TUPLE_FIELDS = {"argv", "tags", "gpu_uuids", "commit", "rates", "deps", "retry_on", "earmark_gpus", "env", "parts"}
_ATTEMPT_TUPLES = {"gpus", "charges", "parts"}
_JOB_FIELDS = {f.name for f in fields(Job)}
_ATTEMPT_FIELDS = {f.name for f in fields(Attempt)}


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


_JOB_NAMES = tuple(f.name for f in fields(Job) if f.name != "attempts")
JOB_NAMES = _JOB_NAMES
# The exported environment is not part of the record: it is stored once per submission in a key only
# the scheduler and the nodes may read (keys.job_env, acl.NOT_READ), as it may hold the user's tokens.
_RECORD_NAMES = tuple(n for n in _JOB_NAMES if n != "env")
_ATTEMPT_NAMES = tuple(f.name for f in fields(Attempt))
_ENCODER = json.JSONEncoder(separators=(",", ":"))


SHARED_SPEC = 256   # bytes of script + argv beyond which an array's tasks refer to one stored copy


def shares_spec(job: Job) -> bool:
    """Does this array task's record refer to its array's stored spec (script, argv)? A 1 MB script
    in a 10,000-task array is then stored once, not 10,000 times (DESIGN §11: ≤ 2 KB a pending job)."""
    return bool(job.array_id) and len(job.script or "") + sum(len(a) for a in job.argv) > SHARED_SPEC


def env_ref(job: Job) -> int:
    """The submission a job's exported environment is stored under: its array's id, else its own."""
    return job.array_id if job.array_id is not None else job.id


def env_json(job: Job) -> str:
    return _ENCODER.encode(job.env)


def spec(job: Job) -> str:
    return _ENCODER.encode({"script": job.script, "argv": job.argv})


# A record leaves out the fields at their default: loads() (Job(**kw)) gives them back. A pending job's
# record is ~0.3 KB instead of ~1.1 KB, so a 10,000-task array is ~3 MB for Redis to write and fsync,
# not ~11 MB, and every record the plan rewrites is a quarter of the text. A field's default is thus
# part of the record format: changing one needs a migration of the stored records (store/schema.py).
_NONE = object()
_DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING and f.name in _RECORD_NAMES}
_RECORD_VALUES = attrgetter(*_RECORD_NAMES)
_RECORD_DEFAULTS = tuple(_DEFAULTS.get(k, _NONE) for k in _RECORD_NAMES)


def dumps(job: Job, share: bool = True) -> str:
    """The record of `job`; with `share`, an array task whose script is over SHARED_SPEC refers to
    its array's stored spec instead of holding it (Redis); without, it holds it (the archive, which
    keeps no specs: an archived record stands alone, whoever reads it and however)."""
    # dataclasses.asdict deep-copies every value; json already writes tuples as lists, so a shallow
    # dict is the same text at a fraction of the cost (this runs for every job on every change).
    # Same type as well as equal: False is not left out where the default is 0.
    # The values in one C call (attrgetter), beside their defaults: a fifth less than a getattr and
    # a dict lookup per field.
    d = {k: v for k, v, dv in zip(_RECORD_NAMES, _RECORD_VALUES(job), _RECORD_DEFAULTS)
         if v is not dv and (type(v) is not type(dv) or v != dv)}
    d["attempts"] = [{k: getattr(a, k) for k in _ATTEMPT_NAMES} for a in job.attempts]
    if share and shares_spec(job):
        d.update(script=None, argv=[], spec=job.array_id)
    return _ENCODER.encode(d)


def loads(text, specs=None) -> Job:
    """A job from its record; `specs(array_id)` gives a shared spec ({script, argv}) where the
    record refers to one (without it such a job comes back with no script and no argv)."""
    d = json.loads(text)
    ref = d.get("spec")
    if ref and specs is not None:
        d.update(specs(ref) or {})
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
