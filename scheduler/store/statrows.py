"""The `stat` index: one compact row per active job, written with the job record in the same transaction.

`labq stat` at 10,000 queued spent most of its time decoding full job records (attempts, argv,
scripts) into Job objects to print ten columns. The scheduler therefore keeps, beside each active
job's record, a row of exactly what `stat` prints, filters on and sums for its capacity line, in the
hash `Keys.stat_rows`; `stat` reads that hash and nothing else of the jobs.

A row is a JSON array (field order: FIELDS). The time columns are derived at print time from what
the row stores, the way cli/render.py derives them from a record: each started attempt's
[start, end-or-null] span (TIME), the settled cost plus the running attempt's accrual since its
dispatch at the job's rate (COST). The key name carries ROWS_VERSION (keys.py): a new row shape is a new key,
and the scheduler rebuilds the rows from the records whenever it becomes leader, so existing data
migrates by restarting the scheduler; until then a client that finds the rows incomplete reads the
records instead (cli/statview.py).

This module needs no model: the thin client decodes rows without it.
"""
import json

from ..hostlist import compact
from ..states import ON_NODE
from ..units import accrue

FIELDS = ("id", "array_id", "array_index", "name", "user", "account", "qos", "state", "reason", "node",
          "gpus", "cpus", "mem", "settled", "cost_rate", "spans", "accruing_since", "nodes")


def row(job) -> list:
    """The row of one job record (a model.Job)."""
    spans = []
    for a in job.attempts:
        start = a.start_time or a.dispatch_time
        if start:
            spans.append([start, a.end_time or None])
    cur = job.attempts[-1] if job.attempts else None
    # Accruing from the process's start once the node has said it, as it is billed (render.accrued)
    since = max(cur.start_time or 0, cur.dispatch_time) if cur is not None and not cur.end_time and cur.dispatch_time else 0
    # A running gang (-N): its node list in SLURM's compact form (node[1-2]); gpus/cpus/mem stay per node.
    node = compact([n for n, _ in job.parts]) if job.parts else job.node
    return [job.id, job.array_id, job.array_index, job.name, job.user, job.account, job.qos, job.state,
            job.reason, node, job.gpus, job.cpus, job.mem, sum(a.cost for a in job.attempts),
            job.cost_rate, spans, since, job.nodes]


def dumps(job) -> str:
    return json.dumps(row(job), separators=(",", ":"))


class Row:
    """A decoded row, with the attribute names of model.Job that `stat` uses. `n` > 1: the row
    stands for n jobs of one array, ids id..id+n-1 with task indices array_index..array_index+n-1,
    whose rows are otherwise the same (fold)."""
    __slots__ = FIELDS + ("n",)

    def __init__(self, values, n: int = 1):
        # One unpacking, not a setattr per field: `stat` builds one Row per active job.
        (self.id, self.array_id, self.array_index, self.name, self.user, self.account, self.qos, self.state,
         self.reason, self.node, self.gpus, self.cpus, self.mem, self.settled, self.cost_rate, self.spans,
         self.accruing_since, self.nodes) = values
        self.n = n

    def each(self) -> list["Row"]:
        """The jobs a folded row stands for, one Row each."""
        if self.n == 1:
            return [self]
        out = []
        for k in range(self.n):
            r = Row([getattr(self, f) for f in FIELDS])
            r.id, r.array_index = self.id + k, self.array_index + k
            out.append(r)
        return out

    @property
    def display_id(self) -> str:
        return f"{self.array_id}_{self.array_index}" if self.array_id is not None else str(self.id)

    def elapsed(self, now: float) -> float:
        total = 0.0
        for start, end in self.spans:
            total += (end or now) - start
        return total

    def running_cost(self, now: float) -> int:
        if self.state not in ON_NODE or not self.accruing_since:
            return 0
        return accrue(self.cost_rate, now - self.accruing_since)


def loads(text) -> Row:
    return Row(json.loads(text))


def loads_many(texts) -> list[Row]:
    """Rows from the hash's values, in job id order, one per job."""
    return unfold(fold(texts))


def _id(text: str) -> int:
    return int(text[1:text.index(",")])


def fold(texts, keep=None) -> list[Row]:
    """Rows from the hash's values in job id order, a run of one array's tasks folded into one Row
    (`n`) where their texts differ only in id and task index (consecutive both). `stat` at 10,000
    queued spent 40 of its 60 ms decoding a row per task to print one line for the array; here a
    run's other rows are compared as text (equal text, equal fields), and only the first of each run
    is decoded. `keep`: the ids to keep (the rest are skipped), or None for all."""
    texts = sorted(texts, key=_id)
    heads, counts = [], []
    tail = arr = None
    nxt = idx = -1
    for t in texts:
        c1 = t.index(",")
        i = int(t[1:c1])
        if keep is not None and i not in keep:
            continue
        if t.startswith(",null,", c1):      # not an array task: never folded (nor folded into)
            heads.append(t)
            counts.append(1)
            tail = None
            continue
        c2 = t.index(",", c1 + 1)
        c3 = t.index(",", c2 + 1)
        if i == nxt and t[c3:] == tail and t[c1:c2] == arr and t[c2 + 1:c3] == idx:
            counts[-1] += 1
        else:
            heads.append(t)
            counts.append(1)
            tail, arr = t[c3:], t[c1:c2]
            if arr == ",null":
                tail = None     # not an array task: never folded
        nxt = i + 1
        idx = str(int(t[c2 + 1:c3]) + 1) if tail is not None else None
    values = json.loads("[" + ",".join(heads) + "]") if heads else []
    return [Row(v, n) for v, n in zip(values, counts)]


def unfold(rows) -> list[Row]:
    return [x for r in rows for x in r.each()] if any(r.n > 1 for r in rows) else list(rows)
