"""The layout version of labq's data in Redis, checked when a scheduler starts.

An upgrade with jobs queued must not let an older scheduler misread what a newer one wrote, nor a
newer one run on data it does not understand. `labq:schema` holds the version the data is in; a
scheduler of a newer layout migrates older data forward (one step per version, in MIGRATIONS) and
writes the new version; an older scheduler refuses to lead. Data without the key is treated as
version 1, the layout labq had before the key existed.
"""
import redis

from ..errors import UsageError
from .keys import Keys

CURRENT = 1
MIGRATIONS: dict[int, object] = {}   # from-version -> fn(r, keys) bringing the data to from-version + 1


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
