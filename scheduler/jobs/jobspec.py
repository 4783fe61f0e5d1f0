"""Submit requests → job records, validated field by field. Requests come from an inbox anyone can
write, so nothing here trusts its input: each bad field is a UsageError naming the field."""
from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import replace
from itertools import repeat
from operator import call
from sys import intern

from ..errors import UsageError
from . import bounds, exportenv, states
from .model import DEPENDENCY_KINDS, JOB_SETTERS, JOB_VALUES, Job

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: `labq show`/`wait`/`logs` resolve ids here without the config (~20 ms)
    from collections.abc import Callable, Iterable
    from typing import Any

    from ..settings.config import Config

    Body = dict[str, Any]                          # a submit request's body, as decoded (untrusted)
    Lookup = Callable[[str], list[int]]            # the ids a dependency's text names (handlers.dep_ids)
    Deps = tuple[tuple[str, tuple[int, ...]], ...]

HELD_DETAIL = "held (labq release ID to let it run)"     # plan()'s detail for a held job (a test keeps them equal)
_STR = ("name", "account", "project", "qos", "budget", "gpu_type", "out", "err")
# Signals a job may ask for before its limit (--signal); SIGKILL/SIGSTOP would defeat the purpose.
SIGNALS = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "URG"})


def _int(body: Body, key: str, lo: int, default: int | None = None, hi: int = bounds.MAX_INT) -> int:
    v = body.get(key, default)
    if type(v) is int and lo <= v <= hi:      # the usual case, before the checks that name what is wrong
        return v
    return bounds.integer(key, v, lo, hi)


def _opt_int(body: Body, key: str, lo: int, hi: int = bounds.MAX_INT) -> int | None:
    """_int of a field that may be absent or null (None)."""
    v = body.get(key)
    return None if v is None else _int(body, key, lo, hi=hi)


def _bool(body: Body, key: str, default: bool = False) -> bool:
    v = body.get(key, default)
    if not isinstance(v, bool):
        raise UsageError(f"{key}: expected true or false, got {v!r}")
    return v


# The jobs made lately from the very body object (daemon/decode.py hands the same dict for the same
# text) by the same user under the same config: checked once, each later submit of it a copy stamped
# with its own submit time (the checks and the Job() were ~20 % of the scheduler's CPU per request,
# issue 39). Only a body whose job depends on nothing but itself, the user and the config: one that
# names a begin time, a deadline (both checked against now) or dependencies (read from the queue) is
# made afresh each time. Held by id, with the body itself, so that an id is never reused while kept.
SHARED_TEMPLATES = 64
_MADE: dict[int, tuple[Body, str, Config, Job]] = {}
_SET_SUBMIT_TIME = getattr(Job, "submit_time").__set__
_NOW_OR_QUEUE = ("begin", "deadline", "dependency")


def job_from_submit(body: Body, user: str, cfg: Config, now: float, lookup: Lookup | None = None) -> Job:
    """A pending job (id 0, to be assigned) from a submit request's body. `lookup(text)` gives the
    ids of the jobs a dependency names (`42`: the job, or every task of array 42; `42_3`: one
    task), empty when there is none; without it a submit with dependencies is refused. A new Job
    each call, which the caller may number in place."""
    got = _MADE.get(id(body))
    if got is not None and got[0] is body and got[1] == user and got[2] is cfg:
        out = object.__new__(Job)
        deque(map(call, JOB_SETTERS, repeat(out, len(JOB_SETTERS)), JOB_VALUES(got[3])), 0)
        _SET_SUBMIT_TIME(out, now)
        return out
    job = _job_from_submit(body, user, cfg, now, lookup)
    if isinstance(body, dict) and all(body.get(k) is None for k in _NOW_OR_QUEUE):
        if len(_MADE) >= SHARED_TEMPLATES:
            del _MADE[next(iter(_MADE))]
        # Its own copy: the caller numbers the one it gets in place.
        _MADE[id(body)] = (body, user, cfg, replace(job))
    return job


def _job_from_submit(body: Body, user: str, cfg: Config, now: float, lookup: Lookup | None = None) -> Job:
    argv, script, workdir, tags = _command(body)
    time_limit = _opt_int(body, "time_limit", 1) or cfg.default_time
    bounds.time_limit("time_limit", time_limit, cfg.max_time_limit)
    est = _opt_int(body, "est", 1)
    if est is not None:
        bounds.time_limit("est", est, cfg.max_time_limit)
    warn_signal = body.get("signal")
    if warn_signal is not None:
        if (not isinstance(warn_signal, list) or len(warn_signal) not in (2, 3) or warn_signal[0] not in SIGNALS
                or not bounds.is_int(warn_signal[1]) or not 1 <= warn_signal[1] <= bounds.MAX_INT
                or warn_signal[2:] not in ([], ["batch"])):
            raise UsageError(f"signal: expected [NAME, seconds ≥ 1] or [NAME, seconds, \"batch\"] with NAME one of "
                             f"{', '.join(sorted(SIGNALS))}, got {warn_signal!r}")
        warn_signal = tuple(warn_signal)
    begin = body.get("begin")
    if begin is not None:
        begin = bounds.epoch("begin", begin, now)
    held = body.get("hold", False)
    if not isinstance(held, bool):
        raise UsageError(f"hold: expected true or false, got {held!r}")
    ckpt_code = _opt_int(body, "checkpoint_exit_code", 1)
    if ckpt_code is not None and ckpt_code > 255:
        raise UsageError(f"checkpoint_exit_code: expected 1–255, got {ckpt_code}")
    qos = body.get("qos") or "normal"
    if cfg.qos_named(qos) is None:
        raise UsageError(f"qos: unknown QoS {qos!r} (configured: {', '.join(q.name for q in cfg.qos)})")
    account = body.get("account") or cfg.default_account(user)
    if cfg.accounts and account != "default" and cfg.account_named(account) is None:
        raise UsageError(f"account: unknown account {account!r} (configured: "
                         f"{', '.join(a.name for a in cfg.accounts)})")
    budget = body.get("budget", "")
    if budget and budget not in {b.name for b in cfg.budgets}:
        raise UsageError(f"budget: unknown budget {budget!r} (configured: "
                         f"{', '.join(b.name for b in cfg.budgets) or 'none'})")
    export, env = exportenv.validate(body)
    umask = _int(body, "umask", 0, 0o022)
    if umask > 0o777:
        raise UsageError(f"umask: expected 0–0o777 (an octal file mode mask), got {umask!r}")
    return Job(
        id=0, user=intern(user), account=intern(account), argv=shared_argv(argv), export=intern(export), env=env,
        umask=umask, script=script, name=intern(body.get("name") or (os.path.basename(argv[0]) if argv else "script")),
        project=intern(body.get("project", "")), qos=intern(qos), budget=intern(body.get("budget", "")),
        workdir=intern(workdir), gpus=_int(body, "gpus", 0, 0), gpu_type=intern(body.get("gpu_type", "")),
        cpus=_int(body, "cpus", 1, 1), mem=_int(body, "mem", 0, 0), nodes=_int(body, "nodes", 1, 1, hi=bounds.MAX_NODES),
        time_limit=time_limit, est=est, max_wait=_opt_int(body, "max_wait", 0, hi=bounds.MAX_AHEAD),
        out=intern(body.get("out", "")), err=intern(body.get("err", "")),
        tags=tuple((k, v) for k, v in tags), submit_time=now, warn_signal=warn_signal,
        checkpoint_exit_code=ckpt_code, begin=float(begin) if begin is not None else None, held=held, request_id=str(body.get("rid", "")),
        # A held job's reason from the start, the one plan() gives it (policy._Pass._verdict): the
        # first pass then rewrites nothing (a held 10,000-task array: 10,000 records, ~110 ms CPU).
        reason=states.HELD if held else states.NONE, detail=HELD_DETAIL if held else "",
        **_run_policy(body, now, time_limit, begin, ckpt_code, lookup))


# A pending job holds its request's texts for as long as it waits; a loop of `labq sub` sends the same
# user, account, QoS, directory, name and command each time, and each request decodes its own copies
# (~280 B a job: 28 MB of the scheduler at 100,000 single pending jobs, issue 39). Interned, and the
# argv tuple shared with the last equal ones, they are held once; codec.from_dict does the same for
# records loaded from Redis.
SHARED_ARGVS = 256
_ARGVS: dict[tuple[str, ...], tuple[str, ...]] = {}


def shared_argv(argv: Iterable[str]) -> tuple[str, ...]:
    """tuple(argv), or the equal tuple a recent submit made (its strings interned)."""
    t = tuple(argv)
    got = _ARGVS.get(t)
    if got is None:
        if len(_ARGVS) >= SHARED_ARGVS:
            del _ARGVS[next(iter(_ARGVS))]
        _ARGVS[t] = got = tuple(map(intern, t))
    return got


def _command(body: object) -> tuple[list[str], str | None, str, list[list[str]]]:
    """(argv, script, workdir, tags) of a submit body, checked."""
    if not isinstance(body, dict):
        raise UsageError("submit: expected a JSON object")
    for k in _STR:
        if not isinstance(body.get(k, ""), str):
            raise UsageError(f"{k}: expected a string, got {body[k]!r}")
    argv, script = body.get("argv") or [], body.get("script")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise UsageError("argv: expected a list of strings")
    if script is not None and not isinstance(script, str):
        raise UsageError("script: expected the script's text")
    if not argv and not script:
        raise UsageError("command: give a command after --, a script file, or a script on stdin")
    workdir = body.get("workdir", "")
    if not isinstance(workdir, str) or not os.path.isabs(workdir):
        raise UsageError(f"workdir: expected an absolute path, got {workdir!r}")
    tags = body.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t)
                                              for t in tags):
        raise UsageError("tags: expected a list of [key, value] strings")
    return argv, script, workdir, tags


def _run_policy(body: Body, now: float, time_limit: int, begin: float | None, ckpt_code: int | None,
                lookup: Lookup | None) -> dict[str, Any]:
    """Dependencies, deadline, retries and requeue, preemptibility, memory limit: Job fields."""
    deps = resolve_deps(parse_dependency(body.get("dependency")), lookup or (lambda text: []))
    retries = _int(body, "retries", 0, 0)
    if retries > MAX_RETRIES:
        raise UsageError(f"retries: at most {MAX_RETRIES}, got {retries}")
    retry_on = body.get("retry_on", [])
    if (not isinstance(retry_on, list) or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255
                                                   for c in retry_on)):
        raise UsageError(f"retry_on: expected a list of exit codes 1–255, got {retry_on!r}")
    if retry_on and not retries:
        raise UsageError("retry_on: give --retries N too (how many times to retry on those exit codes)")
    if ckpt_code is not None and ckpt_code in retry_on:
        raise UsageError(f"retry_on: {ckpt_code} is the checkpoint exit code, which always requeues")
    mem_limit = _int(body, "mem_limit", 0, 0)
    if mem_limit and mem_limit < _int(body, "mem", 0, 0):
        raise UsageError(f"mem_limit: {mem_limit} bytes is below the --mem reservation ({body['mem']} bytes)")
    preemptible = body.get("preemptible")
    if preemptible is not None and not isinstance(preemptible, bool):
        raise UsageError(f"preemptible: expected true, false or null (the QoS decides), got {preemptible!r}")
    deadline = body.get("deadline")
    if deadline is not None:
        deadline = bounds.epoch("deadline", deadline, now)
        earliest = max(now, begin or 0)
        if earliest + time_limit > deadline:
            raise UsageError(f"deadline: the job could not finish by it: starting {earliest - now:.0f}s from now "
                             f"with time limit {time_limit}s ends {earliest + time_limit - deadline:.0f}s after it")
    return dict(deps=deps, kill_on_invalid_dep=_bool(body, "kill_on_invalid_dep"),
                deadline=float(deadline) if deadline is not None else None, retries=retries,
                retry_on=tuple(sorted(set(retry_on))), requeue=_bool(body, "requeue", True),
                requeue_on_timeout=_bool(body, "requeue_on_timeout"), preemptible=preemptible, mem_limit=mem_limit)


def array_range(body: Body, max_array: int = bounds.DEFAULT_MAX_ARRAY) -> list[int] | None:
    """The task indices of `-a LO-HI[:STEP]`, as [lo, hi, step] in the request, or None. The count
    is checked by arithmetic first: `[0, 10**19, 1]` is refused, never expanded."""
    a = body.get("array")
    if a is None:
        return None
    if not isinstance(a, list) or len(a) != 3 or not all(bounds.is_int(x) for x in a):
        raise UsageError(f"array: expected [lo, hi, step] with 0 ≤ lo ≤ hi and step ≥ 1, got {bounds._short(a)}")
    bounds.array_tasks("array", a[0], a[1], a[2], max_array)
    return list(range(a[0], a[1] + 1, a[2]))


class Tasks(list[Job]):
    """The tasks of one new array as `expand` made them: task k is alike to task 0 in every field but
    id and array_index. The committer uses that: a task still this very object when the batch is
    written (nothing in the batch replaced it) is staged and encoded without a look at its fields."""


def expand(template: Job, first_id: int, indices: list[int] | None, throttle: int | None = None) -> list[Job]:
    if indices is None:
        # A copy slot by slot with its id: replace() (Job(**every field), a frozen setattr per field)
        # was a tenth of a plain submit's CPU in the scheduler.
        return [_copies(template)(first_id, template.array_index)]
    if not indices:
        return []
    first = replace(template, id=first_id, array_index=indices[0], array_id=first_id,
                    array_count=len(indices), array_throttle=throttle)
    # The other tasks are copies of the first (which went through Job()) with id and index set:
    # half the CPU of Job(**kw), which was a fifth of a 10,000-task submit.
    copy = _copies(first)
    out = Tasks([first])
    for i in range(1, len(indices)):
        out.append(copy(first_id + i, indices[i]))
    return out


def _copies(job: Job) -> Callable[[int, int | None], Job]:
    """`copy(id, array_index)`: a new Job equal to `job` but for those two, each slot set by its
    descriptor (the descriptors called by map, not a loop), never through Job()."""
    setters, values = JOB_SETTERS, JOB_VALUES(job)
    set_id, set_index = getattr(Job, "id").__set__, getattr(Job, "array_index").__set__
    new, nf = object.__new__, len(setters)

    def copy(jid: int, index: int | None) -> Job:
        out = new(Job)
        deque(map(call, setters, repeat(out, nf), values), 0)
        set_id(out, jid)
        set_index(out, index)
        return out
    return copy


def array_throttle(body: Body) -> int | None:
    t = body.get("array_throttle")
    if t is None:
        return None
    return bounds.integer("array_throttle", t, 1)


MAX_RETRIES = 100
MAX_DEP_JOBS = 10_000       # job ids one job may depend on, array tasks counted one by one
_DEP_ID = re.compile(r"^\d+(?:_\d+)?$")


def parse_dependency(text: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`afterok:12:13,afternotok:14,singleton` (SLURM's syntax; `,` = all of) → ((kind, (id text, …)), …).
    An id is a job (`42`, every task when 42 is an array) or one array task (`42_3`)."""
    if text is None or text == "":
        return ()
    if not isinstance(text, str):
        raise UsageError(f"dependency: expected text like afterok:12:13,singleton, got {text!r}")
    if "?" in text:
        raise UsageError(f"dependency: '?' (any of) is not supported, only ',' (all of): {text!r}")
    out = []
    for part in text.split(","):
        kind, _, rest = part.strip().partition(":")
        if kind not in DEPENDENCY_KINDS:
            raise UsageError(f"dependency: unknown type {kind!r} in {text!r} "
                             f"(expected {', '.join(DEPENDENCY_KINDS[:-1])} or singleton, like afterok:12:13)")
        ids = tuple(rest.split(":")) if rest else ()
        if kind == "singleton":
            if ids:
                raise UsageError(f"dependency: singleton takes no job ids, got {part!r}")
        elif not ids or not all(_DEP_ID.match(i) for i in ids):
            raise UsageError(f"dependency: expected {kind}:ID[:ID…] with ids like 42 or 42_3, got {part!r}")
        out.append((kind, ids))
    return tuple(out)


def describe_deps(deps: Iterable[tuple[str, Iterable[object]]]) -> str:
    """`afterok:12:13,singleton`, the SLURM spelling (an array's tasks appear one by one)."""
    return ",".join(kind + "".join(f":{i}" for i in ids) for kind, ids in deps)


def resolve_deps(parsed: Iterable[tuple[str, tuple[str, ...]]], lookup: Lookup) -> Deps:
    """Each id text → the job ids it names, through `lookup`; an unknown id is a UsageError."""
    out, total = [], 0
    for kind, texts in parsed:
        ids = []
        for t in texts:
            found = lookup(t)
            if not found:
                raise UsageError(f"dependency: no such job {t} (in {kind}:{':'.join(texts)})")
            ids += [i for i in found if i not in ids]
        total += len(ids)
        if total > MAX_DEP_JOBS:
            raise UsageError(f"dependency: at most {MAX_DEP_JOBS} jobs (array tasks count one by one)")
        out.append((kind, tuple(ids)))
    return tuple(out)
