"""What code outside store/ may know of Redis without holding a connection: which exceptions mean
it is away or refused, a URL's parts, and the address a message may name (never its login).

Only store/ imports the connection modules (redis-py, conn.py, resp.py, sentinel.py;
tests/test_architecture.py checks it), so this module is how the daemons, the worker and the CLI
catch a lost Redis. It imports nothing at start: the thin client's commands (`labq sub`, `stat`)
must not load redis-py, so redis-py's exception classes are looked up on first use (ERRORS, REFUSED,
AWAY: an `except faults.ERRORS` reads the name only once something was raised).
"""


class RespError(Exception):
    """An error reply from the server (`-ERR …`, `-WRONGTYPE …`, `-NOAUTH …`) over store/resp.py."""


class ConnectionLost(OSError):
    """The server could not be reached, closed the connection, or did not answer in time (store/resp.py).
    `sent`: whether the commands had been sent (the server may have run them)."""

    refused = False     # a write the server refused (behind Sentinel: READONLY, NOREPLICAS): nothing was done

    def __init__(self, message: str, sent: bool = False):
        super().__init__(message)
        self.sent = sent


def unquote(s: str) -> str:
    """A URL's %-escaped part as text (urllib only for one that has an escape)."""
    if "%" not in s:
        return s
    from urllib.parse import unquote
    return unquote(s)


def parse_url(url: str) -> dict:
    """redis://, rediss://, unix:// → {scheme, host, port, path, db, username, password, protocol, query}.

    URLs are redis-py's: redis://[[user]:password@]host[:port][/db], rediss://… (TLS), and
    unix://[[user]:password@]/path/to.sock[?db=N][&password=…]; `?protocol=3` speaks RESP3 (HELLO 3).
    A sentinel:// URL is store/sentinel.py's (resp.url_parts)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"expected redis://, rediss://, unix:// or sentinel:// URL, got {url!r}")
    rest, _, query_s = rest.partition("?")
    query = dict(q.partition("=")[::2] for q in query_s.split("&") if q)
    query = {k: unquote(v) for k, v in query.items()}
    cred, at, where = rest.rpartition("@")
    user, _, password = cred.partition(":") if at else ("", "", "")
    out = {"scheme": scheme, "username": unquote(user) or None, "password": unquote(password) or None,
           "host": None, "port": None, "path": None, "db": 0, "protocol": int(query.get("protocol", 2)),
           "query": query}
    if query.get("password"):
        out["password"] = query["password"]
    if scheme == "unix":
        out["path"] = where
    else:
        hostport, _, db = where.partition("/")
        host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else (hostport, "", "")
        if not colon:
            host, port = hostport, ""
        out["host"] = host.strip("[]") or "localhost"
        out["port"] = int(port or 6379)
        out["db"] = int(db) if db else 0
    if query.get("db"):
        out["db"] = int(query["db"])
    return out


def without_credentials(url: str) -> str:
    """`url` without user and password (in the netloc or the query): what a message may show."""
    scheme, sep, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    where = rest.rpartition("@")[2]
    query = "&".join(q for q in query.split("&") if q and q.split("=", 1)[0] not in ("password", "username"))
    return f"{scheme}{sep}{where}" + (f"?{query}" if query else "")


def is_full(e: Exception) -> bool:
    """Redis refused a write for want of memory (maxmemory with noeviction: it evicts nothing)."""
    import redis
    return isinstance(e, redis.exceptions.OutOfMemoryError) or "'maxmemory'" in str(e)


def _redis_py() -> dict:
    import redis
    errors = (redis.ConnectionError, redis.TimeoutError, ConnectionRefusedError, FileNotFoundError)
    return {
        "ERRORS": errors,                   # Redis away (redis-py): refused, gone, timed out, loading
        "REFUSED": redis.RedisError,        # any error reply (NOPERM, a bad password, an unknown command)
        # Redis away for a transaction too: EXECABORT when a queued command was refused (LOADING after a restart).
        "AWAY": errors + (redis.exceptions.ExecAbortError,),
    }


def __getattr__(name: str):
    if name in ("ERRORS", "REFUSED", "AWAY"):
        value = _redis_py()[name]
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
