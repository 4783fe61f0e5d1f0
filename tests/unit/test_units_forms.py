"""units.py reads durations like `2h30m` and sizes like `1.5GiB` by hand (no `re` import on the hot
commands' path, issue 39 item 4): the same texts accepted, the same values, as the regexes it had."""
import re

from hypothesis import example, given, settings, strategies as st

from labq.scheduler import units

SUFFIXED = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|[smhdw]))+$")
PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhdw])")
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:ib|i|b)?\s*$")
PIECES = st.sampled_from(["1", "2", "30", "0", ".", "5.", ".5", "ms", "m", "s", "h", "d", "w", "k", "g", "t", "b", "i",
                          "ib", " ", "\t", "\n", "-", ":", ",", "e", "x", "٣", "²", "\u3000"])
TEXTS = st.lists(PIECES, max_size=10).map("".join)


def _old_suffixed(s):
    return sum(float(n) * units._SUFFIX[u] for n, u in PART.findall(s)) if SUFFIXED.match(s) else None


def _old_size(s):
    m = SIZE.match(s)
    return (m.group(1), m.group(2)) if m else None


@settings(max_examples=3000, deadline=None)
@given(TEXTS)
@example("2h30m")
@example("250ms")
@example("1.5d")
@example("12.")
@example("5m5s")
@example("٣h")       # \d is any decimal digit, as str.isdecimal; float() reads them
def test_durations_read_as_the_regex_read_them(s):
    s = s.strip()       # as parse_duration and parse_seconds hand it on (the regex's `$` took a last newline)
    assert units._suffixed(s) == _old_suffixed(s)


@settings(max_examples=3000, deadline=None)
@given(TEXTS)
@example(" 1.5 tib ")
@example("64gi")
@example("12 g b")
@example("12\n")
@example("\u30001g")
def test_sizes_read_as_the_regex_read_them(s):
    assert units._size_parts(s) == _old_size(s)


def test_the_public_parsers_give_the_same_answers():
    assert units.parse_duration("2h30m") == 9000 and units.parse_seconds("250ms") == 0.25
    assert units.parse_size("1.5GiB") == 3 << 29 and units.parse_size(" 12 g ") == 12 << 30


NAME = st.lists(st.sampled_from(["node", "gpu", "0", "1", "7", "09", "٣", "-", "a1b", ""]), max_size=4).map("".join)


@settings(max_examples=2000, deadline=None)
@given(st.lists(NAME, max_size=8))
@example(["node1", "node2", "gpu07"])
@example(["node01", "node1", "n٣", "x"])
def test_node_lists_compact_as_the_regex_split_them(names):
    """hostlist.compact splits a name's last digits by hand (no `re` on `labq stat`'s path): as
    r"^(.*?)(\\d+)$" split them (node names hold no newline, which that `$` would have dropped)."""
    from labq.scheduler.jobs import hostlist
    num = re.compile(r"^(.*?)(\d+)$")
    for name in names:
        m = num.match(name)
        assert hostlist._split(name) == ((m.group(1), m.group(2)) if m else (name, ""))
    assert hostlist.compact(["node1", "node2", "gpu07", "node3", "gpu08"]) == "node[1-3],gpu[07-08]"
