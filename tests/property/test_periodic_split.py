"""Periodic budgets: an attempt's cost split over the periods it spans adds up to its whole charge,
and a part booked when a period closes equals the same part computed when the attempt ends."""
from datetime import datetime, timezone

from hypothesis import given, settings, strategies as st

from labq.scheduler import units
from labq.scheduler.money import periods, pricing
from labq.scheduler.settings import config

WEEKLY = config.loads('[[budgets]]\nname = "w"\naccount = "a"\nlimit = 10.0\nperiod = "week"\n'
                      'timezone = "Europe/Berlin"\n').budgets[0]
T0 = datetime(2026, 3, 20, tzinfo=timezone.utc).timestamp()   # DST starts in Berlin within a fortnight


@settings(max_examples=300, deadline=None)
@given(start=st.floats(0, 30 * 86400), length=st.floats(0, 40 * 86400), rate=st.integers(0, 10**12),
       extra=st.integers(0, 10**6), hours=st.booleans())
def test_parts_add_up_and_closing_a_period_books_the_same_part(start, length, rate, extra, hours):
    cfg = config.loads(f'[rates]\nbilling = "{"started_hour" if hours else "second"}"\n')
    billed = lambda s: pricing.billed(s, cfg)   # noqa: E731
    a, b = T0 + start, T0 + start + length
    parts = periods.split(WEEKLY, rate, a, b, extra, billed)
    assert sum(parts.values()) == units.accrue(rate, billed(b - a)) + extra
    assert list(parts) == sorted(parts) and all(v >= 0 for v in parts.values())
    for lab in list(parts)[:-1]:     # each edge the attempt ran through: what closing it booked then
        edge = periods.bounds("week", lab, WEEKLY.timezone)[1]
        early = periods.split(WEEKLY, rate, a, edge, extra, billed)
        assert all(early[k] == parts[k] for k in early), "booked at the edge = computed at the end"
