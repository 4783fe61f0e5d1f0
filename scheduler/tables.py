"""Text tables as the CLI prints them (every `labq` table, cli/statview.py) and as the scheduler
pre-renders `labq prio`'s (priotable.py): in scheduler/, so that the daemon lays a table out with the
very code the client uses."""
from collections.abc import Sequence
from itertools import compress, repeat
from operator import add, getitem, itemgetter, ne, sub


def columns(cols: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    """A table from its columns (lists of str), in C: `acct` prints ~100k rows of a month, `stat` and
    `prio` 10,000. Each column's width is its longest cell's (one pass of len); each line is then one
    %-format of its cells (`%-Ws  %-Ws  …  %s`: padded as str.ljust pads, the last cell not), no
    padded copy of every cell and no join per line."""
    widths = [max(len(h), max(map(len, col), default=0)) for h, col in zip(headers[:-1], cols)]
    line = "  ".join([*(f"%-{w}s" for w in widths), "%s"])
    return "\n".join(map(str.rstrip, map(line.__mod__, [tuple(headers), *zip(*cols)])))


def compact_ids(ids: Sequence[object]) -> list[str]:
    """`["57_0", "57_1", …, "57_8999", "60"]` → `["57_[0-8999]", "60"]`: runs of one array's
    consecutive task indices, in the given order."""
    out: list[str] = []
    run: list[tuple[str, int]] = []

    def flush() -> None:
        if run:
            a, lo, hi = run[0][0], run[0][1], run[-1][1]
            out.append(f"{a}_[{lo}-{hi}]" if hi != lo else f"{a}_{lo}")
            run.clear()

    for i in ids:
        arr, sep, idx = str(i).partition("_")
        if sep and idx.isdigit():
            if run and (run[-1][0] != arr or run[-1][1] + 1 != int(idx)):
                flush()
            run.append((arr, int(idx)))
        else:
            flush()
            out.append(str(i))
    flush()
    return out


def compact_tasks(a: int, ds: list[str]) -> list[str]:
    """compact_ids of one array `a`'s display ids ("A_i", in order), by C loops over their indices (an
    array's 10,000 tasks in a patched `labq prio`, priopatch.py)."""
    x = list(map(int, map(itemgetter(2), map(str.partition, ds, repeat("_")))))
    cut = [0, *compress(range(1, len(x)), map(ne, map(sub, x[1:], x), repeat(1))), len(x)]
    return [f"{a}_[{x[i]}-{x[j - 1]}]" if j - i > 1 else f"{a}_{x[i]}" for i, j in zip(cut, cut[1:])]


def widen(lines: list[str], starts: list[int], widths: list[int], wide: list[int]) -> list[str]:
    """`lines` of a table as `columns` lays it out (its columns starting at `starts`) laid out again
    from `widths` to `wide`: each column that changes gains or loses spaces at its end, the last
    first (the earlier columns' places stay), by C loops over the lines (priopatch.py)."""
    for c in reversed(range(len(widths))):
        d = wide[c] - widths[c]
        if not d:
            continue
        end = starts[c] + widths[c]
        head = map(getitem, lines, repeat(slice(None, end + min(d, 0))))
        if d > 0:
            head = map(add, head, repeat(" " * d))
        lines = list(map(add, head, map(getitem, lines, repeat(slice(end, None)))))
    return lines
