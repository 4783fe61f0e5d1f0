"""The part of the config a client needs (the Redis URL and key prefix), read without the rest.

The hot CLI commands start in a few tens of milliseconds; validating the whole config (every
dataclass of config.py, the model) would cost as much as the command itself. They read only the
[redis] table, validated here by the same code config.py uses for it; the other tables (and
misspelt table names) are the daemons' and `labq config check`'s to refuse.
"""
import os

from .errors import ConfigError

DEFAULT_PATH = "/etc/labq/labq.toml"


def resolve_path(path: str | None) -> str | None:
    """`path`, else $LABQ_CONFIG, else /etc/labq/labq.toml if present, else None (built-in defaults)."""
    return path or os.environ.get("LABQ_CONFIG") or (DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None)


def read_toml(path: str) -> dict:
    import tomllib   # here, not at the top: without a config file the client never needs it
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except OSError as e:
        raise ConfigError(path, f"cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, f"not valid TOML: {e}") from None


def client_settings(path: str | None = None) -> dict:
    """{redis_url, prefix} of the config at `path` (resolved as config.load does)."""
    path = resolve_path(path)
    if not path:
        return {"redis_url": "", "prefix": "labq"}
    data = read_toml(path)
    return redis_table(_table("redis", data.get("redis", {})))


def redis_table(t):
    _check_keys("redis", t, {"url", "prefix"})
    url = _str("redis.url", t.get("url", ""))
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("redis.url", f"expected redis://host:port/db or unix:///path, got {url!r}")
    prefix = _str("redis.prefix", t.get("prefix", "labq"))
    if not prefix or ":" in prefix:
        raise ConfigError("redis.prefix", f"expected a non-empty name without ':', got {prefix!r}")
    return {"redis_url": url, "prefix": prefix}


def _str(key, v, choices=None):
    if not isinstance(v, str):
        raise ConfigError(key, f"expected a string, got {v!r}")
    if choices and v not in choices:
        raise ConfigError(key, f"expected one of {', '.join(choices)}, got {v!r}")
    return v


def _table(key, v):
    if not isinstance(v, dict):
        raise ConfigError(key, f"expected a table, got {v!r}")
    return v


def _check_keys(section, table, allowed):
    for k in table:
        if k not in allowed:
            raise ConfigError(f"{section}.{k}", f"unknown key (known: {', '.join(sorted(allowed))})")
