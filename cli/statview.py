"""`labq stat`'s table, from the rows of the `stat` index (store/statrows.py) or from job records.

Imports neither click nor the model: the thin `stat` renders rows with this alone. `compact`,
`table` and `capacity_line` take anything with the attributes they read (a Row, a model.Job, a Node).
"""
from labq.scheduler import states
from labq.scheduler.units import fmt_duration, fmt_money, fmt_size


def _nodes(j) -> int:
    """The job's node count (a row or record from before multi-node jobs has none: 1)."""
    return getattr(j, "nodes", 1) or 1


def _n(j) -> int:
    """How many jobs `j` stands for: a folded row of the index (statrows.fold) more than one."""
    return getattr(j, "n", 1)


def compact(jobs):
    """Pending tasks of one array with the same reason, in a run of indices, shown as one
    `42_[5-12]` entry: (display id, first job) pairs in job order. A folded row (statrows.fold) is
    its run of tasks; one that is not shown compacted is shown task by task."""
    out, run = [], []

    def flush():
        if run:
            a, b = run[0].array_index, run[-1].array_index + _n(run[-1]) - 1
            shown = f"{run[0].array_id}_[{a}-{b}]" if len(run) > 1 or _n(run[0]) > 1 else run[0].display_id
            out.append((shown, run[0]))
            run.clear()

    for j in sorted(jobs, key=lambda j: j.id):
        groupable = j.state == states.PENDING and j.array_id is not None
        if run and not (groupable and j.array_id == run[-1].array_id and j.reason == run[-1].reason
                        and j.id == run[-1].id + _n(run[-1])):
            flush()
        if groupable:
            run.append(j)
        elif _n(j) > 1:
            out += [(x.display_id, x) for x in j.each()]
        else:
            out.append((j.display_id, j))
    flush()
    return out


def table(rows, headers) -> str:
    # Column by column: `acct` prints ~100k rows of a month, and map() over a column runs in C.
    cols = [list(map(str, col)) for col in zip(*rows)] if rows else [[] for _ in headers]
    widths = [max(len(h), max(map(len, col), default=0)) for h, col in zip(headers, cols)]
    fmt = "  ".join(f"%-{w}s" for w in widths)     # % over a row's tuple: 30 % less than str.format
    return "\n".join([(fmt % tuple(headers)).rstrip(), *[(fmt % r).rstrip() for r in zip(*cols)]])


STAT_HEADERS = ["JOBID", "NAME", "USER", "ACCOUNT", "QOS", "ST", "TIME", "GPUS", "COST", "NODES", "NODE(REASON)"]


def capacity_line(nodes, jobs) -> str:
    up = [n for n in nodes if n.state == "up"]
    on = [j for j in jobs if j.state in states.ON_NODE]
    total_g = sum(len(n.gpus) for n in up)
    names = {n.name for n in up}
    # a gang (NODES > 1) holds its per-node shape on each of its nodes
    used_g = sum(j.gpus * _n(j) * _nodes(j) for j in on if _nodes(j) > 1 or j.node in names)
    total_c, used_c = sum(n.cpus for n in up), sum(j.cpus * _n(j) * _nodes(j) for j in on)
    total_m, used_m = sum(n.mem for n in up), sum(j.mem * _n(j) * _nodes(j) for j in on)
    pend = sum(_n(j) for j in jobs if j.state == states.PENDING)
    return (f"nodes {len(up)}/{len(nodes)} up · GPUs {total_g - used_g}/{total_g} free · "
            f"CPUs {total_c - used_c}/{total_c} free · mem {fmt_size(max(0, total_m - used_m))}/{fmt_size(total_m)} free"
            f" · {sum(map(_n, on))} running, {pend} pending")


def row_cells(r, now: float, shown: str | None = None, memo=None) -> list:
    """The cells of one row, as render.stat_row prints them from the job's record. `memo` keeps the
    TIME and COST texts already made (most pending jobs share 00:00:00 and $0.00)."""
    where = r.node if r.state in states.ON_NODE else f"({r.reason})" if r.state == states.PENDING else r.node or ""
    memo = {} if memo is None else memo
    secs, cost = int(max(0, r.elapsed(now))) if r.spans else 0, r.settled + r.running_cost(now)
    t = memo.get(("t", secs)) or memo.setdefault(("t", secs), fmt_duration(secs))
    c = memo.get(("c", cost)) or memo.setdefault(("c", cost), fmt_money(cost))
    return [shown or r.display_id, r.name[:20], r.user, r.account, r.qos, r.state, t, r.gpus * _nodes(r), c,
            _nodes(r), where]


def select(rows, user=None, account=None, wanted=None) -> list:
    """The rows `stat -u/-A/-t` shows, in job id order."""
    return [r for r in sorted(rows, key=lambda r: r.id)
            if (not user or r.user == user) and (not account or r.account == account)
            and (not wanted or r.state in wanted)]


def stat_text(nodes, rows, shown, now: float) -> str:
    """The capacity line (over every active job) and the table of the shown rows."""
    memo: dict = {}
    cells = [row_cells(r, now, label, memo) for label, r in compact(shown)]
    return capacity_line(nodes, rows) + "\n" + table(cells, STAT_HEADERS)


def compact_ids(ids) -> list[str]:
    """`["57_0", "57_1", …, "57_8999", "60"]` → `["57_[0-8999]", "60"]`: runs of one array's
    consecutive task indices, in the given order."""
    out, run = [], []

    def flush():
        if run:
            a, lo, hi = run[0][0], run[0][1], run[-1][1]
            out.append(f"{a}_[{lo}-{hi}]" if hi != lo else f"{a}_{lo}")
            run.clear()

    for i in ids:
        arr, sep, idx = str(i).partition("_")
        if sep and idx.isdigit():
            if run and (run[-1][0] != arr or run[-1][1] + 1 != int(idx)):
                flush()
            run.append((arr, int(idx)))
        else:
            flush()
            out.append(str(i))
    flush()
    return out


def code_signal(code: int | None) -> str:
    """SLURM's `code:signal` for labq's exit code (negative: killed by that signal): `1:0`, `0:15`."""
    if code is None:
        return ""
    return f"0:{-code}" if code < 0 else f"{code}:0"


def exit_code(j) -> str:
    """A job's `code:signal` (sacct's ExitCode): `0:0` once completed, "" before the end."""
    if j.exit_code is None:
        return "0:0" if j.state == states.COMPLETED else ""
    return code_signal(j.exit_code)
