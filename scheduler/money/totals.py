"""`labq report`'s kept totals: each ended job's part of the report as one cell of integers, so that
the report over whole hours is a sum of cells, not a walk over every job that ended in them.

A job's contribution is its report.Row over all its ended attempts (report.Row.vector: integer
micro-units and microseconds, so that any grouping of the sums gives the same total, to the bit).
Its cell is (hour, account, user, qos, project, state): the hour (UTC, `HOUR` s) in which its
attempts and its end fall. A job whose attempts end in several hours (a retry across an hour's edge),
or that ended in another hour than they did, is "split": its contribution is kept per hour of its
attempts (split()) and added where all those in the window are whole hours. The report reads the
records of jobs with no kept contribution yet ("?"), of split jobs with attempts in the window's
partial first or last hour, and of the jobs that ended in those hours. A job without an ended attempt
counts for nothing ("").

Only --by keys that are the job's own (CELL_KEYS) can be answered from cells: gpu_type and node are
an attempt's, name and tags too many to keep (those reports read every job, as before).
"""
from __future__ import annotations

import math
import operator

from ..cjson import compact_utf8, loads  # json.dumps(ensure_ascii=False), json.loads without `json` (cjson.py)
from .report import Row

HOUR = 3600
DIMS = ("account", "user", "qos", "project", "state")
CELL_KEYS = frozenset(("account", "user", "qos", "project", "status"))
SPLIT, UNKNOWN = "s\t", "?"


def contribution(j, end: float) -> str:
    """The kept text of ended job `j` whose history score (its end) is `end`: "" (nothing to
    count), "CELL\\tN N N…" (the cell, JSON [hour, *DIMS], and Row.vector's integers), or SPLIT
    "JSON DIMS\\tCOMPLETED ENDED\\tHOUR N N…\\t…" (per hour of its attempts, Row.vector's sums from
    the attempts on)."""
    hours: dict[int, Row] = {}
    whole = Row(())
    for a in j.attempts:
        if a.end_time is not None:
            hours.setdefault(math.floor(a.end_time / HOUR), Row(())).add(j, a)
            whole.add(j, a)
    if not hours:
        return ""
    hour = math.floor(end / HOUR)
    if list(hours) != [hour]:
        head = SPLIT + compact_utf8([j.account, j.user, j.qos, j.project, j.state])
        flags = " ".join(map(str, whole.vector()[1:3]))
        return "\t".join([head, flags, *(" ".join(map(str, (h, *r.vector()[3:]))) for h, r in sorted(hours.items()))])
    cell = compact_utf8([hour, j.account, j.user, j.qos, j.project, j.state])
    return cell + "\t" + " ".join(map(str, whole.vector()))


def parse(text: str) -> tuple[str, list[int]] | None:
    """(cell, vector) of a kept text; None for "", SPLIT or UNKNOWN (nothing kept in a cell)."""
    if text.startswith(SPLIT):
        return None
    cell, tab, vec = text.partition("\t")
    return (cell, [int(v) for v in vec.split(" ")]) if tab else None


def split(text: str, first: int, last: int | None, edges: tuple[int, ...]):
    """A split job's part of the window's whole hours [first, last): (dims_of's text, vector), or None
    where it has no attempt in them, or "raw" where one ended in a partial hour of the window (`edges`):
    its record is read instead."""
    parts = text.split("\t")
    acc = None
    for piece in parts[3:]:
        h, _, rest = piece.partition(" ")
        hour = int(h)
        if hour in edges:
            return "raw"
        if hour >= first and (last is None or hour < last):
            got = map(int, rest.split(" "))
            acc = list(got) if acc is None else list(map(operator.add, acc, got))
    return None if acc is None else (parts[1][1:-1], [1, *map(int, parts[2].split(" ")), *acc])


def add(into: dict[str, list[int]], cell: str, vec: list[int], sign: int = 1) -> None:
    """into[cell] += sign * vec (a cell that sums to all zeros stays: see dumps)."""
    have = into.get(cell)
    if have is None:
        into[cell] = list(vec) if sign == 1 else [-v for v in vec]
    else:       # C loops: a week's ~1,000 cells
        into[cell] = list(map(operator.add if sign == 1 else operator.sub, have, vec))


def dumps(vec: list[int]) -> str | None:
    """A cell's stored text; None where it holds no job any more (deleted, not kept as zeros)."""
    return " ".join(map(str, vec)) if vec[0] else None


def hour_of(cell: str) -> int:
    return int(cell[1:cell.index(",")])


def window(since: float, until: float) -> tuple[int, int | None]:
    """The whole hours [first, last) inside [since, until) (last None: no end); first >= last: none."""
    first = math.ceil(since / HOUR)
    return first, (None if until == float("inf") else math.floor(until / HOUR))


def dims_of(cell: str) -> str:
    """A cell's DIMS as the text of JSON values between commas (the key sums() adds cells under)."""
    return cell[cell.index(",") + 1:-1]


def sums(by_dims: dict[str, list[int]]):
    """(DIMS' values, vector) of sums keyed by dims_of's text, those that count a job."""
    return [(tuple(loads("[" + d + "]")), vec) for d, vec in by_dims.items() if vec[0]]
