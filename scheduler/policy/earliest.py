"""Each node's earliest start for one request shape, kept between passes with the running jobs'
timelines (tracks.py), so that a reservation costs what changed, not a walk over every node.

A reservation is the first (time, node) by time, then name, at which the job fits for its span
(backfill.Timelines.reserve). On the timelines Tracks keeps, a node's answer for a shape (CPUs,
memory, GPUs, GPU model, span) stays the same from pass to pass until either
- that node's kept timeline changed (a running job started, ended, was preempted or filed again
  there: Tracks logs the node), or
- the clock passed the answer (it was `now` or an end that has since come): only then can a later
  `after` start it elsewhere on that node, and the node is asked again.
An answer t computed for `after` is also the answer for any later `after2` <= t: every candidate in
[after, t) failed on some segment of its window; a candidate in [after2, t) that was no end starts
after the last end before it, where usage only grew since, so it fails there too.

So `Earliest` keeps each node's answer and the answers in (time, name) order; `refresh` asks again
only the nodes logged since and the answers the clock passed. A pass's own admissions and earlier
reservations are written on its own copies of those nodes (Timelines._own): it asks those itself,
and reads the first kept answer on any other node. The same reservation as a walk over every node
(tests/property/test_backfill_earliest.py)."""
from bisect import bisect_left, insort
from collections.abc import Callable, Container

# (CPUs, memory, GPUs, GPU model, span): what Timelines._earliest and could_ever_hold read of a job.
Shape = tuple[int, int, int, str, float]
# A node's earliest start on its kept timeline, or None: it never fits there.
Ask = Callable[[str], float | None]


class Earliest:
    __slots__ = ("gen", "pos", "after", "at", "order")

    def __init__(self, gen: int, pos: int, after: float, at: dict[str, float | None]) -> None:
        self.gen, self.pos, self.after = gen, pos, after     # Tracks' generation and log length, the after
        self.at = at                                          # node -> its answer (None: never)
        self.order = sorted((t, n) for n, t in at.items() if t is not None)

    def refresh(self, changed: list[str], after: float, ask: Ask) -> None:
        """Valid again for `after` (>= self.after): the `changed` nodes and the answers before `after`
        asked again."""
        again = set(changed)
        order = self.order
        k = bisect_left(order, (after, ""))
        again.update(n for _, n in order[:k])
        for n in again:
            old = self.at.get(n)
            t = ask(n)
            if t == old:
                continue
            if old is not None:
                i = bisect_left(order, (old, n))
                if i < len(order) and order[i] == (old, n):
                    del order[i]
            self.at[n] = t
            if t is not None:
                insort(order, (t, n))
        self.after = after

    def first(self, skip: Container[str]) -> tuple[float, str] | None:
        """The first answer by (time, name) on a node not in `skip` (the pass's own copies)."""
        for t, n in self.order:
            if n not in skip:
                return t, n
        return None
