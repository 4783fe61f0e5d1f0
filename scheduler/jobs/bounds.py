"""Bounds on every number and size a request carries, one module for both edges.

The CLI calls these for fast feedback and the scheduler calls them again on what it reads from an
inbox (anyone may XADD there, so the scheduler's check is the only one that counts). Each failure
is one line naming the field or flag and the bound: a UsageError (exit 2) for malformed input
(not finite, not an integer, beyond 2^53, nested too deep), a RefusedError (exit 3) beyond a bound
the site configured (`scheduler.max_time_limit`, `max_array_size`, `max_request_bytes`).
"""
from __future__ import annotations

import math
from itertools import accumulate

from .. import cjson
from ..errors import RefusedError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: the thin client's checks import no typing
    from typing import Any, NoReturn, TypeGuard

MAX_INT = 2 ** 53               # beyond it a float (JSON readers, Lua) no longer holds every integer
MAX_DEPTH = 32                  # JSON nesting of a request body; a deep one would exhaust the C stack
DEFAULT_MAX_TIME_LIMIT = 365 * 86400
DEFAULT_MAX_ARRAY = 100_000
DEFAULT_MAX_REQUEST_BYTES = 1 << 20
MAX_AHEAD = 100 * 365 * 86400   # --begin/--deadline: epoch seconds at most this far from now
MAX_NODES = 1024                # -N: nodes of one gang (more than any lab has)


def is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(what: str, v: object, lo: int = 0, hi: int = MAX_INT) -> int:
    """`v` when it is an integer in [lo, hi]; else a UsageError naming `what`."""
    if not is_int(v) or not lo <= v <= hi:
        raise UsageError(f"{what}: expected an integer ≥ {lo} and ≤ {hi}, got {_short(v)}")
    return v


def number(what: str, v: object, lo: float = 0, hi: float = MAX_INT) -> float:
    """`v` as a float when it is a finite number in [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (is_int(v) and abs(v) > MAX_INT):
        raise UsageError(f"{what}: expected a number from {lo:g} to {hi:g}, got {_short(v)}")
    f = float(v)
    if not math.isfinite(f) or not lo <= f <= hi:
        raise UsageError(f"{what}: expected a finite number from {lo:g} to {hi:g}, got {_short(v)}")
    return f


def at_most(what: str, v: int, bound: int, key: str, unit: str = "") -> int:
    """`v` unless it passes a configured bound: a RefusedError naming the key and the bound."""
    if v > bound:
        raise RefusedError(f"{what}: {_short(v)}{unit} is above {key} = {bound}{unit}")
    return v


def time_limit(what: str, seconds: int, max_time_limit: int) -> int:
    return at_most(what, seconds, max_time_limit, "scheduler.max_time_limit", "s")


def array_tasks(what: str, lo: int, hi: int, step: int, max_array: int) -> int:
    """How many tasks `lo-hi:step` makes, by arithmetic: a range of 10^19 is never materialised."""
    if not all(is_int(v) for v in (lo, hi, step)) or lo < 0 or hi < lo or step < 1:
        raise UsageError(f"{what}: expected 0 ≤ LO ≤ HI and STEP ≥ 1, got {_short([lo, hi, step])}")
    n = (hi - lo) // step + 1
    if n > max_array:
        raise RefusedError(f"{what}: {_short(n)} tasks is above scheduler.max_array_size = {max_array}")
    integer(f"{what} HI", hi, 0, MAX_INT)
    return n


def epoch(what: str, v: object, now: float) -> float:
    """An absolute time (begin, deadline): finite, not negative, within MAX_AHEAD of now."""
    try:
        return number(what, v, 0, now + MAX_AHEAD)
    except UsageError:
        raise UsageError(f"{what}: expected an epoch time in seconds, at most 100 years from now, "
                         f"got {_short(v)}") from None


def depth(text: str) -> int:
    """The deepest nesting of `text` read as JSON, counted without parsing it (the parser's own
    recursion is what a 100,000-deep body would exhaust). Strings are removed first."""
    import re  # here: only a body with more brackets than the bound is counted, and `labq sub` needs no `re`
    # A JSON string: the loop unrolled (a run of plain characters, then an escape and its run): the same
    # texts as "(?:[^"\\]|\\.)*", a third of its time on a body with many strings (an exported environment).
    strings = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
    brackets = re.sub(r"[^\[\]{}]+", "", strings.sub("", text))
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise ValueError(f"{text[:20]} is beyond a float")
    return f


_SCAN = cjson.scanner(cjson.Decoder(parse_float=_finite, parse_constant=_no_constant))


def _slow(text: str) -> Any:
    """json's own reading, with the same hooks: white space around the value, and json's errors."""
    import json
    if text.startswith("\ufeff"):
        return json.loads(text)
    return json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite).decode(text)


def loads(text: object, what: str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """Parse a request body: at most `max_bytes` (scripts included), nested at most `max_depth`,
    no NaN/Infinity. A UsageError/RefusedError names `what` and the bound."""
    if not isinstance(text, (str, bytes)):
        raise UsageError(f"{what}: expected JSON text")
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise RefusedError(f"{what}: {size} bytes is above scheduler.max_request_bytes = {max_bytes}")
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise UsageError(f"{what}: not UTF-8") from None
    # No deeper than its count of opening brackets: most bodies need no count of the depth at all.
    if text.count("[") + text.count("{") > max_depth and (d := depth(text)) > max_depth:
        raise UsageError(f"{what}: JSON nested {d} deep, at most {max_depth}")
    try:
        return cjson.loads(text, _SCAN, _slow)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{what}: not valid JSON: {str(e)[:200]}") from None


def encoded_size(obj: object) -> int:
    """Bytes of `obj` as the client sends it (compact JSON)."""
    return len(cjson.compact(obj).encode())


def _short(v: object) -> str:
    s = repr(v)
    return s if len(s) <= 40 else f"{s[:20]}… ({len(s)} characters)"
