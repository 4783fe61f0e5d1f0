"""What `labq budget` and `labq show` read by hand instead of by `re` (issue 39 item 4: `re` and the
`enum` it imports were ~a fifth of their instructions) reads as the regex it replaced: a period's
label (money/periods._parse), a log path's %-patterns (jobs/logpath._sub)."""
import re

from hypothesis import example, given, settings, strategies as st

from labq.scheduler.jobs import logpath
from labq.scheduler.money import periods

LABELS = {"week": r"^(\d{4})-W(\d{2})$", "month": r"^(\d{4})-(\d{2})$", "quarter": r"^(\d{4})-Q([1-4])$"}


def _labels():
    # ASCII and other Unicode decimal digits, and a digit that is not decimal (superscript two)
    digits = st.sampled_from(["1", "4", "5", "0", "\u0660", "\u0967", "\uff15", "\u00b2"])
    year = st.lists(digits, min_size=3, max_size=5).map("".join)
    number = st.lists(digits, min_size=1, max_size=3).map("".join)
    sep = st.sampled_from(["-", "-W", "-Q", "W", "--"])
    tail = st.sampled_from(["", "\n", "\n\n", " "])
    return st.tuples(year, sep, number, tail).map("".join) | st.text(max_size=10)


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(sorted(LABELS)), _labels())
@example("month", "2026-05\n")
@example("week", "2026-W\u00b27")
@example("quarter", "\u0967026-Q4")
@example("quarter", "2026-Q5")
def test_a_period_label_reads_as_its_regex(period, label):
    m = re.match(LABELS[period], label)
    assert periods._parse(period, label) == ((int(m.group(1)), int(m.group(2))) if m else None)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(["%", "%%", "j", "A", "a", "x", "u", "r", "n", "N", "z", "%z", "/", "é", "-"]),
                max_size=12).map("".join))
def test_a_log_pattern_expands_as_re_sub(pattern):
    values = {c: f"<{c}>" for c in "jAaxurnN"} | {"%": "%"}
    assert logpath._sub(pattern, values) == re.sub(logpath.PATTERN, lambda m: values[m.group(1)], pattern)
