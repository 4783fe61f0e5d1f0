"""The `stat` index: one row per active job, pre-rendered, written with the job record in the same transaction.

`labq stat` at 10,000 queued spent most of its time decoding full job records, then JSON rows, into
objects to print ten columns. The scheduler therefore keeps, beside each active job's record, the
row as `stat` prints it, in the hash `Keys.stat_rows`; `stat` reads that hash (one round trip) and
nothing else of the jobs, splits each row at its tabs and prints the cells.

A row is text, fields separated by tabs (FIELDS): the job's id, array id and task index (what `stat`
sorts, picks and compacts by), `live` and `prio` (below), then its tail: the cells as printed (CELLS; a
pending job's reason is in its NODE(REASON) cell, `where`), the name last, so that a tab in it is not a
separator (split with maxsplit). `stat` splits a row only as far as its tail: most rows share their
tail with many others (a user's queued jobs differ in their id alone), and each distinct tail is
split, measured and padded once. What changes with time is not rendered:
the COST cell is the settled amount in micro-units (the client prints it in its currency), and a job
on a node (or with an attempt still open) has empty TIME and `live` = JSON [spans, settled, rate,
accruing since, gpus, cpus, mem, node]: its TIME and COST are derived at print time, the way
cli/render.py derives them from a record, and the capacity line sums its shape.

`prio` is what `labq prio` needs of a pending job beyond its tail's user, account and QoS, and
whether it has run: "submit time,expected run time,attempts" (the float's repr, so that age and the
order's tie-break are the scheduler's own; multifactor.expected_runtime's seconds; the attempt count),
empty for any other state. `prio` then reads these rows, not every pending record (8x `labq sub` at
10,000 held jobs, issue 39 item 4), and `report` reads the records of only the active jobs that have
run. It precedes the tail: a submit time differs job by job, and in the tail it would make every tail
distinct.

The key name carries ROWS_VERSION (keys.py): a new row shape is a new key, and the scheduler rebuilds the rows from the
records whenever it becomes leader, so existing data migrates by restarting the scheduler; until then
a client that finds the rows incomplete reads the records instead (cli/statview.py).

This module needs no model: the thin client reads rows with it.
"""
from itertools import compress, repeat
from operator import itemgetter, methodcaller

from ..cjson import compact as _text, loads
from ..jobs.codes import ON_NODE, PENDING
from ..jobs.hostlist import compact
from ..units import fmt_duration

FIELDS = ("id", "array_id", "array_index", "live", "prio", "tail")
ID, ARRAY_ID, ARRAY_INDEX, LIVE, PRIO, TAIL = range(len(FIELDS))
# The tail: the cells as `stat` prints them but for JOBID (and COST in micro-units), the name last.
CELLS = ("state", "user", "account", "qos", "time", "gpus", "cost", "nodes", "where", "name")
STATE, USER, ACCOUNT, QOS, TIME, GPUS, COST, NODES, WHERE, NAME = range(len(CELLS))


def dumps(job) -> str:
    """The row of one job record (a model.Job)."""
    spans = []
    for a in job.attempts:
        start = a.start_time or a.dispatch_time
        if start:
            spans.append([start, a.end_time or None])
    settled = sum(a.cost for a in job.attempts)
    # A running gang (-N): its node list in SLURM's compact form (node[1-2]); gpus/cpus/mem stay per node.
    node = compact([n for n, _ in job.parts]) if job.parts else job.node
    nodes = job.nodes or 1
    on = job.state in ON_NODE
    where = node if on else f"({job.reason})" if job.state == PENDING else node or ""
    live, time = "", ""
    if on or any(end is None for _, end in spans):
        cur = job.attempts[-1] if job.attempts else None
        # Accruing from the process's start once the node has said it, as it is billed (render.accrued)
        since = (max(cur.start_time or 0, cur.dispatch_time)
                 if cur is not None and not cur.end_time and cur.dispatch_time else 0)
        live = _text([spans, settled, job.cost_rate, since, job.gpus, job.cpus, job.mem, node])
    else:
        time = fmt_duration(sum(end - start for start, end in spans)) if spans else fmt_duration(0)
    # multifactor.expected_runtime's, not imported: it would bring typing (~5 ms) into every `stat`
    prio = (f"{job.submit_time!r},{job.learned_est or job.est or job.time_limit or 0},{len(job.attempts)}"
            if job.state == PENDING else "")
    cells = (job.id, "" if job.array_id is None else job.array_id, "" if job.array_index is None else job.array_index,
             live, prio, job.state, job.user, job.account, job.qos, time, job.gpus * nodes, settled, nodes, where,
             job.name[:20])
    return "\t".join(map(str, cells))


def parse(texts, keep=None) -> list[list[str]]:
    """The hash's values as rows (lists of FIELDS' texts: a row's cells stay one text, its tail),
    in job id order; `keep`: the ids to keep (the rest are skipped), or None for all.

    Ordered before they are split (in_order), so that the rows are made in the order every later
    pass walks them (the passes over rows made in the hash's order, scattered over the heap, took
    ~2x as long). Rows with equal tails then share one tail object: every later pass that reads the
    tails (padding, counting, filtering) touches a few objects instead of one string per row (at
    10,000 rows such a pass took 1.3-2.9 ms, now 0.03-0.3)."""
    rows = list(map(str.split, in_order(texts), repeat("\t"), repeat(TAIL)))
    if keep is not None:
        rows = list(compress(rows, map(keep.__contains__, map(int, map(itemgetter(ID), rows)))))
    tails = list(map(itemgetter(TAIL), rows))
    one: dict = {}
    any(map(list.__setitem__, rows, repeat(TAIL), map(one.setdefault, tails, tails)))     # None each: runs them all
    return rows


def in_order(texts: list[str]) -> list[str]:
    """Rows' texts in id order, by C loops (no Python code per row). Where the ids are dense (a
    queue's usually are) each text goes to the slot of its id and the slots are read in order: no
    comparison at all (~0.7 ms less than the sort at 10,000 rows). Otherwise, or where an id comes
    twice (both are kept), a sort: a row starts with its id (digits, no leading zero, then a tab),
    so text order, then stably the id's length, is id order."""
    if not texts:
        return []
    ids = list(map(int, map(itemgetter(0), map(str.partition, texts, repeat("\t")))))
    lo, hi = min(ids), max(ids)
    if hi - lo < 4 * len(ids) + 64:
        slots: list = [None] * (hi - lo + 1)
        any(map(slots.__setitem__, map(int.__sub__, ids, repeat(lo)), texts))
        out = list(filter(None, slots))
        if len(out) == len(texts):
            return out
    out = sorted(texts)
    out.sort(key=_ID_LENGTH)
    return out


_ID_LENGTH = methodcaller("index", "\t")


def cells(tail: str) -> list[str]:
    return tail.split("\t", NAME)


def display_id(r) -> str:
    return f"{r[ARRAY_ID]}_{r[ARRAY_INDEX]}" if r[ARRAY_ID] else r[ID]


def ids(r) -> tuple:
    """(id, array id or None, task index or None) as numbers, for `stat -j`."""
    return int(r[ID]), int(r[ARRAY_ID]) if r[ARRAY_ID] else None, int(r[ARRAY_INDEX]) if r[ARRAY_ID] else None


def rest_texts(value) -> list[str]:
    """The rows of a rest's tasks (store/rests.row's JSON: {lo, step, runs, row}), as the hash would
    hold them were each task a record: the shared row with each task's id and index."""
    d = loads(value)
    first, _, _, rest = d["row"].split("\t", 3)
    a, lo, step = int(first), d["lo"], d["step"]
    return [f"{a + p}\t{first}\t{lo + p * step}\t{rest}" for x, y in d["runs"] for p in range(x, y + 1)]
