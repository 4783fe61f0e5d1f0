"""What a decision writes, as plain data. Every decider of the daemon returns one `Change`: a
request's handler, a node's event, the bookkeeper, the plan applier (`Applied.change`); the daemon
commits it (`Scheduler.commit`: the state takes it, store/commit.py writes it) in one transaction with
the acknowledgement of what caused it."""
from dataclasses import dataclass, field


@dataclass
class Change:
    jobs: list = field(default_factory=list)       # new records (the last one of a job wins)
    charges: list = field(default_factory=list)    # ledger.Charge: what attempts used
    controls: list = field(default_factory=list)   # (job id, "cancel" | "preempt:GRACE" | "stop:ATTEMPT")
    dispatch: list = field(default_factory=list)   # admitted jobs (also in `jobs`): onto their nodes' lists
    nodes: list = field(default_factory=list)      # (node, "drain" | None)
    alerts: list = field(default_factory=list)     # alert stream entries (alerts.Alert.fields())
    books: object = None                           # ledger.Books: ledger entries, overrides, limits
    reply: dict | None = None                      # a request's answer; the daemon adds its id
    chunks: object = None      # an iterator of Changes (jobs, controls) committed one transaction each, before
                               # this one's reply: a mass cancel (handlers._chunks)
    rests: dict = field(default_factory=dict)      # array id -> jobs/rest.Rest as it now is, or None once
                                                   # every task left it (a held array kept as one record)
    ended: object = None       # model.Job: the record whose attempt this change ends (a node's `finished`),
                               # as written: the run-time estimator learns from it and the plan refills its room
