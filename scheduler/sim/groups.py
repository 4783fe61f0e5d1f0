"""`labq simulate --group-nodes FILE`: a trace whose groups (virtual clusters, accounts) each had their
own GPUs, replayed together. FILE is a CSV `group,nodes` (nodes in `--nodes` form, e.g. 4x8:64:512G);
a job runs only on its group's nodes (its `account`, else the trace's `group` column).

Groups share no node, so each group's replay is independent of the others' and is run on its own;
the results are merged into one (ids renumbered in trace order), which the report reads as one
cluster. What would couple groups is not modelled across them: a budget, cap or fair-share usage
spanning two groups is replayed per group.
"""
from dataclasses import replace

from ..errors import UsageError
from .engine import Result, simulate
from .trace import TraceJob, read_numbered


def read(path: str, parse_nodes) -> dict[str, tuple]:
    """group -> its nodes (named GROUP/nK, GPUs GROUP/GPU-…, so names never clash)."""
    header, rows = read_numbered(path, "--group-nodes")
    for col in ("group", "nodes"):
        if col not in header:
            raise UsageError(f"--group-nodes: {path}: missing column {col!r} (have: {', '.join(header) or 'none'}; "
                             "expected group,nodes like vc-a,4x8:64:512G)")
    out: dict[str, tuple] = {}
    for i, row in rows:
        group, spec = (row.get("group") or "").strip(), (row.get("nodes") or "").strip()
        if not group or not spec:
            raise UsageError(f"--group-nodes: {path}:{i}: {'group' if not group else 'nodes'}: missing value")
        if group in out:
            raise UsageError(f"--group-nodes: {path}:{i}: group: {group!r} appears twice")
        try:
            nodes = parse_nodes(spec)
        except UsageError as e:
            raise UsageError(f"--group-nodes: {path}:{i}: nodes: {str(e).removeprefix('--nodes: ')}") from None
        out[group] = tuple(replace(n, name=f"{group}/{n.name}",
                                   gpus=tuple(replace(g, uuid=f"{group}/{g.uuid}") for g in n.gpus)) for n in nodes)
    if not out:
        raise UsageError(f"--group-nodes: {path}: no groups")
    return out


def split(trace: list[TraceJob], groups: dict) -> dict[str, list[int]]:
    """group -> indices of its jobs in the trace; every job's group must have nodes."""
    out: dict[str, list[int]] = {g: [] for g in groups}
    for i, tj in enumerate(trace):
        if tj.account not in out:
            raise UsageError(f"--group-nodes: job {tj.name} is of group {tj.account or '(none)'!r}, which the file "
                             f"gives no nodes (groups: {', '.join(sorted(groups))})")
        out[tj.account].append(i)
    return out


def replay(trace: list[TraceJob], groups: dict, cfg, hooks=lambda: None, **kw) -> Result:
    """Each group's jobs on its own nodes, merged into one Result (ids = trace order + 1). `hooks()`
    gives each group's replay fresh hooks: a learned estimate must not see another group's future."""
    parts = split(trace, groups)
    jobs: dict = {}
    refused: list = []
    held: set = set()
    spent: dict[str, int] = {}
    calls = skipped = instants = 0
    end = None
    for group, idx in parts.items():
        if not idx:
            continue
        res = simulate([trace[i] for i in idx], groups[group], cfg, hooks=hooks(), **kw)
        renumber = {k + 1: i + 1 for k, i in enumerate(idx)}
        jobs.update({renumber[j]: replace(job, id=renumber[j]) for j, job in res.jobs.items()})
        refused += res.refused
        held |= {renumber[j] for j in res.budget_held}
        for key, v in res.spent.items():
            spent[key] = spent.get(key, 0) + v
        calls, skipped, instants = calls + res.plan_calls, skipped + res.plan_skipped, instants + res.instants
        end = res.end_time if end is None else max(end, res.end_time)
    nodes = tuple(n for g in groups.values() for n in g)
    out = Result(cfg, nodes, trace, dict(sorted(jobs.items())), refused, held, spent, calls, skipped, instants)
    if end is not None:
        out.end_time = end
    return out
