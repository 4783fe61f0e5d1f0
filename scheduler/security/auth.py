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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RefusedError


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
    from . import munge  # only in multi-user mode: the single-host CLI never loads ctypes
    cred = munge.encode(digest(fields["op"], fields["rid"], fields["body"]), security.get("munge_socket", ""),
                        int(security.get("credential_ttl", 300)))
    return {**fields, "cred": cred}


def credential_key(cred: str) -> str:
    """The id under which a credential's first use is recorded (never the credential itself)."""
    return hashlib.sha256(cred.encode()).hexdigest()[:32]


REPLAYED = "request refused: replayed credential (already used by another request)"


@dataclass(frozen=True)
class Vouched:
    """What munge says of one request: who made it, and whether munged had decoded it before."""
    uid: int
    key: str              # credential_key(cred): the replay record's id
    replayed: bool


def identify(fields: dict, inbox_user: str, security: dict, now: float, claim) -> str:
    """The user name a request speaks for, or RefusedError saying why not.

    `claim(key)` records in Redis (so that it survives a scheduler restart) that this inbox entry
    uses the credential with that key: "new", "same" (this entry claimed it before: a redelivery),
    or None (another entry did: a replay)."""
    if security.get("auth") != "munge":
        return inbox_user
    v = vouch(fields, security, now)
    return settle(v, claim(v.key))


def identify_many(entries, security: Mapping[str, Any], now: float, claim_many) -> list:
    """identify() for a batch [(inbox user, fields, entry id)]: a user name or a RefusedError for
    each. The credentials are decoded concurrently (munged serves several at once; ctypes lets go
    of the GIL) and claimed in one round trip: `claim_many([(key, entry id), …])` -> ["new" |
    "same" | None, …], in order (a credential used twice in one batch: the second is a replay)."""
    if security.get("auth") != "munge":
        return [user for user, _, _ in entries]
    from concurrent.futures import ThreadPoolExecutor

    first: dict = {}     # a credential seen earlier in this batch is a replay: never decoded twice at once

    def one(i_fields):
        i, fields = i_fields
        cred = fields.get("cred")
        if isinstance(cred, str) and first[cred] != i:
            return RefusedError(REPLAYED)
        try:
            return vouch(fields, security, now)
        except RefusedError as e:
            return e
    for i, (_, f, _) in enumerate(entries):
        if isinstance(f.get("cred"), str):
            first.setdefault(f["cred"], i)
    with ThreadPoolExecutor(max_workers=min(4, max(1, len(entries)))) as pool:
        vouched = list(pool.map(one, enumerate(f for _, f, _ in entries)))
    claims = [(v.key, entry) for v, (_, _, entry) in zip(vouched, entries) if isinstance(v, Vouched)]
    held = iter(claim_many(claims) if claims else ())
    out = []
    for v in vouched:
        if isinstance(v, RefusedError):
            out.append(v)
            continue
        try:
            out.append(settle(v, next(held)))
        except RefusedError as e:
            out.append(e)
    return out


def vouch(fields: dict, security: dict, now: float) -> Vouched:
    """Decode and check a request's credential: present, valid, made for this request, fresh."""
    from . import munge
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
    return Vouched(d.uid, credential_key(cred), d.code == munge.REPLAYED)


def settle(v: Vouched, held) -> str:
    """The user, once the credential's first use is known. munged reports REPLAYED on a second
    decode; so does a redelivery of an entry the scheduler decoded before it crashed. The claim
    tells them apart: it is held by the first entry only."""
    if held is None or (v.replayed and held != "same"):
        raise RefusedError(REPLAYED)
    try:
        return pwd.getpwuid(v.uid).pw_name
    except KeyError:
        raise RefusedError(f"request refused: uid {v.uid} has no account on the scheduler's host") from None
