"""What the running jobs hold, kept from one pass to the next by a caller that sees every start and
end (the simulator): plan()'s `standing` hint.

A pass starts from the free capacity of every up node after the running jobs' allocations and from
the quota usage they count (capacity.free_capacity, quota.Usage): a walk over every node and every
running job, the larger part of a pass that places one job on a big cluster. Given a Standing, the
pass starts from a copy of it instead; the plan is the same. The caller tells it each job that
starts and each that ends, and gives it only for the nodes it was made for, each up for as long.
"""
from collections.abc import Iterable

from ..jobs.model import Job, Node
from ..settings.config import Config
from .capacity import Placer, free_capacity
from .quota import Usage


class Standing:
    def __init__(self, nodes: Iterable[Node], cfg: Config, now: float) -> None:
        self.placer = Placer(free_capacity(nodes, (), now))
        self.usage = Usage((), cfg, sum(len(f.gpus) for f in self.placer.free.values()))

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
