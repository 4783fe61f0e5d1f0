"""Free capacity per node, and best-fit placement of one job.

A job fits a node when the node is up, has a free slot, enough free CPUs and memory, and enough
free GPUs of the requested model. Among the nodes that fit we take the tightest (fewest GPUs, then
CPUs, left over), so that large holes stay open for large jobs; ties go to the node name, which keeps
the plan deterministic.
"""
from dataclasses import dataclass

from ..model import Job, Node
from .. import states


@dataclass(slots=True)
class Free:
    """Mutable working copy of one node's free resources during one plan pass."""
    node: Node
    cpus: int
    mem: int
    slots: int
    gpus: list  # free Gpu objects, in index order

    def fits(self, job: Job) -> bool:
        return (self.slots >= 1 and self.cpus >= job.cpus and self.mem >= job.mem
                and len(self.matching(job)) >= job.gpus)

    def matching(self, job: Job):
        return [g for g in self.gpus if not job.gpu_type or g.model == job.gpu_type]

    def take(self, job: Job) -> tuple[str, ...]:
        chosen = self.matching(job)[:job.gpus]
        taken = {g.uuid for g in chosen}
        self.gpus = [g for g in self.gpus if g.uuid not in taken]
        self.cpus -= job.cpus
        self.mem -= job.mem
        self.slots -= 1
        return tuple(g.uuid for g in chosen)


def node_is_up(node: Node, now: float) -> bool:
    return node.state == "up" and node.lease_expiry > now


def free_capacity(nodes, jobs, now: float) -> dict[str, Free]:
    """Free resources of every up node after the allocations of jobs already on a node."""
    free = {n.name: Free(n, n.cpus, n.mem, n.slots, sorted(n.gpus, key=lambda g: g.index))
            for n in sorted(nodes, key=lambda n: n.name) if node_is_up(n, now)}
    for j in jobs:
        f = free.get(j.node) if j.state in states.ON_NODE else None
        if f is None:
            continue
        used = set(j.gpu_uuids)
        f.gpus = [g for g in f.gpus if g.uuid not in used]
        f.cpus -= j.cpus
        f.mem -= j.mem
        f.slots -= 1
    return free


def best_fit(job: Job, free: dict[str, Free]) -> Free | None:
    fitting = [f for f in free.values() if f.fits(job)]
    if not fitting:
        return None
    return min(fitting, key=lambda f: (len(f.gpus) - job.gpus, f.cpus - job.cpus, f.node.name))


def could_ever_hold(job: Job, node: Node) -> bool:
    """Whether the node, empty, could hold the job: the submit-time feasibility check."""
    gpus = [g for g in node.gpus if not job.gpu_type or g.model == job.gpu_type]
    return node.slots >= 1 and node.cpus >= job.cpus and node.mem >= job.mem and len(gpus) >= job.gpus
