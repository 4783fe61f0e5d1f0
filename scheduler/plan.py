"""What one pass of the policy (or the budgets' stop policy) decided, as plain data. `applier.apply_plan`
applies it, for the daemon, the bookkeeper and the simulator alike."""
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
    borrowed: bool = False     # beyond the account's guarantee: preemptible, reclaimed by lenders
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()   # a gang: (node, GPUs) per part; node/gpus: the first


@dataclass(frozen=True, slots=True)
class Expire:
    """The pending job ends without running, never charged: `EX` (waited past --max-wait), `DL` (could
    no longer finish before --deadline) or `CA` (a dependency can never be satisfied, with --kill)."""
    job_id: int
    detail: str
    state: str = "EX"


@dataclass(frozen=True, slots=True)
class Preempt:
    """Send the running `job_id` the preempt control for `for_job`: checkpoint signal, `grace`
    seconds, then kill; it is requeued with the same id."""
    job_id: int
    for_job: int | None      # None: the budget's on_exhaust = "preempt"
    grace: int
    detail: str


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the running `job_id` (the budgets' stop policy, on_exhaust = "cancel"): its runner
    sees the control, stops the job and reports `cancelled`."""
    job_id: int
    detail: str


@dataclass(frozen=True, slots=True)
class Start:
    """Backfill's reservation: the blocked `job_id` is expected to start at `at` on `node`."""
    job_id: int
    at: float
    node: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The job stays pending for exactly this reason; `detail` gives the numbers. `earmark`: the node
    whose room (`earmark_gpus` there) is kept for the job while it waits for its victims
    (PreemptingFor) and until it starts; "" gives it up."""
    job_id: int
    reason: str
    detail: str
    earmark: str = ""
    earmark_gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    places: tuple[Place, ...] = ()
    expires: tuple[Expire, ...] = ()
    pending: tuple[Pending, ...] = ()
    preempts: tuple[Preempt, ...] = ()
    starts: tuple[Start, ...] = ()       # expected starts of reserved jobs (labq stat --start)
    cancels: tuple[Cancel, ...] = ()     # the stop policy's; policy.plan() gives none
