"""What the simulator needs to prove that a plan() pass could place nothing: each node's free
resources, kept up to date as attempts start and end, and the pending requests indexed by shape.

The fit rule is capacity.Free.fits (a slot, CPUs, memory and enough free GPUs of the model):
plan() never places a job that fails it, so "no pending request fits any node" means no Place.
"""
from bisect import bisect_left, insort
from collections import Counter

from ..jobs.model import Job, Node
from ..policy.capacity import covers, shape

__all__ = ["Room", "Shapes", "covers", "shape"]


class Room:
    """Free CPUs, memory, slots and GPUs per model, for every node."""

    def __init__(self, nodes: tuple[Node, ...]):
        self.free = {n.name: [n.cpus, n.mem, n.slots, Counter(g.model for g in n.gpus)] for n in nodes}
        self.model = {g.uuid: g.model for n in nodes for g in n.gpus}

    def _change(self, job: Job, sign: int) -> None:
        for node, gpus in job.on_nodes:     # a gang: its per-node shape on each of its nodes
            f = self.free[node]
            f[0] -= sign * job.cpus
            f[1] -= sign * job.mem
            f[2] -= sign
            for u in gpus:
                f[3][self.model[u]] -= sign

    def take(self, job: Job) -> None:
        self._change(job, 1)

    def give(self, job: Job) -> None:
        self._change(job, -1)

    def fits_somewhere(self, shapes) -> bool:
        for cpus, mem, slots, gpus in self.free.values():
            if slots < 1:
                continue
            total = sum(gpus.values())
            for g, model, c, m in shapes:
                if cpus >= c and mem >= m and (gpus[model] if model else total) >= g:
                    return True
        return False


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

    def fit_some(self, room: Room) -> bool:
        """Whether some shape fits some node's room: Room.fits_somewhere over every shape."""
        for cpus, mem, slots, gpus in room.free.values():
            if slots < 1:
                continue
            total = sum(gpus.values())
            for _ in self.within(cpus, mem, lambda g, model: (gpus[model] if model else total) >= g):
                return True
        return False
