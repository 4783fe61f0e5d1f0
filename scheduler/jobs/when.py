"""Points in time as SLURM (`sbatch --begin`, `sacct -S`) and people write them → epoch seconds.

  now, now+90 (seconds), now+30minutes, now+2hours, now+1day, now+1week (also now+1h, now+30m)
  30m, 2h, 90                   a delay (labq's short form; a bare number is seconds)
  16:00, 16:00:30, 4:00PM       that time of day: today, or tomorrow once it has passed
  midnight, noon, fika, teatime the next 00:00, 12:00, 15:00, 16:00
  today, tomorrow               00:00 of that day
  2026-12-03, 2026-12-03T09:00  an ISO date and time (local time)
  12/03, 12/03/26               MM/DD[/YY] at 00:00

Pure: `now` (epoch seconds) is an argument; times of day are in the local time zone (the `tz`
argument, default the process's own), as SLURM reads them.
"""
import datetime as dt
import re

from ..errors import UsageError

_UNITS = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
          "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
          "w": 604800, "week": 604800, "weeks": 604800}
_NAMED = {"midnight": (0, 0), "noon": (12, 0), "fika": (15, 0), "teatime": (16, 0)}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*([ap]m)?$")
_NOW_PLUS = re.compile(r"^(?:now)?\+?(\d+(?:\.\d+)?)\s*([a-z]*)$")
_US_DATE = re.compile(r"^(\d{1,2})/(\d{1,2})(?:/(\d{2}|\d{4}))?$")
FORMS = "16:00, now+30minutes, tomorrow, midnight, 2026-12-03T09:00 or 30m"


def parse(text: str, now: float, what: str = "--begin", tz: dt.tzinfo | None = None, future: bool = True) -> float:
    """`future`: a time of day not yet reached today is today, a passed one tomorrow (sbatch
    --begin); False: always today's (sacct -S 08:00 means this morning), and `now-2hours` is allowed."""
    s = str(text).strip().lower()
    # Naive local time unless a zone is given: its .timestamp() asks the C library, which knows the
    # DST rules, where a fixed-offset aware datetime would be an hour off across a change.
    here = dt.datetime.fromtimestamp(now, tz) if tz else dt.datetime.fromtimestamp(now)
    try:
        t = _parse(s, now, here, future) if len(s) <= 64 else None
    except (ValueError, OverflowError):   # a 400-digit year or delay is no time
        t = None
    if t is None:
        raise UsageError(f"{what}: expected a time like {FORMS}, got {text!r}")
    return t


def _parse(s: str, now: float, here: dt.datetime, future: bool = True) -> float | None:
    if s == "now":
        return now
    if not future and s.startswith("now-"):
        back = _parse("now+" + s[4:], now, here)
        return None if back is None else 2 * now - back
    m = _NOW_PLUS.match(s)
    if m:                                              # a bare number: seconds from now, as after now+
        if m.group(2) not in _UNITS:
            return None
        return now + float(m.group(1)) * _UNITS[m.group(2)]
    if re.fullmatch(r"(\d+(\.\d+)?[smhdw])+", s):       # 1h30m: labq's delay
        return now + sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhdw])", s))
    midnight = here.replace(hour=0, minute=0, second=0, microsecond=0)
    if s == "today":
        return midnight.timestamp()
    if s == "tomorrow":
        return _day_after(midnight).timestamp()
    if s in _NAMED:
        return _next(here, *_NAMED[s], 0) if future else _today(here, *_NAMED[s], 0)
    m = _CLOCK.match(s)
    if m:
        h, mi, sec, ampm = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), m.group(4)
        if ampm:
            if not 1 <= h <= 12:
                return None
            h = h % 12 + (12 if ampm == "pm" else 0)
        return _next(here, h, mi, sec) if future else _today(here, h, mi, sec)
    m = _US_DATE.match(s)
    if m:
        year = int(m.group(3)) if m.group(3) else here.year
        year += 2000 if year < 100 else 0
        return here.replace(year=year, month=int(m.group(1)), day=int(m.group(2)), hour=0, minute=0, second=0,
                            microsecond=0).timestamp()
    if s[:4].isdigit() and "-" in s:
        d = dt.datetime.fromisoformat(s.upper())
        return (d if d.tzinfo else d.replace(tzinfo=here.tzinfo)).timestamp()
    return None


def _day_after(d: dt.datetime) -> dt.datetime:
    # Through the date, not +86400 s: a DST change makes some days 23 or 25 hours long.
    nxt = d.date() + dt.timedelta(days=1)
    return d.replace(year=nxt.year, month=nxt.month, day=nxt.day)


def _today(here: dt.datetime, h: int, m: int, s: int) -> float:
    return here.replace(hour=h, minute=m, second=s, microsecond=0).timestamp()


def _next(here: dt.datetime, h: int, m: int, s: int) -> float:
    """Today at h:m:s, or tomorrow when that has passed (sbatch --begin=16:00)."""
    t = here.replace(hour=h, minute=m, second=s, microsecond=0)
    if t <= here:
        t = _day_after(t)
    return t.timestamp()
