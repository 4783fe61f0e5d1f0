"""Exported environments in Redis, once per distinct text (issue 39).

A submission's environment (`sub --export`, by default the submitter's whole shell: ~1.5 KB) was a
key of its own: 100,000 single jobs from one shell held 100,000 equal copies, 60 % of Redis's bytes
per pending job. Now keys.job_env(ref) holds "@DIGEST" (codec.ENV_BY_DIGEST), the text is stored
once under keys.env_text(DIGEST), and keys.env_refs(DIGEST) is the set of submissions naming it:
the text goes with the last of them (`drop`). A set, not a count, so that writing a submission's
environment twice (a new array's rest and its first task in one batch) or dropping it twice
changes nothing. A job_env holding the text itself (before schema 3; `by_digest` moves those) is
read as it was. Clients and nodes read none of these keys (acl.NOT_READ): the scheduler reads them
for their owners (reads.private) and copies the text under a node's name at dispatch (`sources`,
dispatchq.push).
"""
from . import codec
from .keys import Keys

CHUNK = 1000


def put(p, k: Keys, ref: int, job) -> None:
    """Into a pipeline: submission `ref`'s environment (job.env), its text stored once for all."""
    text, digest = codec.env_stored(job)
    p.set(k.job_env(ref), codec.ENV_BY_DIGEST + digest)
    p.set(k.env_text(digest), text)     # always: a text its last submission's drop took meanwhile comes back
    p.sadd(k.env_refs(digest), ref)


def put_new(p, k: Keys, jobs) -> None:
    """The environments of a batch's new jobs: once per submission (a job, or an array's first task),
    grouped by text: one MSET of their job_env keys, and per distinct text one SET of it and one SADD
    of the submissions naming it. A commit of 100 submits from one shell was 300 commands, 100 of them
    the same ~1.5 KB SET (issue 39: most of the transaction's bytes, ~3 of its arguments a request).
    Each commit that names a text still writes it: the drop race stays as `put` has it."""
    named: dict = {}        # digest -> (text, [refs])
    keys: dict = {}         # job_env key -> "@DIGEST"
    for job in jobs:
        if job.env and codec.env_ref(job) == job.id:
            text, digest = codec.env_stored(job)
            keys[k.job_env(job.id)] = codec.ENV_BY_DIGEST + digest
            got = named.get(digest)
            if got is None:
                named[digest] = got = (text, [])
            got[1].append(job.id)
    if keys:
        p.mset(keys)
    for digest, (text, refs) in named.items():
        p.set(k.env_text(digest), text)
        p.sadd(k.env_refs(digest), *refs)


def text(r, k: Keys, ref: int):
    """Submission `ref`'s environment as JSON text, whichever way it is stored; None: it has none."""
    raw = r.get(k.job_env(ref))
    digest = codec.env_digest(raw)
    return r.get(k.env_text(digest)) if digest else raw


def sources(r, k: Keys, refs) -> dict[int, str]:
    """The key that holds each submission's environment text (ref -> key), read just before the
    transaction that dispatches their jobs copies it under the node's name (dispatchq.push): a
    node may read neither job_env nor env_text. One MGET for the batch."""
    refs = sorted(set(refs))
    if not refs:
        return {}
    out = {}
    for ref, raw in zip(refs, r.mget([k.job_env(x) for x in refs])):
        digest = codec.env_digest(raw)
        out[ref] = k.env_text(digest) if digest else k.job_env(ref)
    return out


def drop(r, k: Keys, refs) -> None:
    """The environments of submissions that left Redis: their job_env keys, and each text no
    submission names any more."""
    refs, digests = list(refs), set()
    for i in range(0, len(refs), CHUNK):
        chunk = refs[i:i + CHUNK]
        p = r.pipeline(transaction=False)
        for ref, raw in zip(chunk, r.mget([k.job_env(x) for x in chunk])):
            digest = codec.env_digest(raw)
            if digest:
                p.srem(k.env_refs(digest), ref)
                digests.add(digest)
        p.delete(*(k.job_env(x) for x in chunk))
        p.execute()
    for digest in sorted(digests):
        _drop_text(r, k, digest)


def _drop_text(r, k: Keys, digest: str) -> None:
    """The text, once its set is empty; a submit that names it meanwhile keeps it (the set is
    WATCHed: the transaction is then tried again, and finds it named)."""
    refs = k.env_refs(digest)

    def unnamed(p) -> None:
        if not p.scard(refs):
            p.multi()
            p.delete(k.env_text(digest))
    r.transaction(unnamed, refs)


def by_digest(r, k: Keys) -> None:
    """Schema 2 -> 3: every job_env that holds its text names it by digest instead. Idempotent, a
    transaction per CHUNK keys: a scheduler that died half-way does the rest at its next start
    (a job_env naming a digest is left as it is)."""
    keys = []
    for key in r.scan_iter(match=k.job_env("*"), count=CHUNK):
        keys.append(key)
        if len(keys) >= CHUNK:
            _by_digest(r, k, keys)
            keys = []
    if keys:
        _by_digest(r, k, keys)


def _by_digest(r, k: Keys, keys: list) -> None:
    p = r.pipeline(transaction=True)
    for key, raw in zip(keys, r.mget(keys)):
        if raw is None or codec.env_digest(raw):
            continue
        key, raw = (x.decode() if isinstance(x, bytes) else x for x in (key, raw))
        ref = key.rpartition(":")[2]
        if not ref.isdigit():
            continue        # not a submission's (job_env's refs are ids)
        digest = codec.text_digest(raw)
        p.set(k.env_text(digest), raw)
        p.sadd(k.env_refs(digest), int(ref))
        p.set(key, codec.ENV_BY_DIGEST + digest)
    p.execute()
