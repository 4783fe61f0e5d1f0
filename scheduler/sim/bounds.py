"""The two small structures parked.py's cut reads: one budget's queued jobs of one rate sorted by
their bound, and the largest of the last n rooms; and the cut's rate for a room."""
from bisect import bisect_left, bisect_right
from collections import deque

from ..units import MS_PER_HOUR

INF = float("inf")


class Bounds:
    """One budget's queued jobs of one rate by bound: (c, id) sorted, and their ids alongside (a
    run of them is a slice, copied in C, not a walk over the pairs)."""
    __slots__ = ("keys", "ids")

    def __init__(self):
        self.keys: list[tuple] = []
        self.ids: list[int] = []

    def add(self, c: int, job_id: int) -> None:
        at = bisect_right(self.keys, (c, job_id))
        self.keys.insert(at, (c, job_id))
        self.ids.insert(at, job_id)

    def remove(self, c: int, job_id: int) -> None:
        at = bisect_left(self.keys, (c, job_id))
        del self.keys[at], self.ids[at]

    def over(self, x) -> int:
        """The index of the first job whose bound exceeds x."""
        return bisect_right(self.keys, (x, INF))


class Peak:
    """The largest of the last n values pushed (a deque of the candidates, decreasing)."""

    def __init__(self, n: int):
        self.n, self.count = n, 0
        self.best: deque = deque()       # (push number, value)

    def push(self, value) -> int:
        best = self.best
        while best and best[-1][1] <= value:
            best.pop()
        best.append((self.count, value))
        if best[0][0] <= self.count - self.n:
            best.popleft()
        self.count += 1
        return best[0][1]


def max_rate(x: int, seconds: float | None) -> int:
    """The largest rate r with accrue(r, seconds) <= x (-1 when x < 0, and without periods,
    `seconds` None: then no rate runs within the room, only the bound c counts)."""
    if x < 0 or seconds is None:
        return -1
    ms = max(0, int(seconds * 1000))
    if not ms:
        return 1 << 62
    return ((x + 1) * MS_PER_HOUR - 1) // ms
