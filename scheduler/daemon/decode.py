"""One schema for what the scheduler reads from keys others write: requests (any user may LPUSH any
bytes onto the request list) and events (any node, or anything with a node's rights).

Each entry is checked here before a handler sees it. A request that fails is answered with the
error; an event that fails goes to the dead-letter stream with the reason. Either way it is
acknowledged, so no entry is ever redelivered to crash the next leader.
"""
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..jobs import bounds

USER = re.compile(r"^[^\s:/\x00-\x1f]{1,64}$")    # a login name, as a request names its sender
_HEAD_RID = re.compile(rb'^\{"rid": ?"([A-Za-z0-9_.:@-]{1,128})"')
_RID = RID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
_OP = re.compile(r"^[a-z_]{1,32}$")
_NODE = re.compile(r"^[^\s\x00]{1,200}$")
KINDS = ("started", "finished", "alert")
# A poison entry is one the leader died on: an entry that was in hand (store.in_hand) when this many
# recovering leaders died has crashed (or hung) the scheduler that often; it is answered, not run again.
POISON_STRIKES = 2
MAX_FIELDS = 16
MAX_NAME_BYTES = 64
FIELD_SLACK = 64 << 10     # beyond the body's own bound: a munge credential, an rid, an expiry


@dataclass(frozen=True)
class Request:
    rid: str
    op: str
    body: dict[str, Any]
    expires: float | None    # epoch seconds after which the client has given up (None: never)


@dataclass(frozen=True)
class Event:
    kind: str
    job: int
    attempt: int
    node: str
    body: dict[str, Any]


def fields(raw: Mapping[bytes | str, bytes | str] | None, max_bytes: int) -> tuple[dict[str, str], str | None]:
    """An entry's fields as Redis gave them (bytes: anyone may write anything) decoded into text,
    and what is wrong with them (None: nothing). Fields that decode are kept even when another is
    wrong, so that the reply still finds its client's rid."""
    if not raw:
        return {}, None
    out: dict[str, str] = {}
    problem: str | None = None
    if len(raw) > MAX_FIELDS:
        problem = f"{len(raw)} fields; expected at most {MAX_FIELDS}"
    total = 0
    for name, value in raw.items():
        total += len(name) + len(value)
        try:
            key = name.decode() if isinstance(name, bytes) else name
        except UnicodeDecodeError:
            problem = problem or f"a field name: expected UTF-8 text, got {_shown(name)}"
            continue
        if len(key) > MAX_NAME_BYTES:
            problem = problem or f"a field name of {len(name)} bytes; expected at most {MAX_NAME_BYTES}"
            continue
        try:
            out[key] = value.decode() if isinstance(value, bytes) else str(value)
        except UnicodeDecodeError as e:
            problem = problem or f"{_shown(key)}: expected UTF-8 text, got a bad byte at {e.start} of {len(value)}"
    if total > max_bytes + FIELD_SLACK:
        problem = f"{total} bytes is above scheduler.max_request_bytes = {max_bytes}"
    return out, problem


def entry(raw: bytes | None, max_bytes: int) -> tuple[dict[str, str], str | None]:
    """A request as a client LPUSHed it (store/inbox.py: one JSON object of text fields), checked
    like `fields`: the fields that are good, and what is wrong (None: nothing)."""
    if not isinstance(raw, bytes) or len(raw) > max_bytes + FIELD_SLACK:
        head = _HEAD_RID.match(raw or b"")     # clients write the rid first: the refusal still finds them
        return ({"rid": head.group(1).decode()} if head else {}), \
            f"{len(raw or b'')} bytes is above scheduler.max_request_bytes = {max_bytes}"
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        return _rid_of(raw), f"expected UTF-8 text, got a bad byte at {e.start} of {len(raw)}"
    # A body written as itself, last (store/inbox.entry_text): the text fields before it parsed here, the
    # body's text handed on as the text of a body always was (decode.request parses it, within bounds).
    cut = text.find(_BODY) if text[-1:] == "}" else -1
    obj = _object(text[:cut] + "}") if cut >= 0 else None
    body = None
    if isinstance(obj, dict):
        # Cut from text decoded as UTF-8, so it is UTF-8 written back (no JSON escape decoded yet)
        body = obj["body"] = text[cut + len(_BODY) - 1:-1]
    else:       # no such body, or what precedes it is no object of its own: the whole (its rid, its error)
        obj = _object(text)
    if not isinstance(obj, dict):
        return {}, "expected a JSON object of text fields (rid, op, body, user, expires, cred)"
    out: dict[str, str] = {}
    problem = None if len(obj) <= MAX_FIELDS else f"{len(obj)} fields; expected at most {MAX_FIELDS}"
    for name, value in obj.items():
        if len(name) > MAX_NAME_BYTES or not isinstance(value, str) or (value is not body and not _encodes(name + value)):
            what = "text that is not UTF-8" if isinstance(value, str) else type(value).__name__
            problem = problem or f"{_shown(name[:64])}: expected UTF-8 text, got {what}"
        else:
            out[name] = value
    return out, problem


_BODY = ',"body":{'


def _object(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _rid_of(raw: bytes) -> dict[str, str]:
    """The rid of a request that is not UTF-8, where one can be read: its client still gets the answer."""
    try:
        rid = json.loads(raw.decode("utf-8", "replace")).get("rid")
    except (ValueError, RecursionError, AttributeError):
        return {}
    return {"rid": rid} if isinstance(rid, str) and _RID.match(rid) else {}


def _encodes(text: str) -> bool:
    """Whether `text` is UTF-8 once written back (JSON lets a lone surrogate in as \\ud800)."""
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False


def _shown(v: object) -> str:
    text = v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)
    return repr(text[:32])


def reply_id(fields: Mapping[str, object], eid: str) -> str:
    """The id the client waits on; the entry id when the given one is unusable (an answer must
    still go somewhere, and a key name made of a 1 MB rid would be a poison of its own)."""
    rid = fields.get("rid")
    return rid if isinstance(rid, str) and _RID.match(rid) else eid


def request(fields: Mapping[str, str], eid: str, max_bytes: int) -> Request:
    op = fields.get("op")
    if not isinstance(op, str) or not _OP.match(op):
        raise UsageError(f"op: expected a request name like submit or cancel, got {bounds._short(op)}")
    text = fields.get("body") or "{}"
    body = submit_body(text, max_bytes) if op == "submit" else bounds.loads(text, f"{op}: body", max_bytes)
    if not isinstance(body, dict):
        raise UsageError(f"{op}: body: expected a JSON object, got {type(body).__name__}")
    given = fields.get("expires")
    expires = _float("expires", given) if given is not None else None
    return Request(reply_id(fields, eid), op, body, expires)


# Submit bodies parsed lately, by their text: a loop of `labq sub` from one shell sends the same text
# (its ~1.5 KB exported environment included) again and again, and a parse was ~10 % of the scheduler's
# CPU per request (issue 39). The same dict is handed to each: nothing downstream may change it (the
# handlers read a body; jobspec.job_from_submit keys the jobs it made by this very object).
SHARED_BODIES = 64
_BODIES: dict[str, tuple[int, Any]] = {}


def submit_body(text: object, max_bytes: int) -> Any:
    """bounds.loads of a submit's body, or the object an equal text gave lately (the round's read parses
    a body that names dependencies here first: tickread.round, lookup.named)."""
    got = _BODIES.get(text) if type(text) is str else None
    if got is not None and got[0] <= max_bytes:
        return got[1]
    body = bounds.loads(text, "submit: body", max_bytes)
    if type(text) is str and isinstance(body, dict):
        if len(_BODIES) >= SHARED_BODIES:
            del _BODIES[next(iter(_BODIES))]
        _BODIES[text] = (len(text.encode()), body)
    return body


def event(fields: Mapping[str, str], max_bytes: int) -> Event:
    """A checked event, or a UsageError saying what is wrong with it."""
    kind = fields.get("kind")
    if kind not in KINDS:
        raise UsageError(f"kind: expected one of {', '.join(KINDS)}, got {bounds._short(kind)}")
    node = fields.get("node", "")
    if not isinstance(node, str) or (node and not _NODE.match(node)):
        raise UsageError(f"node: expected a node name, got {bounds._short(node)}")
    body = bounds.loads(fields.get("body") or "{}", f"{kind}: body", max_bytes)
    if not isinstance(body, dict):
        raise UsageError(f"{kind}: body: expected a JSON object, got {type(body).__name__}")
    if kind == "alert":
        return Event(kind, 0, 0, node, body)
    ev = Event(kind, _id("job", fields.get("job")), _id("attempt", fields.get("attempt")), node, body)
    (_started if kind == "started" else _finished)(body)
    return ev


def _started(b: dict[str, Any]) -> None:
    _opt_time(b, "start_time")
    if b.get("pid") is not None:
        bounds.integer("started: pid", b["pid"], 0, 2 ** 31)


def _finished(b: dict[str, Any]) -> None:
    outcome = b.get("outcome", "error")
    if not isinstance(outcome, str) or not _OP.match(outcome):
        raise UsageError(f"finished: outcome: expected a word like completed, got {bounds._short(outcome)}")
    for k in ("start_time", "end_time", "last_checkpoint"):
        _opt_time(b, k)
    if b.get("exit_code") is not None:
        bounds.integer("finished: exit_code", b["exit_code"], -2 ** 31, 2 ** 31)
    if not isinstance(b.get("usage") or {}, dict):
        raise UsageError(f"finished: usage: expected an object, got {bounds._short(b['usage'])}")
    if not isinstance(b.get("message", ""), str):
        raise UsageError(f"finished: message: expected text, got {bounds._short(b['message'])}")


def _opt_time(b: dict[str, Any], key: str) -> None:
    v = b.get(key)
    if v is not None and v != 0:
        bounds.number(f"{key}", v, 0, bounds.MAX_INT)


def _id(what: str, v: object) -> int:
    """Stream fields are text: a job or attempt number is 1–16 digits."""
    text = str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) else ""
    if not re.fullmatch(r"\d{1,16}", text):
        raise UsageError(f"{what}: expected a number, got {bounds._short(v)}")
    return int(text)


def _float(what: str, v: object) -> float:
    try:
        f = float(v) if isinstance(v, (str, int, float)) and len(str(v)) < 40 else math.nan
    except ValueError:
        f = math.nan
    if not math.isfinite(f):
        raise UsageError(f"{what}: expected epoch seconds, got {bounds._short(v)}")
    return f
