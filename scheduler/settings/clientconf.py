"""The part of the config a client needs (the Redis URL and key prefix), read without the rest.

The hot CLI commands start in a few tens of milliseconds; validating the whole config (every
dataclass of config.py, the model) would cost as much as the command itself. They read only the
[redis] and [security] tables, validated here by the same code config.py uses for them; the other
tables (and misspelt table names) are the daemons' and `labq config check`'s to refuse.

Pure but for reading the file: the settings cache in the user's cache directory (whose path is in
the environment) is clientcache.py's, which config.py never imports.
"""
from __future__ import annotations

import os

from .. import cjson, units
from ..errors import ConfigError, UsageError

DEFAULT_PATH = "/etc/labq/labq.toml"
# tomllib recurses per nesting level: a few thousand `[` exhaust Python's stack (issue 34).
TOO_DEEP = "arrays or inline tables nested too deeply"

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: the hot CLI commands import neither typing nor the config
    from typing import Any

    from .config import Config


def resolve_path(path: str | None, system: bool = True) -> str | None:
    """`path`, else /etc/labq/labq.toml if present (and `system`), else None (built-in defaults).
    $LABQ_CONFIG and $LABQ_NO_SYSTEM_CONFIG are read by the CLI (cli/out.py · config_source), so
    that the config modules read no environment."""
    if path:
        return path
    return DEFAULT_PATH if system and os.path.exists(DEFAULT_PATH) else None


def read_toml(path: str) -> dict[str, Any]:
    import tomllib  # here, not at the top: without a config file the client never needs it
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except OSError as e:
        raise ConfigError(path, f"cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, f"not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(path, f"not valid TOML for labq: {TOO_DEEP}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"not UTF-8 text (byte {e.start}): TOML files are UTF-8") from None


def books_of(cfg: Config) -> dict[str, Any]:
    """What `labq budget`, `labq report` and `labq share` read of a loaded config (config.Config)
    besides the client settings, as JSON keeps it: each budget's fields, the currency, rates.node_hour,
    the source, each account's share, priority.fairshare_half_life, the [priority] table, each QoS's
    priority, and the prices (rates, QoS rate factors, what a forecast reads)."""
    from dataclasses import asdict  # the config's import has paid for it
    r = cfg.rates
    got = {"budgets": [asdict(b) for b in cfg.budgets], "currency": cfg.rates.currency,
           "node_hour": dict(cfg.rates.node_hour), "source": cfg.source,
           "shares": {a.name: a.share for a in cfg.accounts},
           "fairshare_half_life": cfg.priority.fairshare_half_life,
           # what `labq prio` reads (multifactor.py): the weights and each QoS's priority
           "priority": asdict(cfg.priority), "qos": {q.name: q.priority for q in cfg.qos},
           # what `labq acct` prices COMMITTED with (money/pricing.Prices)
           "pricing": {"gpu_hour": r.gpu_hour, "gpu_hour_by_model": dict(r.gpu_hour_by_model), "cpu_hour": r.cpu_hour,
                       "mem_gib_hour": r.mem_gib_hour, "overhead_per_attempt": r.overhead_per_attempt,
                       "forecast_margin": r.forecast_margin, "billing": r.billing, "node_hour": dict(r.node_hour),
                       "kill_wait": cfg.kill_wait, "budget_mode": cfg.budget_mode,
                       "estimate_forecast": cfg.estimate.forecast,
                       "qos_rate_factor": {q.name: q.rate_factor for q in cfg.qos}}}
    books: dict[str, Any] = cjson.loads(cjson.dumps(got))
    return books


def _settings(data: dict[str, Any]) -> dict[str, Any]:
    out = redis_table(_table("redis", data.get("redis", {})))
    sec = _table("security", data.get("security", {}))
    refuse_removed(sec)
    out["security"] = security_table(sec)
    out["limits"] = limits(_table("scheduler", data.get("scheduler", {})))
    out["allow_volatile"] = _table("redis", data.get("redis", {})).get("allow_volatile") is True
    out["history_url"] = history_table(_table("history", data.get("history", {})))["url"]
    currency = _table("rates", data.get("rates", {})).get("currency", "USD")
    out["currency"] = currency if isinstance(currency, str) else "USD"
    return out


def limits(t: dict[str, Any]) -> dict[str, int]:
    """The request bounds of [scheduler] that `labq sub` checks for fast feedback. Values config.py
    would refuse are left out here: the scheduler refuses to start on them, and it checks again."""
    out = {}
    for k in ("max_array_size", "max_request_bytes"):
        if isinstance(t.get(k), int) and not isinstance(t.get(k), bool):
            out[k] = t[k]
    if "max_time_limit" in t:
        try:
            out["max_time_limit"] = units.parse_duration(t["max_time_limit"], "max_time_limit", bare_unit=1)
        except UsageError:
            pass    # a bad value: the scheduler refuses to start on it; no client-side bound then
    return out


REDIS_KEYS = {"url", "prefix", "password_file", "allow_volatile",       # allow_volatile: config.py's
              "sentinels", "service", "sentinel_auth", "min_replicas_ack"}


def redis_table(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("redis", t, REDIS_KEYS)
    url = _str("redis.url", t.get("url", ""))
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("redis.url", f"expected redis://host:port/db or unix:///path, got {url!r}")
    sentinel_url = _sentinel_url(t)
    ack = _replicas_ack(t, bool(sentinel_url))
    if sentinel_url:
        if url:
            raise ConfigError("redis.url", "set redis.url or redis.sentinels, not both (Sentinel names the master)")
        url = f"{sentinel_url}?ack={ack}" + ("&sentinel_auth=1" if t.get("sentinel_auth") else "")
    prefix = _str("redis.prefix", t.get("prefix", "labq"))
    if not prefix or ":" in prefix:
        raise ConfigError("redis.prefix", f"expected a non-empty name without ':', got {prefix!r}")
    pw = abs_path("redis.password_file", t.get("password_file", ""))
    return {"redis_url": url, "prefix": prefix, "redis_password_file": pw, "min_replicas_ack": ack}


def _replicas_ack(t: dict[str, Any], sentinel: bool) -> int:
    """redis.min_replicas_ack: the replicas a write must reach before labq acknowledges it (WAIT);
    "auto" (the default): 1 behind Sentinel (a failover then loses nothing acknowledged), else 0."""
    v = t.get("min_replicas_ack", "auto")
    if v == "auto":
        return 1 if sentinel else 0
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 16:
        raise ConfigError("redis.min_replicas_ack", f"expected \"auto\" or a number of replicas from 0 to 16, got {v!r}")
    return v


def _sentinel_url(t: dict[str, Any]) -> str:
    """redis.sentinels + redis.service as the one URL every process is handed (store/sentinel.py);
    "" without sentinels."""
    hosts = strings("redis.sentinels", t.get("sentinels", []), "\"host:port\" strings")
    for h in hosts:
        try:
            sentinel_address(h)
        except ValueError:
            raise ConfigError("redis.sentinels", f"expected \"host:port\" (port 1-65535), got {h!r}") from None
    service = _str("redis.service", t.get("service", "labq"))
    if not service or not all(c.isalnum() or c in "-_." for c in service):
        raise ConfigError("redis.service", f"expected the master's name in sentinel.conf (letters, digits, "
                          f"-_.), got {service!r}")
    boolean("redis.sentinel_auth", t.get("sentinel_auth", False))
    return f"{SENTINEL_SCHEME}://{','.join(h.strip() for h in hosts)}/{service}" if hosts else ""


SENTINEL_SCHEME = "sentinel"    # the URL's form: store/sentinel.py


def sentinel_address(text: str) -> tuple[str, int]:
    """`host:port` (`[v6]:port`) → (host, port); ValueError names the bad one."""
    try:
        host, port = host_port(text.strip())
    except ValueError:
        raise ValueError(f"expected host:port for a sentinel, got {text!r}") from None
    return host.strip("[]"), port


def host_port(text: str) -> tuple[str, int]:
    """`host:port`: a host and a port in 1..65535 (the sentinels; configcheck.address: scheduler.metrics)."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return host, int(port)


def refuse_removed(t: dict[str, Any]) -> None:
    if "acl" in t:
        raise ConfigError("security.acl", "this key was removed: set security.auth = \"munge\" and apply the "
                                          "Redis ACL roles with `labq admin acl --apply` (see systemd/README.md)")


def security_table(t: dict[str, Any]) -> dict[str, Any]:
    """[security]'s values (config.py checks the key names: its _SECURITY lists them)."""
    admins = strings("security.admins", t.get("admins", ["root"]), "user names", empty=False)
    ttl = _dur("security.credential_ttl", t.get("credential_ttl", "5m"))
    if not 10 <= ttl <= 3600:
        raise ConfigError("security.credential_ttl", f"expected 10s to 1h, got {t.get('credential_ttl')!r}")
    sock = abs_path("security.munge_socket", t.get("munge_socket", ""))
    return {"auth": _str("security.auth", t.get("auth", "none"), ("none", "munge")), "admins": tuple(admins),
            "munge_socket": sock, "credential_ttl": ttl}


MAX_CONFIG_DURATION = 10 * 365 * 86400   # any configured duration; leases and ticks have tighter ones


def _dur(key: str, v: object, hi: int = MAX_CONFIG_DURATION) -> int:
    try:
        s = units.parse_duration(v, key, bare_unit=1)
    except UsageError as e:
        raise ConfigError(key, str(e).split(": ", 1)[-1]) from None
    if s > hi:
        raise ConfigError(key, f"must be at most {hi}s, got {str(v)[:40]!r}")
    return s


def _str(key: str, v: object, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str):
        raise ConfigError(key, f"expected a string, got {v!r}")
    if choices and v not in choices:
        raise ConfigError(key, f"expected one of {', '.join(choices)}, got {v!r}")
    return v


def boolean(key: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(key, f"expected true or false, got {v!r}")
    return v


def abs_path(key: str, v: object) -> str:
    """A string that is "" (not set) or an absolute path."""
    path: str = _str(key, v)
    if path and not os.path.isabs(path):
        raise ConfigError(key, f"expected an absolute path, got {path!r}")
    return path


def strings(key: str, v: object, what: str, empty: bool = True) -> list[str]:
    """A list of strings (`empty`: "" among them allowed), "expected a list of WHAT" otherwise."""
    if not isinstance(v, list) or not all(isinstance(s, str) and (empty or s) for s in v):
        raise ConfigError(key, f"expected a list of {what}, got {v!r}")
    return v


def _table(key: str, v: object) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ConfigError(key, f"expected a table, got {v!r}")
    return v


def _check_keys(section: str, table: dict[str, Any], allowed: set[str] | frozenset[str]) -> None:
    for k in table:
        if k not in allowed:
            raise ConfigError(f"{section}.{k}", f"unknown key (known: {', '.join(sorted(allowed))})")


def history_table(t: dict[str, Any]) -> dict[str, Any]:
    """[history]: keep (how long ended jobs and ledger entries stay in Redis before the scheduler
    archives them; 0 = at once), url (the archive: sqlite:///PATH or postgresql://…; "" = history.db in the
    scheduler's state directory), purge_after (archived jobs deleted after this long; "" = never)."""
    _check_keys("history", t, {"keep", "url", "purge_after"})

    def seconds(key: str, v: object) -> float:
        return float(_dur(f"history.{key}", v))

    url = _str("history.url", t.get("url", ""))
    if url and not url.startswith(("sqlite:///", "/", "postgresql://", "postgres://")):
        raise ConfigError("history.url", "expected sqlite:///ABSOLUTE/PATH, postgresql://… (or \"\" for the state "
                          f"directory), got {url!r}")
    purge = t.get("purge_after", "")
    return {"keep": seconds("keep", t.get("keep", "7d")), "url": url,
            "purge_after": None if purge == "" else seconds("purge_after", purge)}
