"""What the running jobs hold, kept from one pass to the next by a caller that sees every start and
end (the simulator; the daemon through kept.py, from what seen.py found changed): plan()'s
`standing` hint.

A pass starts from the free capacity of every up node after the running jobs' allocations and from
the quota usage they count (capacity.free_capacity, quota.Usage): a walk over every node and every
running job, the larger part of a pass that places one job on a big cluster. Given a Standing, the
pass starts from a copy of it instead; the plan is the same. The caller tells it each job that
starts and each that ends, and gives it only for the nodes it was made for, each up for as long
(`stands`: the daemon's nodes heartbeat, a new record each time, and a lease may run out).
"""
from collections.abc import Sequence
from dataclasses import replace
from itertools import compress
from math import inf
from operator import is_not

from ..jobs.model import Job, Node
from ..settings.config import Config
from .capacity import Free, Placer, free_capacity, node_is_up
from .quota import Usage


class Standing:
    def __init__(self, nodes: Sequence[Node], cfg: Config, now: float) -> None:
        self.cfg, self.nodes = cfg, tuple(nodes)
        self.placer = Placer(free_capacity(nodes, (), now))
        self.usage = Usage((), cfg, sum(len(f.gpus) for f in self.placer.free.values()))
        self.until = _until(self.nodes, now)

    def stands(self, nodes: Sequence[Node], cfg: Config, now: float) -> bool:
        """Whether it still counts for `nodes` under `cfg` at `now`: the same config, the same nodes
        in the same order, each as up as it was and changed in nothing but its lease and heartbeat
        (a changed one is taken in: plan() reads a place's node), no lease run out since."""
        if cfg is not self.cfg or len(nodes) != len(self.nodes) or now >= self.until:
            return False
        changed = list(compress(range(len(nodes)), map(is_not, self.nodes, nodes)))
        free = self.placer.free
        for k in changed:
            old, new = self.nodes[k], nodes[k]
            if replace(new, lease_expiry=old.lease_expiry, last_heartbeat=old.last_heartbeat) != old \
                    or node_is_up(new, now) != (new.name in free):
                return False
        for k in changed:
            spot = free.get(nodes[k].name)
            if spot is not None:        # a new Free: the old one may be shared with a pass's copy
                free[spot.node.name] = Free(nodes[k], spot.cpus, spot.mem, spot.slots, list(spot.gpus))
                self.placer.shared.discard(spot.node.name)
        if changed:     # every node it counts is up at `now` (none lapsed, each changed one asked)
            self.nodes = tuple(nodes)
            self.until = _until(self.nodes, now)
        return True

    def start(self, job: Job) -> None:
        """The job is on its nodes now (as `job.on_nodes` names them)."""
        self._count(job, 1)

    def end(self, job: Job) -> None:
        """The job, as it ran, has left its nodes."""
        self._count(job, -1)

    def _count(self, job: Job, sign: int) -> None:
        # Usage counts the job whatever its nodes; the free GPUs are those of up nodes only, as the
        # pass's own count (free_capacity) has them: a job on a drained node takes none of them.
        self.usage.add(job, freed=False, sign=sign)
        self.usage.free_gpus -= sign * self.placer.occupy(job, sign)


def _until(nodes: Sequence[Node], now: float) -> float:
    """When the first lease of an up node runs out (then that node is down: node_is_up)."""
    return min((n.lease_expiry for n in nodes if node_is_up(n, now)), default=inf)
