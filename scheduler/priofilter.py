"""`labq prio -u USER` and `-A ACCOUNT` from the published ranking (issue 39 item 4).

They ranked every pending job themselves (~3x a `labq sub` at 10,000 pending, against the plain
`prio`'s published text), to print the lines of one user's or account's. The published table
(daemon/ranking.py: priotable.table over the whole queue, as of its time) holds those lines already:
only() keeps the lines whose USER / ACCOUNT cell says so, and lays them out again as priotable.table
lays out that subset (tables.columns: each column as wide as its longest kept cell). Cells are cut
at the header's column starts, so a value holding spaces stays whole.

One thing differs: priotable.lines joins an array's tasks one after another with the same cells into
one line, and the lines of another user or account between two of an array's lines may be what kept
them apart. Where two kept lines in a row are one array's with the same cells, only() declines
(None): `prio` then ranks the rows, as before.
"""
from __future__ import annotations

from itertools import compress, repeat
from operator import eq, itemgetter

from .tables import columns


def only(text: str, user: str | None, account: str | None) -> str | None:
    """`text` (a plain `prio`'s: the weights line, the table) with only `user`'s / `account`'s lines.
    In C loops over the lines (a user's 10,000 held jobs are 10,000 lines): a column's cells are the
    same slice of each line, padded to the same width; the kept lines are printed as they are where
    every column keeps its width (a kept cell fills it, or its name does), else laid out again."""
    weights, header, *lines = text.split("\n")
    names = header.split()
    starts = [0]
    for k in range(1, len(names)):      # QOS is two columns' name: each found after the one before
        starts.append(header.index(names[k], starts[-1] + len(names[k - 1])))
    kept = lines
    for col, want in ((1, user), (2, account)):
        if want:
            padded = want.ljust(starts[col + 1] - starts[col])
            kept = list(compress(kept, map(eq, map(itemgetter(slice(starts[col], starts[col + 1])), kept),
                                           repeat(padded))))
    if any(map(str.__contains__, map(itemgetter(slice(0, starts[1])), kept), repeat("_"))):
        cells = [[line[a:b].rstrip() for a, b in zip(starts, [*starts[1:], None])] for line in kept]
        for a, b in zip(cells, cells[1:]):
            if a[1:] == b[1:] and "_" in a[0] and a[0].partition("_")[0] == b[0].partition("_")[0]:
                return None     # one array's tasks that the live table makes one line
    if kept and all(map(_full, repeat(kept), names, starts, starts[1:])):
        return "\n".join([weights, header, *kept])
    rows = [[line[a:b].rstrip() for a, b in zip(starts, [*starts[1:], None])] for line in kept]
    return weights + "\n" + columns(list(zip(*rows)) if rows else [[] for _ in names], names)


def _full(kept: list[str], name: str, start: int, end: int) -> bool:
    """Whether the column at [start, end) of the lines (its cells padded, then two spaces) keeps its
    width in `kept`: its name is as wide, or some kept cell reaches its last place."""
    last = "".join(map(itemgetter(slice(end - 3, end - 2)), kept))
    return len(name) == end - start - 2 or (last != "" and not last.isspace())
