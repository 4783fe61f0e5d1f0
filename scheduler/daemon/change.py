"""What a handler, the bookkeeper or the plan applier decided should be written, as plain data: the
daemon commits a `Change` in one transaction with the acknowledgement of what caused it."""
from dataclasses import dataclass, field


@dataclass
class Change:
    jobs: list = field(default_factory=list)
    controls: list = field(default_factory=list)   # (job id, "cancel" | "preempt:GRACE")
    nodes: list = field(default_factory=list)      # (node, "drain" | None)
    reply: dict | None = None
    alerts: list = field(default_factory=list)     # alert stream entries (alerts.Alert.fields())
    books: object = None                           # ledger.Books: ledger entries, overrides, limits
    charges: list = field(default_factory=list)    # ledger.Charge: what attempts used (period closes)
    chunks: object = None      # an iterator of Changes (jobs, controls) committed one transaction each, before
                               # this one's reply: a mass cancel (handlers._chunks)

    def written(self) -> dict:
        """Commit's keyword arguments (Committer.commit)."""
        return {"jobs": self.jobs, "controls": self.controls, "nodes": self.nodes, "alerts": self.alerts,
                "books": self.books, "charges": self.charges}
