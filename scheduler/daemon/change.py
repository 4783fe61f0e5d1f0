"""What a decision writes, as plain data. Every decider of the daemon returns one `Change`: a
request's handler, a node's event, the bookkeeper, the plan applier (`Applied.change`); the daemon
commits it (`Scheduler.commit`: the state takes it, store/commit.py writes it) in one transaction with
the acknowledgement of what caused it."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # annotations only: what a Change carries is the model's and the ledger's
    from ..jobs.model import Job
    from ..jobs.rest import Rest
    from ..money.ledger import Books
    from .transitions import Charge


@dataclass
class Change:
    jobs: list[Job] = field(default_factory=list)          # new records (the last one of a job wins)
    charges: list[Charge] = field(default_factory=list)    # what attempts used
    controls: list[tuple[int, str]] = field(default_factory=list)  # (job id, "cancel" | "preempt:GRACE" | "stop:N")
    dispatch: list[Job] = field(default_factory=list)      # admitted jobs (also in `jobs`): onto their nodes' lists
    nodes: list[tuple[str, str | None]] = field(default_factory=list)  # (node, "drain" | None)
    alerts: list[dict[str, Any]] = field(default_factory=list)     # alert stream entries (alerts.Alert.fields())
    books: Books | None = None                             # ledger entries, overrides, limits
    reply: dict[str, Any] | None = None                    # a request's answer; the daemon adds its id
    chunks: Iterator[Change] | None = None     # Changes (jobs, controls) committed one transaction each, before
                                               # this one's reply: a mass cancel (handlers._chunks)
    rests: dict[int, Rest | None] = field(default_factory=dict)    # array id -> jobs/rest.Rest as it now is, or
                                                   # None once every task left it (a held array kept as one record)
    ended: Job | None = None   # the record whose attempt this change ends (a node's `finished`), as written:
                               # the run-time estimator learns from it and the plan refills its room
    health: list[tuple[str, str | None]] = field(default_factory=list)   # (node, why it is unhealthy): marked
                               # (the first mark stays); (node, None): a runner proved it alive, mark gone
