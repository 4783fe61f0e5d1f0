"""`labq simulate --plot FILE.png`: utilisation (and the queue) over time, and a Gantt chart of the
busiest nodes. Needs matplotlib (`pip install 'labq[plot]'`); nothing else in labq does.

The Gantt panel has at most LANES lanes, all of the same height: one per GPU of the busiest nodes
(whole nodes, busiest first, while they fit), or on CPU-only nodes a fixed number of lanes per node,
each a share of its CPUs. Bars are coloured by account, with a legend (the busiest accounts; the
rest grey), so that who held the cluster reads at a glance.
"""
import heapq

from labq.scheduler.sim.result import EPOCH, Result

BUSIEST = 8           # nodes in the Gantt chart at most
LANES = 48            # lanes in the Gantt chart at most
CPU_LANES = 16        # lanes per CPU-only node (each a 1/16 share of its CPUs)
LEGEND = 10           # accounts named in the legend; the rest share one grey


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


def by_node(res: Result) -> dict:
    """node name -> [(job, attempt, its GPUs there)]: a gang's attempt on each of its nodes."""
    out: dict = {}
    for j, a in intervals(res):
        for node, gpus in (a.parts or ((a.node, a.gpus),)):
            out.setdefault(node, []).append((j, a, gpus))
    return out


def lanes(res: Result, node, attempts):
    """[(lane, height, start, end, job id)] for `attempts` [(job, attempt, GPUs)] on `node`: a lane per
    GPU, or on a CPU node CPU_LANES lanes, each job on the first free ones (its share of them)."""
    if node.gpus:
        index = {g.uuid: g.index for g in node.gpus}
        return [(index[u], 1, a.dispatch_time, a.end_time, j.id) for j, a, gpus in attempts for u in gpus]
    width = min(node.cpus, CPU_LANES)
    free = list(range(width))
    busy: list = []
    out: list = []
    for j, a, _ in sorted(attempts, key=lambda ja: (ja[1].dispatch_time, ja[0].id)):
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

    _gantt(gantt, res, plt, per)
    gantt.set_xlabel(f"{unit} from the start of the trace")
    gantt.set_xlim(0, span / per)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chosen_nodes(res: Result, held: dict) -> list:
    """The busiest nodes (resource-seconds held), whole, while their lanes fit in LANES (at least one)."""
    busy = {n: sum((a.end_time - a.dispatch_time) * (len(g) or j.cpus) for j, a, g in jas) for n, jas in held.items()}
    out: list = []
    lanes_used = 0
    for n in sorted((n for n in res.nodes if n.name in held), key=lambda n: (-busy[n.name], n.name)):
        height = len(n.gpus) or min(n.cpus, CPU_LANES)
        if len(out) >= BUSIEST or (out and lanes_used + height > LANES):
            break
        out.append(n)
        lanes_used += height
    return out


def account_colours(res: Result, plt) -> dict:
    """account -> colour: the LEGEND busiest accounts their own, the rest grey."""
    held: dict = {}
    for j, a in intervals(res):
        held[j.account] = held.get(j.account, 0.0) + (a.end_time - a.dispatch_time) * (len(a.gpus) or j.cpus)
    cmap = plt.get_cmap("tab10")
    top = sorted(held, key=lambda k: (-held[k], k))
    return {acc: (cmap(i % 10) if i < LEGEND else (0.6, 0.6, 0.6, 1.0)) for i, acc in enumerate(top)}


def _gantt(ax, res: Result, plt, per: float) -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    held = by_node(res)
    nodes = chosen_nodes(res, held)
    colours = account_colours(res, plt)
    verts, colors, ticks, base = [], [], [], 0.0
    for node in reversed(nodes):
        height = len(node.gpus) or min(node.cpus, CPU_LANES)
        for lane, n, start, end, jid in lanes(res, node, held[node.name]):
            x0, x1 = (start - EPOCH) / 3600 / per, (end - EPOCH) / 3600 / per
            y0, y1 = base + lane + 0.08, base + lane + n - 0.08
            verts.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
            colors.append(colours[res.jobs[jid].account])
        ticks.append((base + height / 2, node.name))
        base += height + 0.5
    ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none"))
    ax.set_ylim(0, max(base, 1))
    ax.set_yticks([y for y, _ in ticks], [name for _, name in ticks])
    gpus = any(n.gpus for n in nodes)
    ax.set_ylabel(f"{len(nodes)} busiest node{'s' * (len(nodes) != 1)} "
                  f"({'a lane per GPU' if gpus else f'{CPU_LANES} CPU lanes each'})")
    named = [acc for acc, c in colours.items() if c != (0.6, 0.6, 0.6, 1.0)]
    handles = [Patch(color=colours[acc], label=acc or "(no account)") for acc in named]
    if len(colours) > len(named):
        handles.append(Patch(color=(0.6, 0.6, 0.6, 1.0), label=f"{len(colours) - len(named)} other accounts"))
    ax.legend(handles=handles, title="account", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def plot_waits(rows, path: str, title: str = "") -> None:
    """`--compare --plot`: each policy's wait distribution side by side (box: quartiles, whiskers:
    5th-95th percentile; the mean as a dot), on a log scale of hours when waits span decades."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 5))
    data = [[w / 3600 for w in waits] or [0.0] for _, _, waits in rows]
    ax.boxplot(data, whis=(5, 95), showfliers=False, showmeans=True,
               meanprops={"marker": "o", "markerfacecolor": "black", "markeredgecolor": "black", "markersize": 4})
    ax.set_xticks(range(1, len(rows) + 1), [name for name, _, _ in rows])
    top = max((max(d) for d in data), default=0.0)
    positive = [x for d in data for x in d if x > 0]
    if positive and top / min(positive) > 1000:
        ax.set_yscale("symlog", linthresh=max(min(positive), 1 / 60))
    ax.set_ylabel("wait (hours)")
    ax.set_title(title or "wait by policy")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
