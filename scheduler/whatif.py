"""`labq plan`: what N identical jobs would do on a cluster — concurrency per resource, waves,
makespan, cost and what is left of the budget. Pure arithmetic over nodes, a request and rates."""
import math
from dataclasses import dataclass

from . import ledger
from .config import Config
from .model import Job, Node
from .units import MICRO


@dataclass(frozen=True)
class WhatIf:
    concurrency: dict          # gpus, cpus, mem, slots, overall
    binding: str               # the resource that sets `overall`
    waves: int
    makespan_s: int
    cost: int                  # micro-units of the currency
    budget_limit: int | None
    budget_remaining: int | None
    warn_levels: tuple         # ((fraction, micro), …)

    def as_json(self) -> dict:
        return {"concurrency": self.concurrency, "binding": self.binding, "waves": self.waves,
                "makespan_s": self.makespan_s, "cost": self.cost / MICRO,
                "budget_limit": None if self.budget_limit is None else self.budget_limit / MICRO,
                "budget_remaining": None if self.budget_remaining is None else self.budget_remaining / MICRO,
                "warn_levels": [{"fraction": f, "amount": a / MICRO} for f, a in self.warn_levels]}


def per_node(node: Node, job: Job) -> dict:
    gpus = [g for g in node.gpus if not job.gpu_type or g.model == job.gpu_type]
    return {"gpus": len(gpus) // job.gpus if job.gpus else None,
            "cpus": node.cpus // job.cpus if job.cpus else None,
            "mem": node.mem // job.mem if job.mem else None,
            "slots": node.slots}


def what_if(nodes, job: Job, count: int, cfg: Config, budget_limit: int | None = None,
            warn=(0.7, 0.9)) -> WhatIf:
    conc = {"gpus": 0, "cpus": 0, "mem": 0, "slots": 0}
    overall, unbounded = 0, set()
    for n in nodes:
        fit = per_node(n, job)
        for k, v in fit.items():
            if v is None:
                unbounded.add(k)
            else:
                conc[k] += v
        overall += min(v for v in fit.values() if v is not None)
    for k in unbounded:
        conc[k] = None   # the job asks for none of it: not a limit
    conc["overall"] = overall
    binding = min((k for k in ("gpus", "cpus", "mem", "slots") if conc[k] is not None), key=lambda k: conc[k])
    waves = math.ceil(count / overall) if overall else 0
    model = next((g.model for n in nodes for g in n.gpus if not job.gpu_type or g.model == job.gpu_type), "")
    cost = count * ledger.accrue(ledger.rate(job, "usd", model, cfg), job.time_limit)
    remaining = None if budget_limit is None else budget_limit - cost
    levels = tuple((w, int(budget_limit * w)) for w in warn) if budget_limit is not None else ()
    return WhatIf(conc, binding, waves, waves * job.time_limit, cost, budget_limit, remaining, levels)
