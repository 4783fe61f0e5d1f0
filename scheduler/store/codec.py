"""Job records to and from JSON. Tuples become lists on the way out and come back as tuples."""
import json
from dataclasses import MISSING, fields
from hashlib import sha256
from operator import attrgetter
from sys import intern

from ..jobs.model import Attempt, Job

_TUPLE_FIELDS = {"argv", "tags", "gpu_uuids", "commit", "rates", "deps", "retry_on", "earmark_gpus", "env", "parts",
                 "array_runs"}
_ATTEMPT_TUPLES = {"gpus", "charges", "parts"}
_JOB_FIELDS = {f.name for f in fields(Job)}
_ATTEMPT_FIELDS = {f.name for f in fields(Attempt)}


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


_JOB_NAMES = tuple(f.name for f in fields(Job) if f.name != "attempts")
JOB_NAMES = _JOB_NAMES
# Neither the exported environment nor the script is part of a record in Redis: each is stored once per
# submission (env_ref) in a key only the scheduler and the nodes may read (keys.job_env, keys.script,
# acl.NOT_READ), as either may hold the user's tokens; the record says `scripted` (issue 34).
_PRIVATE = ("env", "script")
_RECORD_NAMES = tuple(n for n in _JOB_NAMES if n not in _PRIVATE)
_ATTEMPT_NAMES = tuple(f.name for f in fields(Attempt))
_ENCODER = json.JSONEncoder(separators=(",", ":"))


SHARED_SPEC = 256   # bytes of argv beyond which an array's tasks refer to one stored copy


def shares_spec(job: Job) -> bool:
    """Does this array task's record refer to its array's stored spec (argv)? A long argv in a
    10,000-task array is then stored once, not 10,000 times (DESIGN §11: ≤ 2 KB a pending job). The
    script is never in a record: it is stored once per submission anyway (keys.script)."""
    return bool(job.array_id) and sum(len(a) for a in job.argv) > SHARED_SPEC


def env_ref(job: Job) -> int:
    """The submission a job's exported environment and script are stored under: its array's id,
    else its own."""
    return job.array_id if job.array_id is not None else job.id


def record_ref(d: dict) -> int:
    """env_ref of a decoded record."""
    return d["array_id"] if d.get("array_id") is not None else d["id"]


# The text of each environment encoded lately, with its digest: jobs from one shell share their
# environment's object (exportenv.shared), so this is a lookup, not an encode of ~40 variables (~8 µs)
# and a hash per submit.
_ENV_TEXTS: dict = {}
# A keys.job_env value that names its text's digest (keys.env_text) instead of holding the text: the
# ~1.5 KB a login shell exports is stored once per distinct environment, not once per submission
# (issue 39: 100,000 single jobs from one shell held 100,000 copies, 60 % of Redis's bytes). A value
# without it is the text itself (written before schema 3, or by hand).
ENV_BY_DIGEST = "@"


def env_json(job: Job) -> str:
    return env_stored(job)[0]


def env_stored(job: Job) -> tuple[str, str]:
    """(the JSON text of the job's exported environment, its digest: keys.env_text's name)."""
    env = job.env
    try:
        got = _ENV_TEXTS.get(env)
    except TypeError:       # not tuples (a Job built by hand with lists): encoded as it is
        text = _ENCODER.encode(env)
        return text, text_digest(text)
    if got is None:
        if len(_ENV_TEXTS) >= 256:
            del _ENV_TEXTS[next(iter(_ENV_TEXTS))]
        text = _ENCODER.encode(env)
        _ENV_TEXTS[env] = got = (text, text_digest(text))
    return got


def text_digest(text: str) -> str:
    """The name an environment's text is stored under (keys.env_text): 128 bits of its SHA-256, so
    no two texts of a lab share one. It names keys only the scheduler reads (acl.NOT_READ)."""
    return sha256(text.encode()).hexdigest()[:32]


def env_digest(raw) -> str | None:
    """The digest a keys.job_env value names, or None where it holds the text itself (or nothing)."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    return raw[1:] if raw and raw.startswith(ENV_BY_DIGEST) else None


def env_pairs(text) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs of an environment's JSON text."""
    return tuple((n, v) for n, v in json.loads(text))


def spec(job: Job) -> str:
    return _ENCODER.encode({"argv": job.argv})


# A record leaves out the fields at their default: loads() (Job(**kw)) gives them back. A pending job's
# record is ~0.3 KB instead of ~1.1 KB, so a 10,000-task array is ~3 MB for Redis to write and fsync,
# not ~11 MB, and every record the plan rewrites is a quarter of the text. A field's default is thus
# part of the record format: changing one needs a migration of the stored records (store/schema.py).
_NONE = object()
_DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING and f.name in _RECORD_NAMES}
_RECORD_VALUES = attrgetter(*_RECORD_NAMES)
_RECORD_DEFAULTS = tuple(_DEFAULTS.get(k, _NONE) for k in _RECORD_NAMES)


def dumps(job: Job, share: bool = True) -> str:
    """The record of `job` in Redis: without its script and exported environment (kept apart), and
    an array task whose argv is over SHARED_SPEC refers to its array's stored spec. Without `share`
    (the archive, which keeps no specs and no script keys: an archived record stands alone) it holds
    its argv and its script; the archive is read by the scheduler's user and admins only, and what
    it serves to clients leaves the script out (histpages.public)."""
    # dataclasses.asdict deep-copies every value; json already writes tuples as lists, so a shallow
    # dict is the same text at a fraction of the cost (this runs for every job on every change).
    # Same type as well as equal: False is not left out where the default is 0.
    # The values in one C call (attrgetter), beside their defaults: a fifth less than a getattr and
    # a dict lookup per field.
    d = {k: v for k, v, dv in zip(_RECORD_NAMES, _RECORD_VALUES(job), _RECORD_DEFAULTS)
         if v is not dv and (type(v) is not type(dv) or v != dv)}
    d["attempts"] = [{k: getattr(a, k) for k in _ATTEMPT_NAMES} for a in job.attempts]
    if job.script:
        d["scripted"] = True
        if not share:
            d["script"] = job.script
    if share and shares_spec(job):
        d.update(argv=[], spec=job.array_id)
    return _ENCODER.encode(d)


def loads(text, specs=None, scripts=None) -> Job:
    """A job from its record; `specs(array_id)` gives a shared spec ({argv}) where the record refers
    to one (without it such a job comes back with no argv); `scripts(ref)` the script kept apart
    (keys.script) of a `scripted` record (without it, `script` is None: has_script still says so)."""
    d = json.loads(text)
    ref = d.get("spec")
    if ref and specs is not None:
        d.update(specs(ref) or {})      # a spec written before issue 34 holds the script too
    if scripts is not None and d.get("scripted") and not d.get("script"):
        d["script"] = scripts(record_ref(d))
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
