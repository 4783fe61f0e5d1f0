"""Requests and replies: the one place a request is built, sent and answered, and the wake token
written (here, by clients) and parsed (here, by the scheduler).

A request is one JSON object LPUSHed onto `labq:requests` (the only thing the client role may do to
that list: no ids to choose, nothing to trim, no key per user), then a token on the wake list; the
client then blocks on `labq:reply:<rid>`. If no reply comes it sends the same request
id again: the scheduler answers a repeated id from its record instead of acting twice, so retries are
always safe.

Both clients use this module: the full one (redis-py, scheduler/client.py) and the thin one of the hot
CLI commands (resp.py, scheduler/thinclient.py). It works on raw commands through two callables, so
it imports no Redis library itself:
  send(cmds)            runs a list of commands (tuples of words) as one pipeline, returning each
                        one's reply or error (an exception) in its place;
  pop(key, seconds)     BLPOPs one key for up to `seconds` (whole), returning (key, value) or None.
"""
import os
import time

from .. import cjson
from ..errors import UnreachableError, UsageError
from .keys import Keys

_USER = "user:"
POP_SLICE = 20      # seconds per BLPOP: under the connection's read timeout (30 s)
# A request's text is most of a client's Python, run cold in a busy drain (issue 39 item 3), where each
# Python call costs: cjson's C encoder and scanner are called straight, json.dumps's and json.loads's
# layers left out (and `json`'s import with them); the same text and values.
_TEXT = cjson.compact       # json.dumps(o, separators=(",", ":"))
parsed = cjson.loads        # a reply's JSON (as the scheduler writes it); json.loads's reading and error otherwise


def request_fields(op: str, body: dict, rid: str | None = None, expires: float | None = None) -> dict:
    """The stream fields of one request. Everything a request carries is added here, and only here."""
    rid = rid or body.get("rid") or os.urandom(16).hex()   # uuid4().hex's shape, without importing uuid
    fields = {"rid": rid, "op": op, "body": _TEXT(body)}
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
    """What a client pushes on the wake list: any token wakes the scheduler, which reads nothing in
    it (`user:<name>` is kept for the logs of older tools)."""
    return _USER + user


def send_commands(k: Keys, user: str, fields: dict, legacy: bool = False) -> list[tuple]:
    """The request (with the sender's name: it counts only where auth is "none", where whoever can
    write to Redis is that user) onto the request list, then the wake-up. `legacy`: the body as a
    string of JSON, for a scheduler from before 2026-12-06 (OLD_REFUSAL)."""
    entry = _TEXT({**fields, "user": user}) if legacy else entry_text(fields, user)
    return [("LPUSH", k.requests, entry), ("LPUSH", k.wake, _USER + user)]     # wake_token's, without its call


def entry_text(fields: dict, user: str) -> str:
    """One JSON object: the text fields, then a body that is a JSON object written as itself, last
    (`...,"body":{...}}`), not as a string of JSON: the scheduler cuts it off at that first `,"body":{`
    (no text field can hold `,"` unescaped) and parses it once (daemon/decode.entry), where a string
    was parsed twice, its escapes and all (~20 µs a request, issue 39 item 3). The body's text is the
    very text a credential signed. Any other body (tests send odd ones) goes as a string, as clients
    before this did, and the scheduler takes both."""
    head = dict(fields)
    body = head.pop("body", None)
    head["user"] = user
    text = _TEXT(head)
    if isinstance(body, str) and body[:1] == "{" and body[-1:] == "}":
        return f'{text[:-1]},"body":{body}}}'
    return _TEXT({**fields, "user": user})


def _sent(replies, rid: str) -> None:
    """The request is on the list, or it was refused: one line, and nothing was submitted. (A failed
    wake-up alone does not matter: the scheduler reads the list every tick.)"""
    first = replies[0] if replies else None
    if not isinstance(first, Exception):
        return
    text = str(first).splitlines()[0][:200] if str(first) else type(first).__name__
    if text.startswith("OOM") or "'maxmemory'" in text:     # redis-py drops the "OOM" code
        raise UnreachableError(f"Redis is full (maxmemory reached): request {rid} was not submitted; "
                               "an admin must free memory or raise maxmemory (docs/admin.md)")
    raise UnreachableError(f"Redis refused request {rid} ({text}); it was not submitted")


def await_reply(pop, k: Keys, rid: str, seconds: float):
    """BLPOP in slices shorter than the connection's socket timeout, so that a caller may wait
    minutes (a 100,000-task array) without the socket giving up first."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        got = pop(k.reply(rid), max(1, min(POP_SLICE, int(left))))
        if got or left <= POP_SLICE:
            return got


# What a scheduler from before 2026-12-06 answers a body sent as an object (its decode.entry took text
# fields only), having done nothing.
OLD_REFUSAL = "'body': expected UTF-8 text, got dict"


def call(send, pop, k: Keys, user: str, op: str, body: dict, timeout: float | None = None, tries: int = 3,
         sign=None, lost=(), send_pop=None, first=None, got=None) -> dict:
    """_call; a scheduler from before the body went as an object (OLD_REFUSAL, which did nothing) is
    asked again the old way, under a new request id (its refusal is kept for the first). `first`: a first
    try the caller made itself (_call); `got`: the reply it had, the request then answered."""
    if got is None:
        got = _call(send, pop, k, user, op, body, timeout, tries, sign, lost, send_pop=send_pop, first=first)
    if got.get("ok") is False and got.get("error") == OLD_REFUSAL:
        got = _call(send, pop, k, user, op, body, timeout, tries, sign, lost, True, send_pop)
    return got


def _call(send, pop, k: Keys, user: str, op: str, body: dict, timeout: float | None, tries: int, sign, lost,
          legacy: bool = False, send_pop=None, first=None) -> dict:
    """Send a request and return the scheduler's reply (a dict), resending the same id up to `tries`
    times. `sign(fields) -> fields` adds a credential (scheduler/security/auth.py): a fresh one per try, as
    each is valid once. `lost`: the connection errors of the caller's client. `send_pop(cmds, key,
    seconds, check)`, where the client has it: the commands and the first BLPOP of the reply in one
    round trip, `check` called with the commands' replies before the wait (the thin client's: one
    round trip a request, not two; ~10-25 % of its CPU a request, issue 39 item 3). `first`: (fields,
    sent) of a first try the caller made itself, here carried on as that try (thinstore.ThinStore._first:
    the usual case in one function; sent: the request went and its first read is in the connection's
    reader, send_pop reading on from there; else nothing went, and the try is made here).

    Every try carries the same expiry, and the scheduler commits nothing of a request after it
    (checked at commit, commit.py): the client waits past the expiry by a margin, so once it gives
    up with no answer it can say for sure that nothing was done. Where Redis went away under it,
    it cannot: it says so, with the request id that `labq stat --rid` answers for."""
    timeout = request_timeout() if timeout is None else timeout
    fields = first[0] if first else request_fields(op, body, expires=time.time() + timeout - min(5.0, timeout / 4))
    rid, resumed = fields["rid"], bool(first and first[1])
    per_try = timeout / tries
    went: list = []          # a try's request is on the list (_sent passed)

    def check(replies) -> None:     # made once a call, not a try: each is run cold (issue 39)
        _sent(replies, rid)
        went.append(True)
    try:
        for _ in range(tries):
            cmds = send_commands(k, user, sign(fields) if sign else fields, legacy)
            if send_pop is None:
                check(send(cmds))
                got = await_reply(pop, k, rid, per_try)
            else:       # the first slice's wait goes with the request; any later ones as await_reply's
                start = time.monotonic()
                got = send_pop(cmds, k.reply(rid), max(1, min(POP_SLICE, int(per_try))), check, resumed)
                resumed = False
                if not got and per_try > POP_SLICE:
                    got = await_reply(pop, k, rid, per_try - (time.monotonic() - start))
            if got:
                return parsed(got[1])
        late = send([("LPOP", k.reply(rid))])[0]     # an answer pushed as the last wait ended
    except lost as e:
        what = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        if not went and _never_connected(e):
            raise UnreachableError(f"Redis does not answer ({what}): request {rid} was not submitted") from None
        raise UnreachableError(f"Redis stopped answering ({what}): request {rid} is unknown - check "
                               f"`labq stat --rid {rid}`") from None
    if isinstance(late, (str, bytes)):
        return parsed(late)
    if op == "cancel":     # a mass cancel begun in time is finished past its expiry (daemon/requests.py)
        raise UnreachableError(f"the scheduler did not answer within {timeout:.0f}s: request {rid} is unknown "
                               f"(a cancel of many jobs goes on once begun) - check `labq stat --rid {rid}`")
    raise UnreachableError(f"the scheduler did not answer within {timeout:.0f}s: request {rid} was not submitted "
                           "(the scheduler drops it once it expires; is `labq scheduler` running?)")


def _never_connected(e: Exception) -> bool:
    """Whether the error says the connection was never made (nothing can have been sent)."""
    text = str(e)
    return isinstance(e, (ConnectionRefusedError, FileNotFoundError)) or "connecting to" in text \
        or getattr(e, "sent", True) is False
