"""What becomes of one request before a handler sees it, decided from what the shell read
(daemon/requests.py): who sent it, the answer already given to its id, how much its sender sent
this tick, the wall clock at the moment the request is handled. Pure: an answer (refused, or a
retry answered again) or the decoded request for a handler (handlers.py), whose Change the shell
commits with the request's ack."""
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import LabqError, RefusedError, UsageError
from ..jobs import idruns
from ..jobs.idruns import Runs
from ..jobs.model import Job
from . import decode
from .change import Change

# Per user and tick, at intake: beyond these a user's requests are refused unhandled (one user's
# flood is read at the cost of reading it, never at the cost of the handlers).
MAX_USER_REQUESTS_PER_TICK = 2_000
MAX_USER_BYTES_PER_TICK = 64 << 20

# Who sent a request: a login name, the error it was refused with, or what the shell knows of neither.
Sender = TypeVar("Sender")


@dataclass(frozen=True)
class Answered:
    """A request answered without a handler: `change.reply` is the answer; `remember` whether its id
    keeps it for retries (not while the sender is unknown: the id would bind its real owner)."""
    change: Change
    remember: bool = True


def bounded(sender: Sender, requests: int, size: int) -> Sender | RefusedError:
    """The sender, or a RefusedError once they passed this tick's share (`requests` so far with this
    one, `size` bytes): one user's flood is answered at the cost of reading it, and cannot take the
    tick from the rest. A refusal or an unknown sender passes through as it is."""
    if not isinstance(sender, str):
        return sender
    if requests > MAX_USER_REQUESTS_PER_TICK or size > MAX_USER_BYTES_PER_TICK:
        return RefusedError(f"user {sender} sent more than {MAX_USER_REQUESTS_PER_TICK} requests or "
                            f"{MAX_USER_BYTES_PER_TICK >> 20} MiB in one tick; refused, send it again in a moment")
    return sender


def screen(eid: str, fields: Mapping[str, str], sender: object, prior: dict[str, Any] | None,
           max_bytes: int) -> "Answered | decode.Request":
    """Identified → answered before (a client retry, or a redelivery after a crash: answered again,
    never redone) → valid (decode.py). `sender` is a login name or the RefusedError it was refused
    with; `prior` the answer this request id was given (None: none)."""
    if isinstance(sender, RefusedError):
        return Answered(Change(reply={"ok": False, "code": sender.exit_code, "error": str(sender)}), remember=False)
    if prior is not None:
        return Answered(Change(reply=prior))
    try:
        return decode.request(fields, eid, max_bytes)
    except LabqError as e:
        return refusal(decode.reply_id(fields, eid), str(e), e.exit_code)


def expired(req: decode.Request, now: float, wall: float) -> Answered | None:
    """A request read after its client's deadline: the client has given up and told its user nothing
    was done, so nothing is. `wall` is the real time (a long tick may read a request after its
    client gave up), never later than the tick's `now` is stamped on anything."""
    late = max(now, wall) - (req.expires or float("inf"))
    if late <= 0:
        return None
    return refusal(req.rid, f"expired: read {late:.1f}s after the client's deadline; not done", 4)


def refusal(rid: str, error: str, code: int = 2) -> Answered:
    return Answered(Change(reply={"ok": False, "code": code, "error": error, "rid": rid}))


def status_of(body: Mapping[str, Any]) -> str:
    """The request id a `labq stat --rid` asks about."""
    rid = body.get("of")
    if not isinstance(rid, str) or not decode.RID.match(rid):
        raise UsageError("--rid: expected the request id a client printed (like 3f2a…, 32 hex digits)")
    return rid


def status(rid: str, kept: Mapping[str, Any] | None, job: Job | None, user: str,
           admins: Collection[str]) -> dict[str, Any]:
    """What became of request `rid`, as far as `user` may see it: `kept` its answer (None: none kept),
    `job` the record its answer names (None: none, or gone). Requests are handled in the order they
    were sent: one sent before this question is answered by now."""
    out = {"ok": True, "rid": rid}
    unknown = {**out, "state": "unknown", "detail": "the scheduler has no answer for it (never received, "
               "or answered more than a day ago): nothing was done"}
    if kept is None:
        return unknown
    if not kept.get("ok"):
        return {**out, "state": "not submitted", "detail": str(kept.get("error", ""))[:400]}
    jid = kept.get("job_id")
    if isinstance(jid, int):
        if job is not None and job.user != user and user not in admins:
            return unknown     # not theirs to see
        return {**out, "state": "submitted", "job_id": jid, "count": kept.get("count", 1)}
    return {**out, "state": "done", "detail": "answered ok"}


def resumed(prior: list[Any], change: Change) -> Change:
    """A mass cancel handled again after a leader died between its chunks: `prior` the runs of ids
    that leader committed (store.partial, read by the shell), `change` this handling's whole answer.
    The reply names both, what was cancelled before once (those records have ended since)."""
    if not prior:
        return change
    assert change.reply is not None, "a mass cancel's change carries its reply (handlers._chunks)"
    gone, r = idruns.covered(prior), change.reply
    kept = [x for x in r["results"] if x["id"] not in gone]
    runs = Runs()
    runs.extend(prior)
    runs.extend(idruns.without(r["runs"], gone))
    return Change(reply=idruns.reply(runs, idruns.expand(prior) + kept, [x for x in kept if not x["ok"]]))
