"""Redis connections from a URL (redis://, rediss://, unix://)."""
import redis

from ..errors import UnreachableError

ERRORS = (redis.ConnectionError, redis.TimeoutError, ConnectionRefusedError, FileNotFoundError)


def connect(url: str, **kw) -> redis.Redis:
    if not url:
        raise UnreachableError("no Redis URL: set redis.url in the config, or start `labq up`")
    kw.setdefault("socket_connect_timeout", 5)
    # redis-py 8 defaults to a 5 s read timeout, shorter than our blocking reads (BLPOP up to 10 s);
    # keep every blocking call well under this.
    kw.setdefault("socket_timeout", 30)
    kw.setdefault("health_check_interval", 30)
    return redis.Redis.from_url(url, decode_responses=True, **kw)


def ping(r: redis.Redis) -> None:
    try:
        r.ping()
    except ERRORS as e:
        raise UnreachableError(f"Redis at {describe(r)} does not answer: {e}") from None


def describe(r: redis.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    return kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"


def connect_raw(url: str, **kw) -> redis.Redis:
    """A bytes connection of its own for RQ (RQ needs undecoded replies and changes socket timeouts)."""
    kw.setdefault("socket_connect_timeout", 5)
    return redis.Redis.from_url(url, **kw)
