"""Requests and replies: the one place a request is built, sent and answered, and the wake token
written (here, by clients) and parsed (here, by the scheduler).

A request is XADDed to `labq:inbox:<user>` with a request id, and the user's name is LPUSHed on the
wake list; the client then blocks on `labq:reply:<rid>`. If no reply comes it sends the same request
id again: the scheduler answers a repeated id from its record instead of acting twice, so retries are
always safe.

Both clients use this module: the full one (redis-py, scheduler/client.py) and the thin one of the hot
CLI commands (resp.py, scheduler/thinclient.py). It works on raw commands through two callables, so
it imports no Redis library itself:
  send(cmds)            runs a list of commands (tuples of words) as one pipeline;
  pop(key, seconds)     BLPOPs one key for up to `seconds` (whole), returning (key, value) or None.
"""
import json
import os
import time

from ..errors import UnreachableError, UsageError
from .keys import Keys

INBOX_MAXLEN = 100_000
_USER = "user:"
POP_SLICE = 20      # seconds per BLPOP: under the connection's read timeout (30 s)


def request_fields(op: str, body: dict, rid: str | None = None, expires: float | None = None) -> dict:
    """The stream fields of one request. Everything a request carries is added here, and only here."""
    rid = rid or body.get("rid") or os.urandom(16).hex()   # uuid4().hex's shape, without importing uuid
    fields = {"rid": rid, "op": op, "body": json.dumps(body, separators=(",", ":"))}
    if expires is not None:
        fields["expires"] = f"{expires:.3f}"
    return fields


def request_timeout() -> float:
    """How long a request waits for the scheduler: $LABQ_TIMEOUT seconds, default 30."""
    text = os.environ.get("LABQ_TIMEOUT") or "30"
    try:
        t = float(text) if len(text) < 20 else float("nan")
    except ValueError:
        t = float("nan")
    if not 1 <= t <= 86400:
        raise UsageError(f"LABQ_TIMEOUT: expected seconds from 1 to 86400, got {text[:40]!r}")
    return t


def wake_token(user: str) -> str:
    """What a client pushes on the wake list: `user:<name>`, naming the inbox to read."""
    return _USER + user


MAX_TOKEN = 200     # bytes of a wake token: "user:" and a login name, with room to spare


def woken_users(tokens) -> tuple[set[str], int]:
    """The scheduler's side: the users whose inbox the wake tokens name, and how many tokens were
    not text naming one (not UTF-8, too long, an empty name or one with ':' or whitespace). Tokens
    of other kinds ("events") wake the scheduler and name nothing."""
    users, bad = set(), 0
    for t in tokens:
        try:
            text = t.decode() if isinstance(t, bytes) else t
        except UnicodeDecodeError:
            bad += 1
            continue
        if len(text) > MAX_TOKEN:
            bad += 1
        elif text.startswith(_USER):
            name = text[len(_USER):]
            if name and name.isprintable() and not any(c in name for c in ": "):
                users.add(name)
            else:
                bad += 1
    return users, bad


def send_commands(k: Keys, user: str, fields: dict) -> list[tuple]:
    xadd = ["XADD", k.inbox(user), "MAXLEN", "~", INBOX_MAXLEN, "*"]
    for name, value in fields.items():
        xadd += [name, value]
    return [tuple(xadd), ("LPUSH", k.wake, wake_token(user))]


def await_reply(pop, k: Keys, rid: str, seconds: float):
    """BLPOP in slices shorter than the connection's socket timeout, so that a caller may wait
    minutes (a 100,000-task array) without the socket giving up first."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        got = pop(k.reply(rid), max(1, min(POP_SLICE, int(left))))
        if got or left <= POP_SLICE:
            return got


def call(send, pop, k: Keys, user: str, op: str, body: dict, timeout: float | None = None, tries: int = 3,
         sign=None, get=None) -> dict:
    """Send a request and return the scheduler's reply (a dict), resending the same id up to `tries`
    times. `sign(fields) -> fields` adds a credential (scheduler/auth.py): a fresh one per try, as
    each is valid once. Connection errors are the caller's to map (each client knows its own).

    Every try carries the same expiry: the scheduler drops a request it reads after it, so a client
    that gives up can say for sure that nothing was done. The margin leaves the scheduler time to
    commit what it read just before the expiry; `get(key)` then finds that answer in the done key."""
    timeout = request_timeout() if timeout is None else timeout
    fields = request_fields(op, body, expires=time.time() + timeout - min(5.0, timeout / 4))
    rid = fields["rid"]
    per_try = timeout / tries
    for _ in range(tries):
        send(send_commands(k, user, sign(fields) if sign else fields))
        got = await_reply(pop, k, rid, per_try)
        if got:
            return json.loads(got[1])
    late = get(k.done(rid)) if get else None
    if late:
        return json.loads(late)
    raise UnreachableError(f"the scheduler did not answer within {timeout:.0f}s: request {rid} was not submitted "
                           "(the scheduler drops it once it expires; is `labq scheduler` running?)")
