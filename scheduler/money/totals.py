"""`labq report`'s kept totals: each ended job's part of the report as one cell of integers, so that
the report over whole hours is a sum of cells, not a walk over every job that ended in them.

A job's contribution is its report.Row over all its ended attempts (report.Row.vector: integer
micro-units and microseconds, so that any grouping of the sums gives the same total, to the bit).
Its cell is (hour, account, user, qos, project, state): the hour (UTC, `HOUR` s) in which its
attempts and its end fall. A job whose attempts end in several hours (a retry across an hour's edge)
is "split" ("s"): the report reads its record, as it does a job that has no kept contribution yet
("?"), and the jobs of the window's partial first and last hours. A job without an ended attempt
counts for nothing ("").

Only --by keys that are the job's own (CELL_KEYS) can be answered from cells: gpu_type and node are
an attempt's, name and tags too many to keep (those reports read every job, as before).
"""
from __future__ import annotations

import json
import math

from .report import Row

HOUR = 3600
DIMS = ("account", "user", "qos", "project", "state")
CELL_KEYS = frozenset(("account", "user", "qos", "project", "status"))
SPLIT, UNKNOWN = "s", "?"
_ENC = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def contribution(j, end: float) -> str:
    """The kept text of ended job `j` whose history score (its end) is `end`: "" (nothing to
    count), SPLIT, or "CELL\\tN N N…" (the cell, JSON [hour, *DIMS], and Row.vector's integers)."""
    ends = [a.end_time for a in j.attempts if a.end_time is not None]
    if not ends:
        return ""
    hour = math.floor(end / HOUR)
    if any(math.floor(t / HOUR) != hour for t in ends):
        return SPLIT
    row = Row(())
    for a in j.attempts:
        if a.end_time is not None:
            row.add(j, a)
    cell = _ENC.encode([hour, j.account, j.user, j.qos, j.project, j.state])
    return cell + "\t" + " ".join(map(str, row.vector()))


def parse(text: str) -> tuple[str, list[int]] | None:
    """(cell, vector) of a kept text; None for "", SPLIT or UNKNOWN (nothing kept in a cell)."""
    cell, tab, vec = text.partition("\t")
    return (cell, [int(v) for v in vec.split(" ")]) if tab else None


def add(into: dict[str, list[int]], cell: str, vec: list[int], sign: int = 1) -> None:
    """into[cell] += sign * vec (a cell that sums to all zeros stays: see dumps)."""
    have = into.get(cell)
    if have is None:
        into[cell] = [sign * v for v in vec]
    else:
        for i, v in enumerate(vec):
            have[i] += sign * v


def dumps(vec: list[int]) -> str | None:
    """A cell's stored text; None where it holds no job any more (deleted, not kept as zeros)."""
    return " ".join(map(str, vec)) if vec[0] else None


def hour_of(cell: str) -> int:
    return int(cell[1:cell.index(",")])


def window(since: float, until: float) -> tuple[int, int | None]:
    """The whole hours [first, last) inside [since, until) (last None: no end); first >= last: none."""
    first = math.ceil(since / HOUR)
    return first, (None if until == float("inf") else math.floor(until / HOUR))


def cells_in(cells: dict[str, list[int]], first: int, last: int | None):
    """(dims, vector) of the cells whose hour lies in [first, last), dims as DIMS."""
    for cell, vec in cells.items():
        h = hour_of(cell)
        if h >= first and (last is None or h < last) and vec[0]:
            yield tuple(json.loads(cell)[1:]), vec
