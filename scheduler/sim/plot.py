"""`labq simulate --plot FILE.png`: utilisation (and the queue) over time, and a Gantt chart of the
busiest nodes. Needs matplotlib (`pip install 'labq[plot]'`); nothing else in labq does."""
import heapq

from .engine import EPOCH, Result

BUSIEST = 8           # nodes in the Gantt chart
MAX_LANES = 64        # CPU lanes drawn per CPU-only node


def intervals(res: Result):
    """(job, attempt) for every attempt that ran."""
    return [(j, a) for j in res.jobs.values() for a in j.attempts if a.end_time is not None]


def usage_steps(res: Result, gpus: bool):
    """(times, allocated fraction, pending jobs): step functions over the replay (hours from the start)."""
    cap = sum(len(n.gpus) if gpus else n.cpus for n in res.nodes) or 1
    alloc, queue = [], []
    for j, a in intervals(res):
        amount = len(a.gpus) if gpus else j.cpus
        alloc += [(a.dispatch_time, amount), (a.end_time, -amount)]
        queue.append((a.dispatch_time, -1))
        if a.outcome == "preempted":
            queue.append((a.end_time, 1))
    queue += [(j.submit_time, 1) for j in res.jobs.values()]
    return _steps(alloc, 1 / cap), _steps(queue, 1)


def _steps(deltas, scale):
    xs, ys, level = [], [], 0
    for t, d in sorted(deltas):
        level += d
        if xs and xs[-1] == t:
            ys[-1] = level * scale
        else:
            xs.append(t)
            ys.append(level * scale)
    return [(t - EPOCH) / 3600 for t in xs], ys


def lanes(res: Result, node, attempts):
    """[(lane, height, start, end, job id)]: a lane per GPU, or per CPU (first free ones) on a CPU node."""
    if node.gpus:
        index = {g.uuid: g.index for g in node.gpus}
        return [(index[u], 1, a.dispatch_time, a.end_time, j.id) for j, a in attempts for u in a.gpus]
    width = min(node.cpus, MAX_LANES)
    free = list(range(width))
    busy: list = []
    out: list = []
    for j, a in sorted(attempts, key=lambda ja: (ja[1].dispatch_time, ja[0].id)):
        while busy and busy[0][0] <= a.dispatch_time:
            for lane in heapq.heappop(busy)[1]:
                heapq.heappush(free, lane)
        want = max(1, round(j.cpus * width / node.cpus))
        mine = [heapq.heappop(free) for _ in range(min(want, len(free)))]
        heapq.heappush(busy, (a.end_time, mine))
        for start, n in _runs(sorted(mine)):
            out.append((start, n, a.dispatch_time, a.end_time, j.id))
    return out


def _runs(sorted_lanes):
    runs = []
    for lane in sorted_lanes:
        if runs and runs[-1][0] + runs[-1][1] == lane:
            runs[-1][1] += 1
        else:
            runs.append([lane, 1])
    return [tuple(r) for r in runs]


def plot(res: Result, path: str, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    gpus = any(n.gpus for n in res.nodes)
    (tx, ty), (qx, qy) = usage_steps(res, gpus)
    span = max(tx[-1] if tx else 0.0, 1e-3)
    unit, per = ("days", 24.0) if span > 72 else ("hours", 1.0)
    tx, qx = [x / per for x in tx], [x / per for x in qx]
    fig, (top, gantt) = plt.subplots(2, 1, figsize=(12, 8), height_ratios=[1, 2], sharex=True)
    top.step(tx, [y * 100 for y in ty], where="post", color="tab:blue", lw=0.8)
    top.set_ylabel(f"{'GPUs' if gpus else 'CPUs'} allocated (%)")
    top.set_ylim(0, 105)
    queue = top.twinx()
    queue.step(qx, qy, where="post", color="tab:orange", lw=0.6, alpha=0.7)
    queue.set_ylabel("pending jobs", color="tab:orange")
    top.set_title(title or "replay")

    by_node: dict = {}
    for j, a in intervals(res):
        by_node.setdefault(a.node, []).append((j, a))
    busy = {n: sum((a.end_time - a.dispatch_time) * (len(a.gpus) or j.cpus) for j, a in jas) for n, jas in by_node.items()}
    nodes = sorted((n for n in res.nodes if n.name in by_node), key=lambda n: (-busy[n.name], n.name))[:BUSIEST]
    verts, colors, ticks, base = [], [], [], 0
    cmap = plt.get_cmap("tab20")
    for node in reversed(nodes):
        height = len(node.gpus) or min(node.cpus, MAX_LANES)
        for lane, n, start, end, jid in lanes(res, node, by_node[node.name]):
            x0, x1 = (start - EPOCH) / 3600 / per, (end - EPOCH) / 3600 / per
            y0, y1 = base + lane + 0.05, base + lane + n - 0.05
            verts.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
            colors.append(cmap(jid % 20))
        ticks.append((base + height / 2, node.name))
        base += height + 1
    gantt.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none"))
    gantt.set_ylim(0, max(base, 1))
    gantt.set_yticks([y for y, _ in ticks], [name for _, name in ticks])
    gantt.set_ylabel(f"busiest nodes ({'a lane per GPU' if gpus else 'CPU lanes'})")
    gantt.set_xlabel(f"{unit} from the start of the trace")
    gantt.set_xlim(0, span / per)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
