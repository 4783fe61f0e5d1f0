"""The checks behind scheduler/settings/config.py: numbers (each error names the key and what is
expected), [scheduler]'s loop numbers and durations, addresses, time zones, per-account/user caps, and the [[budgets]] and [alerts] sections.
Strings, booleans, durations, paths, lists and tables are checked by clientconf.py, which the thin client shares."""
import math
from typing import Any

from .. import units
from ..errors import ConfigError, UsageError
from ..jobs import bounds
from ..money.ledger import Budget
from ..money.periods import PERIODS
from .clientconf import _check_keys, _dur, _str, boolean, host_port, strings


def num(key: str, v: Any, lo: float | None = None, integer: bool = False, hi: float = bounds.MAX_INT) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool):
        raise ConfigError(key, f"expected {'an integer' if integer else 'a number'}, got {bounds._short(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ConfigError(key, f"expected a finite number, got {v!r}")
    if lo is not None and v < lo:
        raise ConfigError(key, f"must be at least {lo}, got {v!r}")
    if v > hi or v < -bounds.MAX_INT:
        raise ConfigError(key, f"must be at most {hi:g}, got {bounds._short(v)}")
    return v


def address(key: str, v: object) -> str:
    """"" (off) or host:port with a port in 1..65535 (host may be empty: all interfaces is explicit "0.0.0.0")."""
    v = _str(key, v)
    if v == "":
        return v
    try:
        host_port(v)
    except ValueError:
        raise ConfigError(key, f"expected HOST:PORT such as \"127.0.0.1:9464\", or \"\" for off, got {v!r}")
    return v


CAPS = ("max_running", "max_gpus", "max_cpus", "max_submit")
# Money is kept in integer micro-units and summed by Redis (HINCRBY, 64-bit): keep every amount
# and every hour's charge far below 2^63 micro-units.
MAX_MONEY = 10 ** 12
MAX_RATE = 10 ** 9


def caps(k: str, t: dict[str, Any]) -> dict[str, Any]:
    out = {c: num(f"{k}.{c}", t[c], lo=0, integer=True) if c in t else None for c in CAPS}
    out["on_limit"] = _str(f"{k}.on_limit", t.get("on_limit", "pend"), ("pend", "refuse"))
    return out


def users(k: str, t: dict[str, Any]) -> tuple[str, ...]:
    """An account's or budget's `users`: who may charge it (scheduler/security/members.py)."""
    return tuple(strings(f"{k}.users", t.get("users", []), "user names"))


def budget(i: int, t: dict[str, Any]) -> Budget:
    k = f"budgets[{i}]"
    _check_keys(k, t, {"name", "account", "project", "unit", "limit", "period", "warn", "reserve", "on_exhaust",
                       "timezone", "users", "open"})
    if "name" not in t:
        raise ConfigError(f"{k}.name", "missing; every budget needs a name")
    name = _str(f"{k}.name", t["name"])
    k = f"budgets.{name}"
    if "limit" not in t:
        raise ConfigError(f"{k}.limit", "missing; expected the budget's limit in its unit")
    if "account" in t and "project" in t:
        raise ConfigError(k, "give account or project, not both")
    if "account" in t and ("users" in t or "open" in t):
        raise ConfigError(k, "an account's budget has its account's users: set users or open on the account")
    warn = t.get("warn", [0.7, 0.9])
    if not isinstance(warn, list) or not all(isinstance(w, (int, float)) and 0 < w <= 1 for w in warn):
        raise ConfigError(f"{k}.warn", f"expected a list of fractions in (0, 1], got {warn!r}")
    reserve = float(num(f"{k}.reserve", t.get("reserve", 0.0), lo=0))
    if reserve >= 1:
        raise ConfigError(f"{k}.reserve", f"expected a fraction below 1, got {reserve}")
    return Budget(
        name=name,
        unit=_str(f"{k}.unit", t.get("unit", "usd"), ("usd", "gpu_hours", "cpu_hours")),
        limit=units.to_micro(num(f"{k}.limit", t["limit"], lo=0, hi=MAX_MONEY)),
        account=_str(f"{k}.account", t.get("account", "")),
        project=_str(f"{k}.project", t.get("project", "")),
        period=_str(f"{k}.period", t.get("period", "none"), PERIODS),
        warn=tuple(float(w) for w in warn),
        reserve=reserve,
        on_exhaust=_str(f"{k}.on_exhaust", t.get("on_exhaust", "hold"), ("hold", "preempt", "cancel")),
        timezone=zone(f"{k}.timezone", t.get("timezone", "UTC")),
        users=users(k, t), open=boolean(f"{k}.open", t.get("open", False)),
    )


def zone(key: str, v: object) -> str:
    from ..money.periods import zone as tz
    name = _str(key, v)
    try:
        tz(name)
    except ValueError as e:
        raise ConfigError(key, str(e)) from None
    return name


def alerts(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("alerts", t, {"command", "webhook", "timeout"})
    hook = _str("alerts.webhook", t.get("webhook", ""))
    if hook and not hook.startswith(("http://", "https://")):
        raise ConfigError("alerts.webhook", f"expected an http:// or https:// URL, got {hook!r}")
    timeout = _dur("alerts.timeout", t.get("timeout", "10s"))
    if timeout < 1:
        raise ConfigError("alerts.timeout", "must be at least 1s")
    return {"command": _str("alerts.command", t.get("command", "")), "webhook": hook, "timeout": timeout}


_SCHED_INTS = {"max_pending": 10 ** 7, "max_pending_per_user": 10 ** 7, "max_array_size": 10 ** 6,
               "max_request_bytes": 256 << 20}
# Upper bounds of the durations: a lease or tick beyond them is a typo, not a policy.
_SCHED_DURS = {"node_lease": 86400, "default_time": None, "kill_wait": 86400, "crash_guard_window": None,
               "retry_backoff": None, "retry_backoff_max": None, "max_time_limit": None}


def scheduler_times(t: dict[str, Any]) -> dict[str, Any]:
    """[scheduler]'s numbers and durations of the loop: tick, bounds, leases, timeouts, backoffs."""
    out: dict[str, Any] = {}
    if "tick" in t:
        v = t["tick"]
        # Sub-second ticks are useful in tests and demos: a bare number here is seconds, and may be a fraction.
        try:
            tick = units.parse_seconds(v, "scheduler.tick")
        except UsageError as e:
            raise ConfigError("scheduler.tick", str(e).split(": ", 1)[-1]) from None
        if tick > 3600:
            raise ConfigError("scheduler.tick", f"must be at most 3600 seconds, got {bounds._short(v)}")
        if tick < 0.05:
            raise ConfigError("scheduler.tick", f"must be at least 0.05 seconds, got {v!r}")
        out["tick"] = tick
    for k, hi in _SCHED_INTS.items():
        if k in t:
            out[k] = num(f"scheduler.{k}", t[k], lo=1, integer=True, hi=hi)
    for k, most in _SCHED_DURS.items():
        if k in t:
            out[k] = _dur(f"scheduler.{k}", t[k], *((most,) if most else ()))
    for k in ("start_timeout", "fence_margin"):
        if k in t:
            v = t[k]
            # Sub-second values help tests; a bare number is seconds.
            out[k] = float(num(f"scheduler.{k}", v, lo=0, hi=86400)) if isinstance(v, (int, float)) \
                else _dur(f"scheduler.{k}", v, hi=86400)
    for k in ("node_lease", "default_time", "max_time_limit"):
        if out.get(k, 1) < 1:
            raise ConfigError(f"scheduler.{k}", "must be at least 1s")
    if "lease" in t:
        out["lease"] = float(_dur("scheduler.lease", t["lease"], hi=86400))
        if out["lease"] < max(1.0, 2 * out.get("tick", 1.0)):
            raise ConfigError("scheduler.lease", f"must be at least 1s and twice scheduler.tick, got {t['lease']!r}")
    return out
