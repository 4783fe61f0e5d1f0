"""What a replay did (Result) and the cluster it ran on."""
import math
from dataclasses import dataclass, field, replace

from ..jobs import states
from ..jobs.model import Job, Node
from ..settings.config import Config
from .trace import TraceJob

# Trace time 0 on the virtual clock. Never 0.0: the transitions read a zero time as "unset".
EPOCH = 1_000_000_000.0
BUDGET_REASONS = frozenset({states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED})


@dataclass
class Refused:
    trace: TraceJob
    kind: str          # capacity | budget | queue | max_submit | qos
    message: str


@dataclass
class Result:
    """What the replay did: every job that entered the queue, as its final record."""
    cfg: Config
    nodes: tuple[Node, ...]
    trace: list[TraceJob]
    jobs: dict[int, Job]                    # id -> final record (ended, or still pending at the end)
    refused: list[Refused]
    # ids that pended for a budget at some pass (the same as whole passes at every instant give)
    budget_held: set[int] = field(default_factory=set)
    spent: dict[str, int] = field(default_factory=dict)  # the `spent` hash: NAME or NAME@PERIOD -> micro
    plan_calls: int = 0
    plan_skipped: int = 0
    instants: int = 0       # instants where something happened: each a pass, or skipped (plan_skipped)
    end_time: float = EPOCH

    def trace_of(self, job_id: int) -> TraceJob:
        return self.trace[job_id - 1]


def prepare_nodes(nodes) -> tuple[Node, ...]:
    """The cluster as always up: no lease to expire on a virtual clock."""
    return tuple(replace(n, state="up", lease_expiry=math.inf) for n in nodes)
