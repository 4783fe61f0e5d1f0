"""The virtual clock: arrivals (already sorted by time) merged with a heap of attempt ends.

`batches()` yields one instant at a time with everything that happens then: the ends first (in
the order they were scheduled), then the arrivals (their places in the trace, in trace order). An end scheduled *at* the
current instant while it is being handled (a zero-length run) comes out as a further batch at the
same instant, just as the daemon would see it on its next tick.
"""
import heapq
import itertools
import math
from array import array


class Clock:
    def __init__(self, arrivals):
        """`arrivals`: the trace's submit times, sorted; an arrival is its place among them. Kept as
        floats in an array: a list of (time, place) pairs was ~110 bytes a job, 22 MB of a 200,000-job
        replay (issue 41: ≤ 500 MB)."""
        self._arrivals = array("d", arrivals)
        self._next = 0
        self._heap: list = []
        self._seq = itertools.count()

    def at(self, t: float, item) -> None:
        """Schedule an item (an attempt's end, a wake-up) at time t."""
        heapq.heappush(self._heap, (t, next(self._seq), item))

    def arrived(self) -> int:
        return self._next

    def waiting(self) -> bool:
        """Whether arrivals are still to come."""
        return self._next < len(self._arrivals)

    def batches(self):
        """(t, ends, arrivals) until nothing is left; the heap may grow while a batch is handled."""
        heap, arrivals = self._heap, self._arrivals
        while heap or self._next < len(arrivals):
            t = min(heap[0][0] if heap else math.inf,
                    arrivals[self._next] if self._next < len(arrivals) else math.inf)
            ends = []
            while heap and heap[0][0] == t:
                ends.append(heapq.heappop(heap)[2])
            first = self._next
            while self._next < len(arrivals) and arrivals[self._next] == t:
                self._next += 1
            yield t, ends, list(range(first, self._next))
