"""Text tables as the CLI prints them (every `labq` table, cli/statview.py) and as the scheduler
pre-renders `labq prio`'s (priotable.py): in scheduler/, so that the daemon lays a table out with the
very code the client uses."""
from collections.abc import Sequence


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
