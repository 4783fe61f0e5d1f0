"""What one pass of the policy decided, as plain data. The daemon applies it; the simulator replays it."""
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Place:
    """Start `job_id` on `node` with these GPUs, encumbering each budget by `commit`."""
    job_id: int
    node: str
    gpus: tuple[str, ...]
    commit: tuple[tuple[str, int], ...]
    rates: tuple[tuple[str, int], ...]
    cost_rate: int


@dataclass(frozen=True, slots=True)
class Expire:
    """The job waited past its --max-wait: it ends `EX`, never charged."""
    job_id: int
    detail: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The job stays pending for exactly this reason; `detail` gives the numbers."""
    job_id: int
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Plan:
    places: tuple[Place, ...] = ()
    expires: tuple[Expire, ...] = ()
    pending: tuple[Pending, ...] = ()

    def is_noop(self) -> bool:
        return not self.places and not self.expires
