"""The checks behind scheduler/config.py: numbers and booleans (each error names the key and what is
expected), addresses, time zones, per-account/user caps, and the [[budgets]] and [alerts] sections.
Strings, durations and tables are checked by clientconf.py, which the thin client shares."""
from . import units
from .clientconf import _check_keys, _dur, _str
from .errors import ConfigError
from .model import Budget


def num(key, v, lo=None, integer=False):
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool):
        raise ConfigError(key, f"expected {'an integer' if integer else 'a number'}, got {v!r}")
    if lo is not None and v < lo:
        raise ConfigError(key, f"must be at least {lo}, got {v!r}")
    return v


def boolean(key, v):
    if not isinstance(v, bool):
        raise ConfigError(key, f"expected true or false, got {v!r}")
    return v


def address(key: str, v) -> str:
    """"" (off) or host:port with a port in 1..65535 (host may be empty: all interfaces is explicit "0.0.0.0")."""
    v = _str(key, v)
    if v == "":
        return v
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(key, f"expected HOST:PORT such as \"127.0.0.1:9464\", or \"\" for off, got {v!r}")
    return v


CAPS = ("max_running", "max_gpus", "max_cpus", "max_submit")


def caps(k, t) -> dict:
    out = {c: num(f"{k}.{c}", t[c], lo=0, integer=True) if c in t else None for c in CAPS}
    out["on_limit"] = _str(f"{k}.on_limit", t.get("on_limit", "pend"), ("pend", "refuse"))
    return out


def budget(i, t):
    k = f"budgets[{i}]"
    _check_keys(k, t, {"name", "account", "project", "unit", "limit", "period", "warn", "reserve", "on_exhaust",
                       "timezone"})
    if "name" not in t:
        raise ConfigError(f"{k}.name", "missing; every budget needs a name")
    name = _str(f"{k}.name", t["name"])
    k = f"budgets.{name}"
    if "limit" not in t:
        raise ConfigError(f"{k}.limit", "missing; expected the budget's limit in its unit")
    if "account" in t and "project" in t:
        raise ConfigError(k, "give account or project, not both")
    warn = t.get("warn", [0.7, 0.9])
    if not isinstance(warn, list) or not all(isinstance(w, (int, float)) and 0 < w <= 1 for w in warn):
        raise ConfigError(f"{k}.warn", f"expected a list of fractions in (0, 1], got {warn!r}")
    reserve = float(num(f"{k}.reserve", t.get("reserve", 0.0), lo=0))
    if reserve >= 1:
        raise ConfigError(f"{k}.reserve", f"expected a fraction below 1, got {reserve}")
    return Budget(
        name=name,
        unit=_str(f"{k}.unit", t.get("unit", "usd"), ("usd", "gpu_hours", "cpu_hours")),
        limit=units.to_micro(num(f"{k}.limit", t["limit"], lo=0)),
        account=_str(f"{k}.account", t.get("account", "")),
        project=_str(f"{k}.project", t.get("project", "")),
        period=_str(f"{k}.period", t.get("period", "none"), ("none", "week", "month", "quarter")),
        warn=tuple(float(w) for w in warn),
        reserve=reserve,
        on_exhaust=_str(f"{k}.on_exhaust", t.get("on_exhaust", "hold"), ("hold", "preempt", "cancel")),
        timezone=zone(f"{k}.timezone", t.get("timezone", "UTC")),
    )


def zone(key, v):
    from .periods import zone as tz
    try:
        tz(_str(key, v))
    except ValueError as e:
        raise ConfigError(key, str(e)) from None
    return v


def alerts(t):
    _check_keys("alerts", t, {"command", "webhook", "timeout"})
    hook = _str("alerts.webhook", t.get("webhook", ""))
    if hook and not hook.startswith(("http://", "https://")):
        raise ConfigError("alerts.webhook", f"expected an http:// or https:// URL, got {hook!r}")
    timeout = _dur("alerts.timeout", t.get("timeout", "10s"))
    if timeout < 1:
        raise ConfigError("alerts.timeout", "must be at least 1s")
    return {"command": _str("alerts.command", t.get("command", "")), "webhook": hook, "timeout": timeout}
