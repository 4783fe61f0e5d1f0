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

from ..states import ON_NODE
from ..units import accrue
from .keys import ROWS_VERSION  # noqa: F401 - the key name carries it

FIELDS = ("id", "array_id", "array_index", "name", "user", "account", "qos", "state", "reason", "node",
          "gpus", "cpus", "mem", "settled", "cost_rate", "spans", "accruing_since")


def row(job) -> list:
    """The row of one job record (a model.Job)."""
    spans = []
    for a in job.attempts:
        start = a.start_time or a.dispatch_time
        if start:
            spans.append([start, a.end_time or None])
    cur = job.attempts[-1] if job.attempts else None
    since = cur.dispatch_time if cur is not None and not cur.end_time and cur.dispatch_time else 0
    return [job.id, job.array_id, job.array_index, job.name, job.user, job.account, job.qos, job.state,
            job.reason, job.node, job.gpus, job.cpus, job.mem, sum(a.cost for a in job.attempts),
            job.cost_rate, spans, since]


def dumps(job) -> str:
    return json.dumps(row(job), separators=(",", ":"))


class Row:
    """A decoded row, with the attribute names of model.Job that `stat` uses."""
    __slots__ = FIELDS

    def __init__(self, values):
        # One unpacking, not a setattr per field: `stat` builds one Row per active job.
        (self.id, self.array_id, self.array_index, self.name, self.user, self.account, self.qos, self.state,
         self.reason, self.node, self.gpus, self.cpus, self.mem, self.settled, self.cost_rate, self.spans,
         self.accruing_since) = values

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
    """Rows from the hash's values, in job id order."""
    rows = [Row(v) for v in json.loads("[" + ",".join(texts) + "]")] if texts else []
    rows.sort(key=lambda r: r.id)
    return rows
