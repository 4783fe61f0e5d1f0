"""Who sent a request. In single-host mode (`security.auth = "none"`) the inbox a request came in by
names its sender: only the owner of the private 0700 Redis socket can write at all. In multi-user
mode (`security.auth = "munge"`) the inbox name means nothing: the request carries a MUNGE
credential whose payload is the digest of the request, and the sender is whoever munged vouches for.

A credential is refused when munge cannot decode it, when its payload is not this request's digest
(a credential lifted from one request and attached to another), when it is older than
`security.credential_ttl` by the scheduler's clock, or when it was already used by another inbox
entry (a replay). A redelivery of the same entry after a scheduler crash is not a replay.
"""
import hashlib
import pwd

from . import munge
from .errors import RefusedError


def digest(op: str, rid: str, body: str) -> bytes:
    """What a credential binds: the operation, the request id and the exact body text."""
    h = hashlib.sha256()
    for part in ("labq-request-v1", op, rid, body):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest().encode()


def sign(fields: dict, security: dict) -> dict:
    """The request fields with a fresh credential added (multi-user mode), else unchanged."""
    if security.get("auth") != "munge":
        return fields
    cred = munge.encode(digest(fields["op"], fields["rid"], fields["body"]), security.get("munge_socket", ""),
                        int(security.get("credential_ttl", 300)))
    return {**fields, "cred": cred}


def credential_key(cred: str) -> str:
    """The id under which a credential's first use is recorded (never the credential itself)."""
    return hashlib.sha256(cred.encode()).hexdigest()[:32]


def identify(fields: dict, inbox_user: str, security: dict, now: float, claim) -> str:
    """The user name a request speaks for, or RefusedError saying why not.

    `claim(key)` records in Redis (so that it survives a scheduler restart) that this inbox entry
    uses the credential with that key: "new", "same" (this entry claimed it before: a redelivery),
    or None (another entry did: a replay)."""
    if security.get("auth") != "munge":
        return inbox_user
    cred = fields.get("cred")
    if not isinstance(cred, str) or not cred:
        raise RefusedError("request refused: no munge credential (security.auth = \"munge\"; "
                           "is munged running on the submitting host?)")
    try:
        d = munge.decode(cred, security.get("munge_socket", ""))
    except munge.MungeError as e:
        raise RefusedError(f"request refused: invalid credential ({e})") from None
    if d.payload != digest(str(fields.get("op", "")), str(fields.get("rid", "")), str(fields.get("body", ""))):
        raise RefusedError("request refused: the credential was made for another request")
    ttl = float(security.get("credential_ttl", 300))
    if d.code in (munge.EXPIRED, munge.REWOUND) or not (now - ttl <= d.encoded_at <= now + ttl):
        raise RefusedError(f"request refused: the credential expired (made at {d.encoded_at:.0f}, "
                           f"valid for {ttl:.0f}s)")
    # munged reports REPLAYED on a second decode; so does a redelivery of an entry the scheduler
    # decoded before it crashed. The claim tells them apart: it is held by the first entry only.
    held = claim(credential_key(cred))
    if held is None or (d.code == munge.REPLAYED and held != "same"):
        raise RefusedError("request refused: replayed credential (already used by another request)")
    try:
        return pwd.getpwuid(d.uid).pw_name
    except KeyError:
        raise RefusedError(f"request refused: uid {d.uid} has no account on the scheduler's host") from None
