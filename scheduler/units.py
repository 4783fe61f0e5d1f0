"""Parsing and printing of durations, sizes and money.

Durations accept SLURM forms (`90` minutes, `1:30:00`, `2-0`, `2-12:00`) and suffixed forms
(`2h30m`, `45s`, `7d`). Sizes accept `12G`, `512M`, `1.5T` and plain bytes. Money is kept as integer
micro-units (1e-6 of the unit) so that sums are exact.
"""
from __future__ import annotations

import math

from .errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:     # typing is 2.4 ms of `labq sub`'s imports, for one annotation
    from typing import Any, TypeVar
    _N = TypeVar("_N", int, float)

MICRO = 1_000_000
MS_PER_HOUR = 3_600_000
_SUFFIX = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZES = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


MAX_SECONDS = 2 ** 53    # any duration or size beyond it is a typo; the callers apply tighter bounds
_TOO_LONG = 40           # characters: longer text is no duration or size a person means


def parse_duration(text: object, what: str = "duration", bare_unit: int = 60) -> int:
    """Seconds in `text`. A bare number is minutes (SLURM) unless `bare_unit` says otherwise.
    Always an integer in [0, 2^53] or a UsageError naming `what`: never inf, NaN or an overflow."""
    bad = f"{what}: expected a duration like 2h, 90m, 1:30:00 or 2-0, got {_shown(text)}"
    if isinstance(text, bool) or (isinstance(text, float) and not math.isfinite(text)):
        raise UsageError(bad)
    if isinstance(text, (int, float)):
        return _bounded(text * bare_unit, what, text)
    s = str(text).strip().lower()
    if len(s) > _TOO_LONG:
        raise UsageError(bad)
    suffixed = _suffixed(s)
    if suffixed is not None:
        return _bounded(suffixed, what, text)
    try:
        return _bounded(_slurm_duration(s, bare_unit), what, text)
    except ValueError:
        raise UsageError(bad) from None


def _bounded(v: float, what: str, text: object) -> int:
    if not math.isfinite(v) or abs(v) > MAX_SECONDS:
        raise UsageError(f"{what}: expected a finite number up to {MAX_SECONDS}, got {_shown(text)}")
    return _non_negative(int(v), what, text)


def _shown(text: object) -> str:
    s = repr(text)
    return s if len(s) <= 40 else f"{s[:20]}… ({len(s)} characters)"


def parse_seconds(text: object, what: str = "duration") -> float:
    """Seconds in `text`, fractions kept: `0.5s`, `500ms`, `1m30s`, a bare number of seconds (config
    keys like scheduler.tick, where a sub-second value is the point)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        _bounded(text, what, text)      # finite, within 2^53: NaN would pass any comparison
        return float(_non_negative(text, what, text))
    s = str(text).strip().lower()
    v = _suffixed(s) if len(s) <= _TOO_LONG else None
    if v is not None:
        _bounded(v, what, text)
        return v
    return float(parse_duration(text, what, bare_unit=1))


def _slurm_duration(s: str, bare_unit: int) -> int:
    days = 0
    if "-" in s:
        d, s = s.split("-", 1)
        days = int(d)
        parts = [int(p) for p in s.split(":")]  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        if len(parts) != 3:
            raise ValueError(s)
        h, m, sec = parts
        return days * 86400 + h * 3600 + m * 60 + sec
    parts = [int(p) for p in s.split(":")]
    if len(parts) == 1:
        return parts[0] * bare_unit
    if len(parts) == 2:  # minutes:seconds
        return parts[0] * 60 + parts[1]
    if len(parts) == 3:
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    raise ValueError(s)


def _non_negative(v: _N, what: str, text: object) -> _N:
    if v < 0:
        raise UsageError(f"{what}: must not be negative, got {text!r}")
    return v


def parse_gpus(text: object, what: str = "--gpus") -> tuple[str, int]:
    """`2` or `MODEL:2` (the model may contain spaces and colons; the count is after the last one)."""
    model, _, count = str(text).rpartition(":")
    try:
        n = int(count) if len(count) <= _TOO_LONG else None
    except ValueError:
        n = None
    if n is None:
        raise UsageError(f"{what}: expected N or MODEL:N, got {_shown(text)}")
    if not 0 <= n <= MAX_SECONDS:
        raise UsageError(f"{what}: expected a count from 0 to {MAX_SECONDS}, got {_shown(text)}")
    return model, n


def parse_size(text: object, what: str = "size") -> int:
    """Bytes in `text` (`12G`, `512M`, `64GiB`, `1.5T`, `1048576`)."""
    if isinstance(text, bool):
        raise UsageError(f"{what}: expected a size like 12G or 512M, got {text!r}")
    if isinstance(text, int):
        return _bounded(text, what, text)
    # 12G, 12GB, 12GiB and 12Gi (Kubernetes' spelling) are all 12 × 2^30, as SLURM counts
    m = _size_parts(str(text).lower())
    if not m or len(str(text)) > _TOO_LONG:
        raise UsageError(f"{what}: expected a size like 12G or 512M, got {_shown(text)}")
    return _bounded(float(m[0]) * _SIZES[m[1]], what, text)


# The two forms below are read by hand, not by `re`: its import (and enum's, which it imports) is ~4 ms of
# every `labq sub` and `labq stat`, which need no other regex (issue 39 item 4). tests/unit/test_units_forms.py
# holds them to the regexes they replace, r"^(?:(\d+(?:\.\d+)?)(ms|[smhdw]))+$" and
# r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:ib|i|b)?\s*$".
def _number_end(s: str, i: int) -> int:
    """Where digits, and a point and digits after them if there are, read from i end; i where no digit is at i."""
    j, n = i, len(s)
    while j < n and s[j].isdecimal():
        j += 1
    if j > i and j + 1 < n and s[j] == "." and s[j + 1].isdecimal():
        j += 2
        while j < n and s[j].isdecimal():
            j += 1
    return j


def _suffixed(s: str) -> float | None:
    """Seconds in `2h30m`, `45s`, `1.5d`, `250ms` (digits and a unit, again and again, nothing else); None otherwise."""
    total: float = 0
    i, n = 0, len(s)
    if not n:
        return None
    while i < n:
        j = _number_end(s, i)
        unit = "ms" if s.startswith("ms", j) else s[j:j + 1]
        if j == i or unit not in _SUFFIX:
            return None
        total += float(s[i:j]) * _SUFFIX[unit]
        i = j + len(unit)
    return total


def _size_parts(s: str) -> tuple[str, str] | None:
    """(number, unit letter or "") of `12g`, `1.5 tib`, `64gi`, `512`; None where it is not that form."""
    s = s.strip()
    j = _number_end(s, 0)
    rest = s[j:].lstrip()
    unit = rest[:1] if rest[:1] in ("k", "m", "g", "t") else ""
    return (s[:j], unit) if j and rest[len(unit):] in ("", "ib", "i", "b") else None


def fmt_duration(seconds: float) -> str:
    """SLURM's `[D-]HH:MM:SS`."""
    seconds = int(max(0, seconds))
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def fmt_at(t: float) -> str:
    """An instant as UTC clock text. A stored message says "expected to start at 2026-12-03
    04:10:00 UTC", not "in 88s": relative text is stale when read and changes at every plan pass,
    and each change rewrites the job's record (issue 13: a pass that changes nothing writes nothing)."""
    from datetime import datetime, timezone
    return datetime.fromtimestamp(round(t), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_size(n: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n}B"


def to_micro(amount: Any, what: str = "amount") -> int:
    try:
        v = float(amount) * MICRO
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not math.isfinite(v) or abs(v) > 2 ** 62:
        raise UsageError(f"{what}: expected a number of at most {2 ** 62 // MICRO}, got {_shown(amount)}")
    return int(round(v))


def accrue(rate_per_hour: int, seconds: float) -> int:
    """What `seconds` of an allocation costs at `rate_per_hour`, rounded down to whole micro-units."""
    return rate_per_hour * max(0, int(seconds * 1000)) // MS_PER_HOUR


# rates.currency: every amount of money labq prints is in it. Whoever prints money passes the currency
# of the config it read (cfg.rates.currency, or the client settings' "currency"): there is no process-wide
# currency (issue 40: a module global that reading a config wrote, and tests set back by hand). "usd"
# below is the budget unit meaning "money", whatever the currency.
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "CNY": "¥", "INR": "₹", "KRW": "₩"}


def currency_symbol(currency: str) -> str:
    return _SYMBOLS.get(currency.upper(), "")


def unit_name(unit: str, currency: str) -> str:
    """A budget unit as shown (the budget table's UNIT, metrics' `unit` label): money is the
    currency's code in lower case ("usd" is the config's word for money, whatever the currency)."""
    return currency.lower() if unit == "usd" else unit


def fmt_money(micro: int, unit: str = "usd", *, currency: str) -> str:
    """Money, one rule: to the cent, with thousands separators, in the currency (`€1,234.50`, `€0.00`,
    `1.50 CHF`); an amount that is not zero but under half a cent is `<€0.01` (the exact amounts are
    in --json and CSV). Other units: `1.500 gpu-hours`."""
    if unit != "usd":
        return f"{micro / MICRO:,.3f} {unit.replace('_', '-')}"
    text, sign = f"{abs(micro) / MICRO:,.2f}", "-" if micro < 0 else ""
    if micro and text == "0.00":
        text, sign = "0.01", ">-" if micro < 0 else "<"
    sym = currency_symbol(currency)
    return f"{sign}{sym}{text}" if sym else f"{sign}{text} {currency.upper()}"
