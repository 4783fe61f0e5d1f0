"""What the kept Queue (queue.py) counts of its classes by kind, made and gone with them: each (GPUs,
CPUs) a class's job needs in all (classes.py: the most any waiting job needs, for Usage.tight), and
each request shape's classes, those judged on their own apart (settle.settled: whether any class
left may start now is then a look per shape, not per class left: a settled pass of a deep queue
read every class twice, ~15 % of a 20,000-job short-jobs-first replay through plan())."""
from typing import TYPE_CHECKING, Any

from ..jobs.model import Job

if TYPE_CHECKING:       # queue.py builds on this module
    from .queue import Group, Key

OWN = ("own",)      # the shape key of the classes judged on their own (classes._own)


class Kinds:
    __slots__ = ("needs", "shapes")

    def __init__(self) -> None:
        self.needs: dict[tuple[int, int], int] = {}     # (GPUs, CPUs) -> how many classes
        # request shape (GPUs, model, CPUs, memory), or OWN -> its classes
        self.shapes: dict[tuple[Any, ...], "dict[Group, None]"] = {}

    def count(self, k: "Key", g: "Group", head: Job, made: bool) -> None:
        """Class `k` (`g`, whose first job is `head`) was made (`made`) or is gone."""
        need = (head.total_gpus, head.cpus * head.nodes)
        left = self.needs.get(need, 0) + (1 if made else -1)
        if left:
            self.needs[need] = left
        else:
            del self.needs[need]
        shape = OWN if k[0][0] == "own" else k[0][5:9]
        mine = self.shapes.setdefault(shape, {})
        if made:
            mine[g] = None
        elif len(mine) > 1:
            del mine[g]
        else:
            del self.shapes[shape]
