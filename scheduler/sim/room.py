"""What the simulator needs to prove that a plan() pass could place nothing: the pending requests
indexed by shape, against each node's free room as plan()'s standing keeps it (policy.Standing, a
capacity.Free per node, kept up to date as attempts start and end).

The fit rule is capacity.Free.fits (a slot, CPUs, memory and enough free GPUs of the model):
plan() never places a job that fails it, so "no pending request fits any node" means no Place.
`Shapes.within` asks the same of a shape.
"""
from bisect import bisect_left, insort
from collections import Counter

from ..jobs.model import Job
from ..policy.capacity import shape

__all__ = ["Shapes", "fits_somewhere"]


def fits_somewhere(free: dict, jobs) -> bool:
    """Whether some of `jobs` fits some node's free room `free` (name -> capacity.Free, the running
    jobs' standing: policy.Standing's placer), by plan()'s own fit rule, Free.fits."""
    return any(f.fits(j) for f in free.values() for j in jobs)


def _free_gpus(f):
    """`Shapes.within`'s GPU test for the free room `f` (a capacity.Free): the GPUs of a model free."""
    total = len(f.gpus)
    return lambda g, model: (sum(1 for x in f.gpus if x.model == model) if model else total) >= g


class Shapes:
    """The pending requests as a set of shapes, indexed for "which fit this room": per (GPUs, GPU
    model), the (CPUs, memory) pairs in order, so a room is matched against the pairs up to its
    CPUs only. A deep queue of heterogeneous requests (fractional CPUs, memory per job) has about a
    shape per job; a full cluster's rooms have few GPUs and match few groups."""

    def __init__(self):
        self.count: Counter = Counter()
        self.groups: dict[tuple, list] = {}     # (gpus, model) -> sorted [(cpus, mem)]

    def add(self, job: Job) -> None:
        s = shape(job)
        self.count[s] += 1
        if self.count[s] == 1:
            insort(self.groups.setdefault((s[0], s[1]), []), (s[2], s[3]))

    def remove(self, job: Job) -> None:
        s = shape(job)
        self.count[s] -= 1
        if not self.count[s]:
            del self.count[s]
            mine = self.groups[(s[0], s[1])]
            del mine[bisect_left(mine, (s[2], s[3]))]
            if not mine:
                del self.groups[(s[0], s[1])]

    def within(self, cpus, mem, gpus_free):
        """The shapes that fit `cpus` and `mem` and whose GPUs `gpus_free(gpus, model)` allows
        (never asked for a shape of no GPUs), lazily."""
        for (g, model), pairs in self.groups.items():
            if g and not gpus_free(g, model):
                continue
            for c, m in pairs:
                if c > cpus:
                    break
                if m <= mem:
                    yield (g, model, c, m)

    def fit_some(self, free: dict, less: Counter | None = None) -> bool:
        """Whether some shape fits some node's free room (name -> capacity.Free): fits_somewhere
        over a job of every shape; `less`: shape -> how many of its jobs not to count (a spent
        budget's idle ones, idle.py)."""
        count = self.count
        for f in free.values():
            if f.slots < 1:
                continue
            for s in self.within(f.cpus, f.mem, _free_gpus(f)):
                if not less or count[s] > less[s]:
                    return True
        return False
