"""`labq plan`: what N identical jobs would do on a cluster — concurrency per resource, waves,
makespan, cost and what is left of the budget (pure arithmetic over nodes, a request and rates);
and, for a heterogeneous job list (`--file`), the simulator's replay of it."""
import math
from dataclasses import dataclass, replace

from . import units
from .errors import RefusedError, UsageError
from .jobs.model import Job, Node
from .money import ledger, pricing
from .settings.config import Config
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


def gangs_at_once(fits: list[int], nodes: int) -> int:
    """How many gangs of `nodes` parts run at once when node i holds fits[i] parts: each gang has
    its parts on `nodes` different nodes, so g gangs need sum(min(fit, g)) ≥ g × nodes."""
    g = sum(fits) // nodes
    while g and sum(min(f, g) for f in fits) < g * nodes:
        g -= 1
    return g


def what_if(nodes, job: Job, count: int, cfg: Config, budget_limit: int | None = None,
            warn=(0.7, 0.9)) -> WhatIf:
    """Raises RefusedError where not one such job could ever run on `nodes`."""
    sums = {"gpus": 0, "cpus": 0, "mem": 0, "slots": 0}
    unbounded: set = set()
    fits = []
    for n in nodes:
        fit = per_node(n, job)
        for k, v in fit.items():
            if v is None:
                unbounded.add(k)
            else:
                sums[k] += v
        fits.append(min(v for v in fit.values() if v is not None))
    overall = sum(fits)
    if job.nodes > 1:     # a gang runs one part per node, on as many different nodes as it has parts
        sums = {k: v // job.nodes for k, v in sums.items()}
        overall = gangs_at_once(fits, job.nodes)
    if not overall:
        raise RefusedError(_never(nodes, job))
    binding = min((k for k in ("gpus", "cpus", "mem", "slots") if k not in unbounded), key=lambda k: sums[k])
    # A resource the job asks none of is not a limit: None.
    conc: dict[str, int | None] = {k: None if k in unbounded else v for k, v in sums.items()}
    conc["overall"] = overall
    waves = math.ceil(count / overall)
    model = next((g.model for n in nodes for g in n.gpus if not job.gpu_type or g.model == job.gpu_type), "")
    cost = count * units.accrue(pricing.rate(job, "usd", model, cfg), job.time_limit)
    remaining = None if budget_limit is None else budget_limit - cost
    levels = tuple((w, int(budget_limit * w)) for w in warn) if budget_limit is not None else ()
    return WhatIf(conc, binding, waves, waves * job.time_limit, cost, budget_limit, remaining, levels)


def _never(nodes, job: Job) -> str:
    def n(count: int, what: str) -> str:
        return f"{count} {what}" + ("" if count == 1 else "s")
    each = " on each node" if job.nodes > 1 else ""
    ask = (f"{job.gpu_type + ':' if job.gpu_type else ''}{n(job.gpus, 'GPU')}, {n(job.cpus, 'CPU')}, "
           f"{units.fmt_size(job.mem)} memory{each}")
    where = f"no set of {job.nodes} nodes" if job.nodes > 1 else "no node"
    big = max(nodes, key=lambda x: (len(x.gpus), x.cpus, x.mem))
    return (f"plan: {where} of the cluster ({n(len(nodes), 'node')}) could ever hold one job ({ask}); the largest, "
            f"{big.name}, has {n(len(big.gpus), 'GPU')}, {n(big.cpus, 'CPU')}, {units.fmt_size(big.mem)}")


# -- labq plan --file: a heterogeneous job list, replayed by the simulator --------------------------
FILE_COLUMNS = ("count", "gpus", "cpus", "mem", "time", "est", "name", "qos", "nodes")
PLAN_BUDGET = "what-if"   # the budget of `--budget AMOUNT`


def load_jobs(path: str, cfg: Config) -> list:
    """The job list of `labq plan --file`: a CSV with a header; `time` is required, the rest optional.

        count  how many such jobs (1)          gpus  N or MODEL:N (0)      cpus  N (1)
        mem    a size like 12G (0)             time  the time limit: 2h, 90 (minutes), 1:30:00, 2-0
        est    how long each runs (its time)   name  a label              qos   a QoS class (normal)
        nodes  a multi-node job's node count (1): gpus, cpus and mem are then per node

    Every job is submitted at once; lines starting with # are comments."""
    from .sim.trace import TraceJob, read_numbered
    header, rows = read_numbered(path, "--file")
    if "time" not in header:
        raise UsageError(f"--file: {path}: missing column 'time' (have: {', '.join(header) or 'none'}; "
                         f"columns: {', '.join(FILE_COLUMNS)})")
    unknown = [h for h in header if h not in FILE_COLUMNS]
    if unknown:
        raise UsageError(f"--file: {path}: unknown column {unknown[0]!r} (columns: {', '.join(FILE_COLUMNS)})")
    jobs = []
    for line, row in rows:
        where = f"--file: {path}:{line}"
        cell = {k: (v or "").strip() for k, v in row.items() if k}
        try:
            count = int(cell.get("count") or 1)
            model, gpus = units.parse_gpus(cell.get("gpus") or "0", "gpus")
            cpus = int(cell.get("cpus") or 1)
            nodes = int(cell.get("nodes") or 1)
            mem = units.parse_size(cell.get("mem") or "0", "mem")
            limit = units.parse_duration(cell["time"], "time") if cell.get("time") else 0
            est = units.parse_duration(cell["est"], "est") if cell.get("est") else limit
        except ValueError:
            raise UsageError(f"{where}: expected whole numbers in count and cpus, got {row!r}") from None
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None
        if count < 1 or cpus < 1 or limit < 1 or not 1 <= nodes <= 1024:
            raise UsageError(f"{where}: count, cpus and nodes must be at least 1 (nodes at most 1024) "
                             f"and time at least 1s")
        qos = cell.get("qos") or "normal"
        if cfg.qos_named(qos) is None:
            raise UsageError(f"{where}: qos: unknown QoS {qos!r} (configured: {', '.join(q.name for q in cfg.qos)})")
        name = cell.get("name") or f"line{line}"
        for i in range(count):
            jobs.append(TraceJob(name=f"{name}[{i + 1}]" if count > 1 else name, submit=0.0, duration=min(est, limit),
                                 time_limit=limit, gpus=gpus, cpus=cpus, mem=mem, user="plan", qos=qos,
                                 gpu_type=model, nodes=nodes))
    if not jobs:
        raise UsageError(f"--file: {path}: no jobs")
    return jobs


def plan_file(path: str, nodes, cfg: Config, budget: str | None = None, amount: int | None = None,
              progress=None):
    """(simulator Result, report) for the job list at `path` on `nodes`, every job charged to the
    configured budget `budget`, or to a budget of `amount` micro-dollars (`PLAN_BUDGET`)."""
    from .sim.engine import simulate
    from .sim.metrics import report
    template = {}
    if amount is not None:
        cfg = replace(cfg, budgets=tuple(b for b in cfg.budgets if b.name != PLAN_BUDGET)
                      + (ledger.Budget(PLAN_BUDGET, "usd", amount),))
        template["budget"] = PLAN_BUDGET
    elif budget is not None:
        b = next(b for b in cfg.budgets if b.name == budget)
        template.update({"account": b.account} if b.account else {"project": b.project} if b.project
                        else {"budget": b.name})
    res = simulate(load_jobs(path, cfg), nodes, cfg, progress=progress, template=template)
    return res, report(res)
