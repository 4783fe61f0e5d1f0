"""The bookkeeper's tick decides from what the tick read (issue 40 item 1): the books a new leader
loaded, the spent hash and which period entries a predecessor wrote are handed in; the bookkeeper
holds no store to ask (it is made from the config alone)."""
from labq.scheduler.daemon.bookkeeper import Bookkeeper
from tests.harness import MONDAY_W49, WEEKLY_TOML, cfg

WEEKLY, MONDAY = WEEKLY_TOML, MONDAY_W49
KEY = "period:lab:2026-W49"


def _books():
    c = cfg(WEEKLY)
    books = Bookkeeper(c)
    books.load({"overrides": {}, "limits": {}, "periods": {"lab": "2026-W48"}, "fired": set()}, MONDAY + 60)
    return books, c


def test_a_period_rollover_is_decided_from_what_the_tick_read():
    books, c = _books()
    assert books.due_periods(MONDAY + 60) == [KEY]
    change = books.tick(MONDAY + 60, {}, c, {}, set())
    assert change is not None and [e.key for e in change.books.entries] == [KEY]
    assert change.books.periods == [("lab", "2026-W49")]


def test_a_period_entry_a_predecessor_wrote_is_not_written_again():
    books, c = _books()
    change = books.tick(MONDAY + 60, {}, c, {}, {KEY})
    assert change is not None and change.books.entries == [] and change.books.periods == [("lab", "2026-W49")]
