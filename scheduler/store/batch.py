"""Group commit: what one read of the requests and the event streams changes, written as one transaction.

Each request or event is handled against the scheduler's in-memory view as soon as it is read, so
the next one in the batch sees its effect (a cancel after a submit, a user's pending count). What it
must write is only collected here; `Committer.write` (commit.py) writes the lot in one fenced MULTI/EXEC (one
fsync with `appendfsync always`) together with every reply and acknowledgement. Replies are
therefore visible only once everything they report is durable. If the transaction fails, the
in-memory view is ahead of Redis: the scheduler drops its leadership and reloads (StalePlanError).

An entry whose handling raises stages nothing: it is answered (or dropped) on its own and the rest of
the batch still commits.
"""
from dataclasses import dataclass, field


@dataclass
class Batch:
    jobs: dict = field(default_factory=dict)       # job id -> the newest record (last write wins)
    charges: list = field(default_factory=list)
    charged: set = field(default_factory=set)      # ledger keys staged in this batch
    controls: list = field(default_factory=list)
    dispatch: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    alerts: list = field(default_factory=list)
    books: list = field(default_factory=list)
    new: set = field(default_factory=set)          # ids of jobs created in this batch
    replies: list = field(default_factory=list)    # (rid, reply)
    acks: list = field(default_factory=list)       # (stream, entry id)
    dead: list = field(default_factory=list)       # (stream, entry id, fields, reason): dead letters
    partials: list = field(default_factory=list)   # (rid, runs or None): a mass cancel's progress
    usage: dict | None = None                      # fair-share usage when the batch began
    tasks: dict = field(default_factory=dict)      # array id -> its new tasks as expand made them (Tasks)
    rests: dict = field(default_factory=dict)      # array id -> its rest as now (None: gone), Change.rests
    rests_new: set = field(default_factory=set)    # the rests this batch makes (their scripts are written)
    expires: float = float("inf")                  # the first client expiry of a request in it: committed
                                                   # before it or not at all (Scheduler.flush)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.charges or self.controls or self.dispatch or self.nodes or self.alerts
                    or self.books or self.replies or self.acks or self.dead or self.rests)

    def size(self) -> int:
        return len(self.jobs)
