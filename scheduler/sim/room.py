"""What the simulator needs to prove that a plan() pass could place nothing: each node's free
resources, kept up to date as attempts start and end, and the smallest pending requests.

The fit rule is capacity.Free.fits (a slot, CPUs, memory and enough free GPUs of the model):
plan() never places a job that fails it, so "no pending request fits any node" means no Place.
"""
from collections import Counter

from ..model import Job, Node
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
    """The pending requests as a multiset of shapes, and its minimal elements: if none of those
    fits a node, no pending request does."""

    def __init__(self):
        self.count: Counter = Counter()
        self._minimal: list | None = []

    def add(self, job: Job) -> None:
        s = shape(job)
        self.count[s] += 1
        if self.count[s] == 1:
            self._minimal = None

    def remove(self, job: Job) -> None:
        s = shape(job)
        self.count[s] -= 1
        if not self.count[s]:
            del self.count[s]
            self._minimal = None

    def minimal(self) -> list:
        if self._minimal is None:
            out: list = []
            for s in sorted(self.count, key=lambda s: (s[0], s[2], s[3], s[1] != "")):
                if not any(covers(m, s) for m in out):
                    out.append(s)
            self._minimal = out
        return self._minimal
