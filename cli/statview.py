"""`labq stat`'s table, from the rows of the `stat` index (store/statrows.py) or from job records.

Imports neither click nor the model: the thin `stat` renders rows with this alone. `compact` and
`capacity_line` take job records (or anything with the attributes they read), `select`,
`rows_cells` and `rows_capacity` the index's rows, `table` any cells.
"""
from collections import Counter
from itertools import compress, repeat
from operator import itemgetter

from labq.scheduler import cjson
from labq.scheduler.jobs import codes
from labq.scheduler.store import statrows as R
from labq.scheduler.tables import columns
from labq.scheduler.units import accrue, fmt_duration, fmt_money, fmt_size


def _nodes(j) -> int:
    """The job's node count (a row or record from before multi-node jobs has none: 1)."""
    return getattr(j, "nodes", 1) or 1


def compact(jobs):
    """From job records: pending tasks of one array with the same reason, in a run of ids, shown as
    one `42_[5-12]` entry: (display id, first job) pairs in job order (rows_cells, for the index's rows)."""
    out, run = [], []

    def flush():
        if run:
            shown = f"{run[0].array_id}_[{run[0].array_index}-{run[-1].array_index}]" if len(run) > 1 else run[0].display_id
            out.append((shown, run[0]))
            run.clear()

    for j in sorted(jobs, key=lambda j: j.id):
        groupable = j.state == codes.PENDING and j.array_id is not None
        if run and not (groupable and j.array_id == run[-1].array_id and j.reason == run[-1].reason
                        and j.id == run[-1].id + 1):
            flush()
        if groupable:
            run.append(j)
        else:
            out.append((j.display_id, j))
    flush()
    return out


def table(rows, headers) -> str:
    """The cells under their headers, each column as wide as its widest cell, two spaces apart, no
    trailing blanks."""
    return columns([list(map(str, col)) for col in zip(*rows)] if rows else [[] for _ in headers], headers)


STAT_HEADERS = ["JOBID", "NAME", "USER", "ACCOUNT", "QOS", "ST", "TIME", "GPUS", "COST", "NODES", "NODE(REASON)"]


def capacity_line(nodes, jobs) -> str:
    """From job records (or anything with their attributes)."""
    on = [(j.gpus, j.cpus, j.mem, _nodes(j), j.node) for j in jobs if j.state in codes.ON_NODE]
    return _capacity(nodes, on, sum(1 for j in jobs if j.state == codes.PENDING))


def _capacity(nodes, on, pend: int) -> str:
    """on: (gpus, cpus, mem, node count, node) of each job on a node."""
    up = [n for n in nodes if n.state == "up"]
    total_g = sum(len(n.gpus) for n in up)
    names = {n.name for n in up}
    # a gang (NODES > 1) holds its per-node shape on each of its nodes
    used_g = sum(g * k for g, _, _, k, node in on if k > 1 or node in names)
    total_c, used_c = sum(n.cpus for n in up), sum(c * k for _, c, _, k, _ in on)
    total_m, used_m = sum(n.mem for n in up), sum(m * k for _, _, m, k, _ in on)
    return (f"nodes {len(up)}/{len(nodes)} up · GPUs {total_g - used_g}/{total_g} free · "
            f"CPUs {total_c - used_c}/{total_c} free · mem {fmt_size(max(0, total_m - used_m))}/{fmt_size(total_m)} free"
            f" · {len(on)} running, {pend} pending")


# -- from the rows of the `stat` index (store/statrows.py: [id, array id, index, live, tail]) ----------
def _tails(rows) -> dict:
    """Each distinct tail among the rows, split into its cells: most rows share theirs."""
    return {t: R.cells(t) for t in set(map(itemgetter(R.TAIL), rows))}


def select(rows, user=None, account=None, wanted=None, picked=None) -> list:
    """The rows `stat -u/-A/-t/-j` shows (in their order: the index's rows come sorted by id)."""
    if user or account or wanted:
        ok = {t for t, c in _tails(rows).items() if (not user or c[R.USER] == user)
              and (not account or c[R.ACCOUNT] == account) and (not wanted or c[R.STATE] in wanted)}
        rows = list(compress(rows, map(ok.__contains__, map(itemgetter(R.TAIL), rows))))
    if picked:
        rows = [r for r in rows if picked(*R.ids(r))]
    return rows


def rows_capacity(nodes, rows) -> str:
    """The capacity line over every active job's row: only the jobs on a node have a shape to sum."""
    on = []
    for r in compress(rows, map(itemgetter(R.LIVE), rows)):     # in C: the few rows with a live part
        c = R.cells(r[R.TAIL])
        if c[R.STATE] in codes.ON_NODE:
            spans, settled, rate, since, gpus, cpus, mem, node = cjson.loads(r[R.LIVE])
            on.append((gpus, cpus, mem, int(c[R.NODES]), node))
    per = Counter(map(itemgetter(R.TAIL), rows))
    pend = sum(n for t, n in per.items() if t.startswith(codes.PENDING + "\t"))
    return _capacity(nodes, on, pend)


def rows_cells(rows, now: float, expand: bool = False) -> list:
    """The table's lines of the shown rows, as render.stat_row prints them from the records, in the
    rows' own layout (the ID field now the JOBID cell): pending tasks of one array with the same
    reason, in a run of ids, as one `42_[5-12]` line (compact) unless `expand`, and a live job's
    TIME and COST as of `now`. A row that is neither an array's task nor live is its own line,
    untouched: at 10,000 single jobs nothing is done per row here."""
    if not (any(map(itemgetter(R.ARRAY_ID), rows)) or any(map(itemgetter(R.LIVE), rows))):
        return rows
    tails = _tails(rows)
    out = []
    first = None    # the open run of pending array tasks: its first row, array, reason ("(Held)"), last id and index
    aid = reason = last = hi = None
    n = 0
    PD = codes.PENDING

    def close():
        out.append(_line(first, f"{aid}_[{first[R.ARRAY_INDEX]}-{hi}]" if n > 1 else f"{aid}_{hi}", now))

    for r in rows:
        c = tails[r[R.TAIL]]
        if not expand and r[R.ARRAY_ID] and c[R.STATE] == PD:
            i = int(r[R.ID])
            if first is not None and r[R.ARRAY_ID] == aid and c[R.WHERE] == reason and i == last + 1:
                last, hi, n = i, r[R.ARRAY_INDEX], n + 1
                continue
            if first is not None:
                close()
            first, aid, reason, last, hi, n = r, r[R.ARRAY_ID], c[R.WHERE], i, r[R.ARRAY_INDEX], 1
            continue
        if first is not None:
            close()
            first = None
        out.append(_line(r, f"{r[R.ARRAY_ID]}_{r[R.ARRAY_INDEX]}", now) if r[R.ARRAY_ID] or r[R.LIVE] else r)
    if first is not None:
        close()
    return out


def _line(r, shown: str, now: float) -> list:
    r = list(r)
    if r[R.LIVE]:
        c = R.cells(r[R.TAIL])
        spans, settled, rate, since, *_ = cjson.loads(r[R.LIVE])
        secs = int(max(0, sum((end or now) - start for start, end in spans))) if spans else 0
        c[R.TIME] = fmt_duration(secs)
        c[R.COST] = str(settled + (accrue(rate, now - since) if c[R.STATE] in codes.ON_NODE and since else 0))
        r[R.TAIL] = "\t".join(c)
    if r[R.ARRAY_ID]:
        r[R.ID] = shown
    return r


# the tail's cells in STAT_HEADERS' order (after JOBID)
_ORDER = (R.NAME, R.USER, R.ACCOUNT, R.QOS, R.STATE, R.TIME, R.GPUS, R.COST, R.NODES, R.WHERE)


def rows_table(lines, *, currency: str) -> str:
    """`table` of rows_cells' lines, the same text: JOBID padded line by line, each distinct tail
    (its COST in this client's currency) measured and padded once, then each line is its padded id
    and its padded tail (two C calls a line)."""
    if not lines:
        return table([], STAT_HEADERS)
    ids = list(map(itemgetter(R.ID), lines))
    tails = list(map(itemgetter(R.TAIL), lines))
    money: dict = {}
    cells = {}
    for t in set(tails):
        c = R.cells(t)
        cost = c[R.COST]
        if cost not in money:
            money[cost] = fmt_money(int(cost), currency=currency)
        c[R.COST] = money[cost]
        cells[t] = [c[i] for i in _ORDER]
    heads = STAT_HEADERS[1:]
    widths = [max(len(h), *map(len, col)) for h, col in zip(heads, zip(*cells.values()))]
    w0 = max(len(STAT_HEADERS[0]), *map(len, ids))
    pad = {t: "  " + ("  ".join(map(str.ljust, c[:-1], widths)) + "  " + c[-1]).rstrip() for t, c in cells.items()}
    head = (STAT_HEADERS[0].ljust(w0) + "  " + "  ".join(map(str.ljust, heads[:-1], widths)) + "  " + heads[-1]).rstrip()
    return "\n".join([head, *map(str.__add__, map(str.ljust, ids, repeat(w0)), map(pad.__getitem__, tails))])


def stat_text(nodes, rows, now: float, expand: bool = False, *, currency: str, **filters) -> str:
    """The capacity line (over every active job) and the table of the rows the filters keep."""
    lines = rows_cells(select(rows, **filters), now, expand)
    return rows_capacity(nodes, rows) + "\n" + rows_table(lines, currency=currency)


def code_signal(code: int | None) -> str:
    """SLURM's `code:signal` for labq's exit code (negative: killed by that signal): `1:0`, `0:15`."""
    if code is None:
        return ""
    return f"0:{-code}" if code < 0 else f"{code}:0"


def exit_code(j) -> str:
    """A job's `code:signal` (sacct's ExitCode): `0:0` once completed, "" before the end."""
    if j.exit_code is None:
        return "0:0" if j.state == codes.COMPLETED else ""
    return code_signal(j.exit_code)
