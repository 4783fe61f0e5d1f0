"""Times and sizes as SLURM and people write them (scheduler/jobs/when.py, scheduler/units.py)."""
import datetime as dt

import pytest

from labq.scheduler import units
from labq.scheduler.errors import ConfigError, UsageError
from labq.scheduler.jobs import when
from labq.scheduler.settings import config

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 2, 14, 30, 0, tzinfo=UTC).timestamp()     # a Wednesday, 14:30


def at(*a):
    return dt.datetime(*a, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("text, expected", [
    ("now", NOW), ("now+90", NOW + 90), ("now+30minutes", NOW + 1800), ("now+2hours", NOW + 7200),
    ("now+1day", NOW + 86400), ("now+1week", NOW + 604800), ("now+5min", NOW + 300), ("now+1h", NOW + 3600),
    ("30m", NOW + 1800), ("1h30m", NOW + 5400), ("90", NOW + 90),
    ("16:00", at(2026, 12, 2, 16, 0)),                  # later today
    ("09:15:30", at(2026, 12, 3, 9, 15, 30)),           # passed: tomorrow
    ("4:00PM", at(2026, 12, 2, 16, 0)), ("12:00am", at(2026, 12, 3, 0, 0)),
    ("midnight", at(2026, 12, 3)), ("noon", at(2026, 12, 3, 12)), ("teatime", at(2026, 12, 2, 16)),
    ("today", at(2026, 12, 2)), ("tomorrow", at(2026, 12, 3)), ("TOMORROW", at(2026, 12, 3)),
    ("2026-12-24", at(2026, 12, 24)), ("2026-12-24T09:00", at(2026, 12, 24, 9)), ("12/24", at(2026, 12, 24)),
    ("12/24/27", at(2027, 12, 24)),
])
def test_begin_forms(text, expected):
    assert when.parse(text, NOW, tz=UTC) == expected


@pytest.mark.parametrize("text", ["soon", "now+3fortnights", "25:00", "13:00pm", "2026-13-40", "16:0", ""])
def test_bad_times_name_the_forms(text):
    with pytest.raises(UsageError, match="--begin: expected a time like 16:00"):
        when.parse(text, NOW, tz=UTC)


def test_local_time_of_day_by_default():
    t = when.parse("16:00", NOW)
    assert dt.datetime.fromtimestamp(t).strftime("%H:%M:%S") == "16:00:00" and 0 < t - NOW <= 86400


@pytest.mark.parametrize("text, n", [("12Gi", 12 << 30), ("512Mi", 512 << 20), ("12GiB", 12 << 30), ("12G", 12 << 30),
                                     ("1.5Ti", 3 << 39), ("64k", 64 << 10)])
def test_sizes(text, n):
    assert units.parse_size(text, "--mem") == n


@pytest.mark.parametrize("text, seconds", [("0.5s", 0.5), ("500ms", 0.5), ("0.25", 0.25), (2, 2.0), ("1m30s", 90.0)])
def test_fractional_tick(text, seconds):
    v = f'"{text}"' if isinstance(text, str) and not text.replace(".", "").isdigit() else text
    assert config.loads(f"[scheduler]\ntick = {v}\n").tick == seconds


def test_tick_too_small_or_malformed_names_the_key():
    for v in ('"10ms"', '"fast"'):
        with pytest.raises(ConfigError, match="scheduler.tick"):
            config.loads(f"[scheduler]\ntick = {v}\n")


@pytest.mark.parametrize("text, expected", [("08:00", at(2026, 12, 2, 8)), ("16:00", at(2026, 12, 2, 16)),
                                            ("midnight", at(2026, 12, 2)), ("now-2hours", NOW - 7200),
                                            ("today", at(2026, 12, 2)), ("2026-11-01", at(2026, 11, 1))])
def test_window_times_are_not_rolled_forward(text, expected):
    assert when.parse(text, NOW, "-S", tz=UTC, future=False) == expected
