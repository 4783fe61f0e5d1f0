"""`sub --export`: which of the submitter's variables a job gets, as sbatch means it.

  ALL (the default)       the submitter's whole environment at submit time;
  NONE                    none of it: the job starts from a clean environment (PATH, HOME, USER…);
  VAR[,VAR=value…]        only those: VAR with its current value, VAR=value with that value;
  ALL,VAR=value…          everything, with those values on top.

The client captures the values (`capture`) and sends them in the submit request; the scheduler
checks them (`validate`) and stores them with the job; the runner builds the job's environment from
them (worker/jobenv.py). Pure: the environment to read is an argument.
"""
from __future__ import annotations

from ..errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: `labq sub` captures without importing typing
    from collections.abc import Mapping
    from typing import Any

    Env = tuple[tuple[str, str], ...]

# The captured variables travel in the submit request (bounded at 1 MiB) and live in the job
# record; a login environment is a few KiB, and 256 KiB is twice Linux's limit on one string.
MAX_ENV_BYTES = 256 * 1024
MODES = ("ALL", "NONE")


def capture(spec: str | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """{"export": "ALL" | "NONE", "env": {name: value}} for a `--export` value (None = ALL)."""
    text = "ALL" if spec is None else str(spec).strip()
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"--export: expected ALL, NONE or VAR[,VAR=value…], got {spec!r}")
    head = items[0].upper()
    if head == "NONE":
        if len(items) > 1:
            raise UsageError(f"--export: NONE takes no variables (SLURM's rule), got {spec!r}")
        return {"export": "NONE", "env": {}}
    mode = "NONE"
    env: dict[str, str] = {}
    if head == "ALL":
        mode, env, items = "ALL", dict(environ), items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        _check_name(name, spec)
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    out = {"export": mode, "env": env}
    validate(out)
    return out


def validate(body: dict[str, Any]) -> tuple[str, Env]:
    """(mode, sorted (name, value) pairs) from a request body; UsageError names what is wrong."""
    mode = body.get("export", "NONE")
    if mode not in MODES:
        raise UsageError(f"export: expected one of {', '.join(MODES)}, got {mode!r}")
    env = body.get("env", {})
    if not isinstance(env, dict):
        raise UsageError("env: expected an object of variable names to string values")
    if _plain(env):
        return mode, shared(tuple(sorted(env.items())))
    size = 0
    for k, v in env.items():
        if not isinstance(v, str) or "\0" in v:
            raise UsageError(f"env: {k!r} must be a string without NUL bytes")
        _check_name(k, "env")
        size += len(k) + len(v) + 2
    if size > MAX_ENV_BYTES:
        raise UsageError(f"env: the exported environment is {size} bytes, more than {MAX_ENV_BYTES}; "
                         f"use --export=NONE or --export=VAR,… to send only what the job needs")
    return mode, shared(tuple(sorted(env.items())))


# Environments seen lately, each kept once: a user's submits from one shell carry the same variables,
# and every pending single job held a copy of its own (~2 KB: 20 MB at 10,000 pending). The newest
# SHARED_ENVS; the oldest is let go first.
SHARED_ENVS = 256
_SEEN: dict[Env, Env] = {}


def shared(env: Env) -> Env:
    """`env`, or the equal environment seen lately (the same object for every job that carries it)."""
    got = _SEEN.get(env)
    if got is None:
        if len(_SEEN) >= SHARED_ENVS:
            del _SEEN[next(iter(_SEEN))]
        _SEEN[env] = got = env
    return got


def _plain(env: dict[str, Any]) -> bool:
    """Whether every name and value is a string, no name empty, no "=" in a name, no NUL anywhere and
    the whole within MAX_ENV_BYTES: the checks of `validate`, on joined texts in C (a submit carries
    a shell's ~40 variables; checking them one by one was a tenth of the scheduler's CPU per request).
    False: `validate` looks one by one, to say which variable is wrong."""
    if not (all(map(str.__instancecheck__, env)) and all(map(str.__instancecheck__, env.values()))) or "" in env:
        return False
    keys, values = "\x01".join(env), "".join(env.values())
    return ("=" not in keys and "\0" not in keys and "\0" not in values
            and len(keys) + 1 + len(values) + len(env) <= MAX_ENV_BYTES)


def _check_name(name: object, where: object) -> None:
    if not isinstance(name, str) or not name or "=" in name or "\0" in name:
        raise UsageError(f"--export: {name!r} is not a variable name (in {where!r})")
