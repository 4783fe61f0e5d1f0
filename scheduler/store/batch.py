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
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # annotations only: the store writes what the model, the ledger and the deciders made
    from ..daemon.transitions import Charge
    from ..jobs.model import Job
    from ..jobs.rest import Rest
    from ..money.ledger import Books

# What comes with a change, as the deciders' shell hands it to Committer.stage (daemon/shell.py imports these).
Ack = tuple[str, str]                       # (stream, entry id) acknowledged with the change
Reply = tuple[str, dict[str, Any] | None, bool]   # (request id, the answer: Change.reply, whether its `done` key
                                                  # keeps it)
Dead = tuple[str, str, Any, str]            # (stream, entry id, its fields, why) into the dead letters
Partial = tuple[str, list[Any] | None]      # (request id, the id runs a chunked cancel committed so far)


@dataclass
class Batch:
    jobs: dict[int, Job] = field(default_factory=dict)     # job id -> the newest record (last write wins)
    charges: list[Charge] = field(default_factory=list)
    charged: set[str] = field(default_factory=set)        # ledger keys (Charge.key) staged in this batch
    controls: list[tuple[int, str]] = field(default_factory=list)   # Change.controls
    dispatch: list[Job] = field(default_factory=list)
    nodes: list[tuple[str, str | None]] = field(default_factory=list)   # Change.nodes
    health: list[tuple[str, str | None]] = field(default_factory=list)  # Change.health: marked, or None: well again
    alerts: list[dict[str, Any]] = field(default_factory=list)
    books: list[Books] = field(default_factory=list)
    new: set[int] = field(default_factory=set)            # ids of jobs created in this batch
    replies: list[Reply] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    dead: list[Dead] = field(default_factory=list)        # dead letters
    partials: list[Partial] = field(default_factory=list)  # a mass cancel's progress
    usage: dict[str, tuple[float, float]] | None = None   # fair-share usage when the batch began
    tasks: dict[int, list[Job]] = field(default_factory=dict)   # array id -> its new tasks as expand made
                                                                # them (jobspec.Tasks)
    rests: dict[int, Rest | None] = field(default_factory=dict)  # array id -> its rest as now (None: gone)
    rests_new: set[int] = field(default_factory=set)      # the rests this batch makes (their scripts are written)
    env_keys: dict[int, str] = field(default_factory=dict)  # env_ref -> the key its dispatched jobs' environment
                                                            # text is copied from (store/envs.sources)
    blocker: str | None = None     # Change.blocker: the pass's blocker as it now is ("": none), None: as it was
    expires: float = float("inf")                  # the first client expiry of a request in it: committed
                                                   # before it or not at all (Scheduler.flush)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.charges or self.controls or self.dispatch or self.nodes or self.health
                    or self.alerts or self.books or self.replies or self.acks or self.dead or self.rests
                    or self.blocker is not None)

    def size(self) -> int:
        return len(self.jobs)
