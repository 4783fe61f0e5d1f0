"""What a decision writes, as plain data. Every decider of the daemon returns one `Change`: a
request's handler, a node's event, the bookkeeper, the plan applier (`Applied.change`); the daemon
commits it (`Scheduler.commit`: the state takes it, store/commit.py writes it) in one transaction with
the acknowledgement of what caused it.

What a decider reads beyond the scheduler's state is what the tick read for it (`Read`), handed in as
plain data; one that needs more raises `Unread`, having changed nothing, and the shell reads that and
asks it again (daemon/requests.py)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
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
    blocker: str | None = None  # a pass's new blocker (backfill off: Plan.blocker), its display id; "": none
                                # now; None: unchanged. One key, not the detail of every job behind it
    last_id: int = 0           # a submit's new job ids are the state's seq + 1 .. last_id: handed out as the
                               # shell commits it (loop.Scheduler.commit; a big array's taken from Redis first)


@dataclass
class Read:
    """What the tick read for the deciders beyond the scheduler's state (issue 40 item 1)."""
    # The records of jobs a request names that were not in the table when read (ended ones; None:
    # no such record), this round's: read in one go for the round's requests, more on Unread.
    records: dict[int, Job | None] = field(default_factory=dict)
    spent: dict[str, int] | None = None       # the budgets' spent hash, as read since the last transaction
    charged: dict[str, bool] = field(default_factory=dict)    # ledger keys asked this round: in the ledger?
    # The records of ended jobs that dependencies name (a --test-only probe's, `stat --start`'s), read
    # through the archive too (store/reads.Reader.jobs: an ended job may have moved there), this round's.
    ended: dict[int, Job | None] = field(default_factory=dict)


class Unread(Exception):
    """What a decider needs that the tick has not read: job records (`ids`), the spent hash, ledger
    keys, ended jobs that dependencies name (`ended`, read through the archive too). Raised before the
    decider changed anything; the shell reads them into the state's Read and asks again, so a request
    costs a round trip of its own only where the round's read missed."""

    def __init__(self, ids: Iterable[int] = (), spent: bool = False, keys: Iterable[str] = (),
                 ended: Iterable[int] = ()) -> None:
        self.ids, self.spent, self.keys, self.ended = sorted(set(ids)), spent, list(keys), sorted(set(ended))
        super().__init__(f"unread: {len(self.ids)} records, spent={spent}, {len(self.keys)} ledger keys, "
                         f"{len(self.ended)} ended records")
