"""Budget periods: `none`, `week`, `month`, `quarter`, calendar-aligned in the budget's time zone.

A period is named by a label: "" (period `none`: one period forever), "2026-W47" (ISO week,
Monday 00:00), "2026-11" (month), "2026-Q4" (quarter). Spending is kept per period: the cached
balance of a periodic budget is the `spent` hash field `NAME@LABEL`, of a budget without a period
the field `NAME`. A charge goes to the period in which it is settled (the attempt's end as the
scheduler processes it), so a period that has ended is never written again: past periods stay
readable and immutable, and a new period starts from zero.

Deterministic: the time is always an argument, never read from a clock.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from functools import lru_cache

from ..units import accrue

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: the thin CLI (money/balance.py) imports this module without typing
    from collections.abc import Callable, Iterable, Mapping
    from typing import Protocol

    class Periodic(Protocol):
        """What a period reads of a budget: ledger.Budget, or the thin CLI's record of one (balance.py)."""
        @property
        def name(self) -> str: ...
        @property
        def period(self) -> str: ...
        @property
        def timezone(self) -> str: ...

PERIODS = ("none", "week", "month", "quarter")
# A label's form, as the regexes ^(\d{4})-W(\d{2})$, ^(\d{4})-(\d{2})$, ^(\d{4})-Q([1-4])$ read it (parsed
# by hand, _parse: `labq budget` imports neither `re` nor the `enum` it imports, issue 39 item 4)
_LABEL = {"week": "-W", "month": "-", "quarter": "-Q"}


def _parse(period: str, lab: str) -> tuple[int, int] | None:
    """(year, week, month or quarter) of `lab` in `period`'s form (_LABEL), or None: \\d is any Unicode
    decimal digit (str.isdecimal, which int() reads), and `$` passes one newline at the end."""
    text = lab[:-1] if lab.endswith("\n") else lab
    sep = _LABEL[period]
    y, mid, n = text[:4], text[4:4 + len(sep)], text[4 + len(sep):]
    if len(y) != 4 or not y.isdecimal() or mid != sep:
        return None
    if period == "quarter":
        return (int(y), int(n)) if len(n) == 1 and n in "1234" else None
    return (int(y), int(n)) if len(n) == 2 and n.isdecimal() else None


def field(name: str, period: str) -> str:
    """The `spent` hash field of budget `name` in the period labelled `period` (see above)."""
    return f"{name}@{period}" if period else name


def zone(name: str) -> tzinfo:
    """The time zone `name`; ValueError when there is no such zone. UTC (the default) is datetime's
    own, the same instants and labels: zoneinfo is imported only for other zones, its import was
    ~3 ms of CPU in every `labq budget` (issue 39 item 4)."""
    if name in ("", "UTC"):
        return timezone.utc
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (expected an IANA name like UTC or Europe/Berlin)") from None


# (period, tz) -> (start, end, label) of the period the last lookup found: a scheduler (and a
# replay, at every instant) asks about the same period again and again, and datetime costs tens of µs.
_last: dict[tuple[str, str], tuple[float, float, str]] = {}


def label(period: str, t: float, tz: str = "UTC") -> str:
    """The label of the period of kind `period` that contains epoch time `t`."""
    if period == "none":
        return ""
    hit = _last.get((period, tz))
    if hit is not None and hit[0] <= t < hit[1]:
        return hit[2]
    lab = _label(period, t, tz)
    start, end = bounds(period, lab, tz)
    if start <= t < end:
        _last[(period, tz)] = (start, end, lab)
    return lab


def _label(period: str, t: float, tz: str) -> str:
    d = datetime.fromtimestamp(t, zone(tz))
    if period == "week":
        y, w, _ = d.isocalendar()
        return f"{y}-W{w:02d}"
    if period == "month":
        return f"{d.year}-{d.month:02d}"
    return f"{d.year}-Q{(d.month - 1) // 3 + 1}"


@lru_cache(maxsize=1024)
def bounds(period: str, lab: str, tz: str = "UTC") -> tuple[float, float]:
    """[start, end) of the period named `lab`, in epoch seconds. ValueError for a malformed label."""
    if period == "none":
        return float("-inf"), float("inf")
    m = _parse(period, lab or "")
    if m is None:
        raise ValueError(f"period: expected a {period} like {_EXAMPLE[period]}, got {lab!r}")
    y, n = m
    z = zone(tz)
    if period == "week":
        if not 1 <= n <= 53:
            raise ValueError(f"period: no week {n}")
        start = datetime.fromisocalendar(y, n, 1).replace(tzinfo=z)
        # Local midnight a week later (not +7×24 h: a DST change makes a week 167 or 169 hours).
        end = (start.replace(tzinfo=None) + timedelta(days=7)).replace(tzinfo=z)
    else:
        month = n if period == "month" else 3 * (n - 1) + 1
        if not 1 <= month <= 12:
            raise ValueError(f"period: no month {n}")
        start = datetime(y, month, 1, tzinfo=z)
        nxt = month + (1 if period == "month" else 3)
        end = datetime(y + (nxt - 1) // 12, (nxt - 1) % 12 + 1, 1, tzinfo=z)
    return start.timestamp(), end.timestamp()


_EXAMPLE = {"week": "2026-W47", "month": "2026-11", "quarter": "2026-Q4"}


def current(b: Periodic, t: float) -> str:
    """The label of budget `b`'s period at `t`."""
    return label(b.period, t, b.timezone)


def spent_now(budgets: Iterable[Periodic], spent: Mapping[str, int | str], t: float) -> dict[str, int]:
    """budget name -> what is settled in its current period, from the `spent` hash."""
    return {b.name: int(spent.get(field(b.name, current(b, t)), 0)) for b in budgets}


def history(b: Periodic, spent: Mapping[str, int | str]) -> list[tuple[str, int]]:
    """(label, settled) of every period of `b` that has a balance, oldest first."""
    if b.period == "none":
        return [("", int(spent.get(b.name, 0)))]
    prefix = f"{b.name}@"
    return sorted((k[len(prefix):], int(v)) for k, v in spent.items() if k.startswith(prefix))


def spans(b: Periodic, start: float, end: float) -> list[tuple[str, float, float]]:
    """(label, from, to) of each of `b`'s periods that [start, end) overlaps, clipped to it, oldest
    first. A budget without periods has one span, the whole interval."""
    if b.period == "none" or end <= start:
        return [("", start, end)]
    out, t = [], start
    while t < end:
        lab = current(b, t)
        _, stop = bounds(b.period, lab, b.timezone)
        out.append((lab, t, min(stop, end)))
        t = stop
    return out


def split(b: Periodic, rate_per_hour: int, start: float, end: float, extra: int,
          billed: Callable[[float], float]) -> dict[str, int]:
    """The cost of an allocation held over [start, end) at `rate_per_hour`, per period of `b`.

    Each period gets what accrues inside it: the cumulative cost at its end minus at its start, so
    the parts add up exactly to the whole (rounding and `billed`'s started hours included) and the
    same instant always splits the same way — a part booked when a period closed and the same part
    computed again when the attempt ends are equal. `extra` (the per-attempt overhead) goes to the
    first period."""
    if b.period != "none" and start < end:
        lab = current(b, start)
        if end <= bounds(b.period, lab, b.timezone)[1]:      # one period (most attempts): its whole cost
            return {lab: accrue(rate_per_hour, billed(end - start)) - accrue(rate_per_hour, billed(0.0)) + extra}

    def cum(t: float) -> int:
        return accrue(rate_per_hour, billed(t - start))
    out: dict[str, int] = {}
    for i, (lab, s, e) in enumerate(spans(b, start, end)):
        out[lab] = out.get(lab, 0) + cum(e) - cum(s) + (extra if i == 0 else 0)
    return out or {current(b, start) if b.period != "none" else "": extra}


def span_at(b: Periodic, t: float, lab: str = "") -> tuple[float, float] | None:
    """[start, end) of `b`'s period at `t` (or of the period named `lab`); None without periods."""
    if b.period == "none":
        return None
    return bounds(b.period, lab or current(b, t), b.timezone)
