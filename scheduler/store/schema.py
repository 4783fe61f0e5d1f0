"""The layout version of labq's data in Redis, checked when a scheduler starts.

An upgrade with jobs queued must not let an older scheduler misread what a newer one wrote, nor a
newer one run on data it does not understand. `labq:schema` holds the version the data is in; a
scheduler of a newer layout migrates older data forward (one step per version, in MIGRATIONS) and
writes the new version; an older scheduler refuses to lead. Data without the key is treated as
version 1, the layout labq had before the key existed.
"""
import json

import redis

from ..errors import UsageError
from . import envs
from .keys import Keys

CURRENT = 3
CHUNK = 1000


def private_apart(r: redis.Redis, k: Keys) -> None:
    """1 -> 2 (issue 34): scripts, and exported environments written before they were kept apart,
    move out of the job records (and arrays' shared specs) into keys.script and keys.job_env, which
    the client role cannot read; a record then says `scripted`. Idempotent: a scheduler that died
    half-way does the rest at its next start (a moved record holds nothing to move)."""
    ids = [int(i) for key in (k.active, k.history) for i in r.zrange(key, 0, -1)]
    spec_scripted: dict[int, bool] = {}

    def scripted_spec(ref: int) -> bool:
        """Whether array `ref`'s spec held a script: moved to keys.script first (its {argv} stays)."""
        if ref not in spec_scripted:
            raw = r.get(k.spec(ref))
            spec = json.loads(raw) if raw else {}
            if "script" in spec:
                if spec["script"]:
                    r.set(k.script(ref), spec["script"], nx=True)
                r.set(k.spec(ref), json.dumps({"argv": spec.get("argv", [])}, separators=(",", ":")))
            spec_scripted[ref] = bool(r.exists(k.script(ref)))
        return spec_scripted[ref]

    for n in range(0, len(ids), CHUNK):
        chunk = ids[n:n + CHUNK]
        p = r.pipeline(transaction=True)
        for jid, raw in zip(chunk, r.mget([k.job(i) for i in chunk])):
            d = json.loads(raw) if raw else {}
            ref = d.get("array_id") if d.get("array_id") is not None else jid
            script, env = d.pop("script", None), d.pop("env", None)
            if script:
                p.set(k.script(ref), script, nx=True)
            if env:
                p.set(k.job_env(ref), json.dumps(env, separators=(",", ":")), nx=True)
            mark = bool(script) or (bool(d.get("spec")) and not d.get("scripted") and scripted_spec(int(d["spec"])))
            if mark:
                d["scripted"] = True
            if raw and (mark or script is not None or env is not None):
                p.set(k.job(jid), json.dumps(d, separators=(",", ":")))
        p.execute()


# from-version -> fn(r, keys): the data at from-version + 1. 2 -> 3 (issue 39): each exported environment's
# text stored once, job_env naming it by digest (store/envs.py).
MIGRATIONS: dict[int, object] = {1: private_apart, 2: envs.by_digest}


def check(r: redis.Redis, keys: Keys, current: int = CURRENT) -> int:
    """Bring the data to `current` or refuse; returns the version found."""
    raw = r.get(keys.schema)
    found = int(raw) if raw is not None else 1
    if found > current:
        raise UsageError(f"the data in Redis is schema {found}, newer than this labq understands ({current}): "
                         "upgrade labq on this machine before starting its scheduler")
    for v in range(found, current):
        MIGRATIONS[v](r, keys)
    if raw is None or found != current:
        r.set(keys.schema, current)
    return found
