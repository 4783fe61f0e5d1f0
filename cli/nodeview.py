"""`labq nodes`, `drain` and `resume` without click and without redis-py: from the fast path (fast.py)
or click's (query.py, control.py), through the thin client (store/thinreads.py: NodeView, runners),
issue 39 item 4."""
from labq.scheduler.units import fmt_size

from . import render, statview
from .out import echo, echo_json

# what `labq drain`/`resume` print once the scheduler agreed
SAID = {"drain": "draining (running jobs finish; nothing new starts)", "resume": "up"}
HEADERS = ["NODE", "STATE", "GPUS", "MODEL", "CPUS", "MEM", "JOBS", "SLOTS", "RUNNERS"]


def nodes(c, as_json) -> None:
    """Nodes with free/total GPUs, CPUs and memory (spec.NODES's options); `c` the thin client."""
    jobs = c.read.on_node()       # node_dict counts these only; as views, without the job model's ~14 ms
    ns = c.read.nodes()
    runners = c.read.runners([n.name for n in ns])
    ds = [{**render.node_dict(n, jobs), "runners": runners.get(n.name, {})} for n in ns]
    if as_json:
        return echo_json(ds)
    rows = [[d["name"], d["state"], f"{d['gpus_free']}/{d['gpus_total']}", ",".join(d["gpu_models"]) or "-",
             f"{d['cpus_free']}/{d['cpus_total']}", f"{fmt_size(max(0, d['mem_free']))}/{fmt_size(d['mem_total'])}",
             len(d["jobs"]), d["slots"], runners_text(d["runners"])] for d in ds]
    if c.allow_volatile and c.read.aof_enabled() is False:
        from labq.scheduler.daemon.durability import volatile_line
        echo(f"WARNING: {volatile_line(c.url).split(';')[0]} (redis.allow_volatile = true)")
    echo(statview.table(rows, HEADERS))
    for d in ds:
        if d["reason"]:
            echo(f"{d['name']}: {d['state']}: {d['reason']}")


def runners_text(runners: dict) -> str:
    """"3 idle, 1 running" from each runner's state ("idle pid=… <time>", "running 12.1 pid=…")."""
    counts: dict[str, int] = {}
    for v in runners.values():
        word = v.split(" ", 1)[0]
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "-"


def node_admin(c, op: str, node: str) -> None:
    """`labq drain NODE` or `labq resume NODE` (admins); `c` the thin client."""
    c.node_admin(op, node)
    echo(f"node {node}: {SAID[op]}")
