"""The request/reply protocol over Redis, both sides in one module.

A client XADDs a request to its user's inbox stream `labq:inbox:<user>` (fields: rid, op, body and,
under munge, the credential) and pushes a wake token onto `labq:wake`; the scheduler drains the
wake list (SchedulerStore.wait_wake), learns new inboxes from the tokens, reads its consumer group,
and answers by RPUSHing the reply onto `labq:reply:<rid>` (writes.put_reply, inside the transaction
that applies the request). The client BLPOPs that list. A repeated rid is answered from the
remembered reply (`labq:done:<rid>`, SchedulerStore.replies_done), so a client may resend the same
request safely.

The wake token is written and parsed here only: `user:<name>` (a client's request).
"""
import time

from .keys import Keys

INBOX_MAXLEN = 100_000     # per user; approximate trimming keeps XADD O(1)
_USER = "user:"


def wake_token(user: str) -> str:
    return _USER + user


def woken_users(tokens) -> set[str]:
    """The users whose inbox the wake tokens name; tokens of other kinds and malformed names are
    skipped (a name with ':' cannot be an inbox)."""
    return {t[len(_USER):] for t in tokens if t.startswith(_USER) and t[len(_USER):] and ":" not in t[len(_USER):]}


def send(r, k: Keys, user: str, fields: dict) -> None:
    """Post one request to the user's inbox and wake the scheduler, in one round trip."""
    p = r.pipeline()
    p.xadd(k.inbox(user), fields, maxlen=INBOX_MAXLEN, approximate=True)
    p.lpush(k.wake, wake_token(user))
    p.execute()


def await_reply(r, k: Keys, rid: str, seconds: float) -> str | None:
    """The reply to `rid` (JSON text), or None after `seconds`. BLPOP in slices shorter than the
    connection's socket timeout (30 s), so that a caller may wait minutes (a 100,000-task array)
    without the socket giving up first."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        got = r.blpop([k.reply(rid)], timeout=max(1, min(20, int(left))))
        if got:
            return got[1]
        if left <= 20:
            return None

