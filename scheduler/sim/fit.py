"""Jobs a cluster could never hold. In a replay such a job is a mistake in the trace or in the
cluster given for it (`--cpus 25` for a trace of 100-processor jobs), so `labq simulate` answers it
as malformed input: one line naming the trace's line, the column and the cluster's size (exit 2).
`--drop-too-large` replays without them instead: they are refused at submit as `labq sub` would
refuse them, and the report counts them (`refused`, kind `capacity`).

"Could never hold" is the submit check's (`policy.refusal`, `capacity.could_ever_hold`) on the job
as the replay shapes it (`submit.gang_shape`: more GPUs than any node has is a gang of whole nodes).
Pure.
"""
from ..errors import UsageError
from .submit import gang_shape
from .trace import GIB, TraceJob


def _gpus(node, model: str) -> int:
    return sum(1 for g in node.gpus if not model or g.model == model)


def _holds(node, tj: TraceJob, gpus: int, cpus: int, mem: int) -> bool:
    return node.slots >= 1 and node.cpus >= cpus and node.mem >= mem and _gpus(node, tj.gpu_type) >= gpus


def why(tj: TraceJob, nodes, gpus_column: str = "gpus", whose: str = "the cluster") -> tuple[str, str] | None:
    """(column, what it asks and what `nodes` have) when no set of nodes could ever hold the job, else None."""
    gpus, cpus, mem, k = gang_shape(tj, nodes)
    if sum(1 for n in nodes if _holds(n, tj, gpus, cpus, mem)) >= k:
        return None
    models = sorted({g.model for n in nodes for g in n.gpus})
    if tj.gpu_type and tj.gpu_type not in models:
        return "gpu_type", f"GPU model {tj.gpu_type!r}; {whose} has none (its models: {', '.join(models) or 'none'})"
    each = f" on each of {k} nodes" if k > 1 else ""
    total = sum(_gpus(n, tj.gpu_type) for n in nodes)
    if tj.gpus * tj.nodes > total:
        return gpus_column, f"{tj.gpus * tj.nodes:,} GPUs; {whose} has {total:,}"
    if sum(1 for n in nodes if _gpus(n, tj.gpu_type) >= gpus) < k:
        return gpus_column, (f"{tj.gpus:,} GPUs, {gpus} on each of {k} nodes; {whose} has "
                             f"{sum(1 for n in nodes if _gpus(n, tj.gpu_type) >= gpus)} node(s) of {gpus} or more")
    if sum(1 for n in nodes if n.cpus >= cpus) < k:
        return "cpus", f"{cpus:,} CPUs{each}; the largest node of {whose} has {max(n.cpus for n in nodes):,}"
    if sum(1 for n in nodes if n.mem >= mem) < k:
        return "mem_gib", (f"{mem / GIB:,.4g} GiB{each}; the largest node of {whose} has "
                           f"{max(n.mem for n in nodes) / GIB:,.4g} GiB")
    where = f"no set of {k} nodes" if k > 1 else "no node"
    return (f"{gpus_column}, cpus, mem_gib",
            f"{gpus} GPUs, {cpus} CPUs and {mem / GIB:,.4g} GiB{each}; {where} of {whose} has all of them")


def describe(nodes) -> str:
    """The cluster in a few words: '1 node: 25 CPUs' or '4 nodes: 32 GPUs, 256 CPUs; largest 8 GPUs, 64 CPUs, 512 GiB'."""
    gpus, cpus = sum(len(n.gpus) for n in nodes), sum(n.cpus for n in nodes)
    whole = f"{len(nodes):,} node{'s' * (len(nodes) != 1)}: " + (f"{gpus:,} GPUs, " if gpus else "") + f"{cpus:,} CPUs"
    if len(nodes) == 1:
        return whole + (f", {nodes[0].mem / GIB:,.4g} GiB" if nodes[0].mem < 1 << 40 else "")
    big = max(nodes, key=lambda n: (len(n.gpus), n.cpus, n.mem))
    return whole + f"; largest {len(big.gpus)} GPUs, {big.cpus} CPUs, {big.mem / GIB:,.4g} GiB"


def check(path: str, trace: list[TraceJob], nodes, gpus_column: str = "gpus", whose: str = "the cluster") -> None:
    """A UsageError naming the first job (in file order) that `nodes` could never hold, and how many
    such jobs the trace has; nothing when every job fits."""
    if not nodes:
        return
    seen: dict = {}
    bad = []
    for tj in trace:
        key = (tj.gpus, tj.cpus, tj.mem, tj.nodes, tj.gpu_type)
        if key not in seen:
            seen[key] = why(tj, nodes, gpus_column, whose)
        if seen[key]:
            bad.append(tj)
    if not bad:
        return
    first = min(bad, key=lambda tj: tj.row)
    column, reason = seen[(first.gpus, first.cpus, first.mem, first.nodes, first.gpu_type)]
    more = f"; {len(bad) - 1:,} more of the trace's {len(trace):,} jobs do not fit either" if len(bad) > 1 else ""
    raise UsageError(f"trace: {path}:{first.row}: {column}: job {first.name} asks for {reason} ({describe(nodes)})"
                     f"{more} (--drop-too-large replays without them)")
