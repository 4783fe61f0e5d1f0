"""tables.columns (every table of the CLI: stat, prio, acct, report, budget…) lays cells out as the
padded-copy layout before it did (`_padded` below: each cell str.ljust'ed to its column's width, two
spaces apart, the last column not padded, each line rstripped): cells with %, spaces, empty cells,
non-ASCII, empty tables, one column."""
from itertools import repeat

from hypothesis import given, settings, strategies as st

from labq.cli import statview
from labq.scheduler import tables


def _padded(cols, headers) -> str:
    padded = []
    last = len(headers) - 1
    for i, (h, col) in enumerate(zip(headers, cols)):
        if i == last:
            padded.append([h, *col])
            continue
        w = max(len(h), max(map(len, col), default=0))
        padded.append(list(map(str.ljust, [h, *col], repeat(w))))
    return "\n".join(map(str.rstrip, map("  ".join, zip(*padded))))


cell = st.one_of(st.sampled_from(["", " ", "%", "%s", "%(x)s", "%-3d", "é中", "a b", "12.50", "PD"]), st.text(max_size=6))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda k: st.tuples(
    st.lists(cell, min_size=k, max_size=k), st.integers(0, 8).flatmap(
        lambda n: st.lists(st.lists(cell, min_size=n, max_size=n), min_size=k, max_size=k)))))
def test_columns_lay_out_as_padded_cells(case):
    headers, cols = case
    assert tables.columns(cols, headers) == _padded(cols, headers)
    rows = [list(r) for r in zip(*cols)]
    assert statview.table(rows, headers) == _padded(cols if rows else [[] for _ in headers], headers)
