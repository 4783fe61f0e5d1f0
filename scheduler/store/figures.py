"""The figures of what Redis holds that the leader's state file keeps (daemon/durability.py): a Redis
behind them lost acknowledged work. Read by the store (SchedulerStore.figures), compared by the daemon."""
import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Figures:
    last_job_id: int = 0
    ledger_count: int = 0        # entries ever added (XINFO entries-added), not trimmed by archiving
    ledger_last: str = ""        # the newest entry's id …
    ledger_hash: str = ""        # … and a hash of its fields

    def describe(self) -> str:
        return f"last job id {self.last_job_id}, {self.ledger_count} ledger entries"


def entry_hash(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
