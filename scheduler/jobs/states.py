"""Job state codes (SLURM's), attempt outcomes and pending reasons: the machine-readable vocabulary.
States and reasons are `StrEnum`s: each member is the very text records, JSON and filters use."""
from enum import StrEnum


class State(StrEnum):
    """A job's state code. A str: equal to the text in records, JSON and `--state` filters."""
    PENDING = "PD"
    RUNNING = "R"
    COMPLETING = "CG"
    PREEMPTING = "PR"
    COMPLETED = "CD"
    FAILED = "F"
    CANCELLED = "CA"
    TIMEOUT = "TO"
    OOM = "OOM"
    NODE_FAIL = "NF"
    EXPIRED = "EX"
    DEADLINE = "DL"
    REJECTED = "RJ"


PENDING, RUNNING, COMPLETING, PREEMPTING = State.PENDING, State.RUNNING, State.COMPLETING, State.PREEMPTING
COMPLETED, FAILED, CANCELLED, TIMEOUT, OOM = State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.OOM
NODE_FAIL, EXPIRED, DEADLINE, REJECTED = State.NODE_FAIL, State.EXPIRED, State.DEADLINE, State.REJECTED

# SLURM's long names (squeue %T, sacct State); labq's PR is a job draining for a preemptor.
LONG = {PENDING: "PENDING", RUNNING: "RUNNING", COMPLETING: "COMPLETING", PREEMPTING: "PREEMPTED",
        COMPLETED: "COMPLETED", FAILED: "FAILED", CANCELLED: "CANCELLED", TIMEOUT: "TIMEOUT", OOM: "OUT_OF_MEMORY",
        NODE_FAIL: "NODE_FAIL", EXPIRED: "EXPIRED", DEADLINE: "DEADLINE", REJECTED: "REJECTED"}
_BY_NAME: dict[str, State] = {**{v: k for k, v in LONG.items()}, **{str(k): k for k in LONG},
                              "PREEMPTING": PREEMPTING, "OOM": OOM}

ACTIVE = frozenset({PENDING, RUNNING, COMPLETING, PREEMPTING})
ON_NODE = frozenset({RUNNING, COMPLETING, PREEMPTING})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, OOM, NODE_FAIL, EXPIRED, DEADLINE, REJECTED})

# Attempt outcomes, as the runner reports them, and the job state each one ends in.
OUTCOME_STATE = {
    "completed": COMPLETED,
    "exit": FAILED,
    "timeout": TIMEOUT,
    "oom": OOM,
    "cancelled": CANCELLED,
    "node_failure": NODE_FAIL,
    "preempted": PENDING,
    "checkpoint_exit": PENDING,
    "error": FAILED,  # the runner itself could not start the command (bad workdir, log path)
}

# Pending reasons: exactly one per pending job.
class Reason(StrEnum):
    """Why a job is pending (SLURM's reason names where SLURM has one)."""
    PRIORITY = "Priority"
    RESOURCES = "Resources"
    HELD = "Held"
    DEPENDENCY = "Dependency"
    BEGIN_TIME = "BeginTime"
    ACCOUNT_JOB_LIMIT = "AccountJobLimit"
    ACCOUNT_GPU_LIMIT = "AccountGpuLimit"
    USER_JOB_LIMIT = "UserJobLimit"
    BUDGET_RESERVED = "BudgetReserved"
    BUDGET_EXHAUSTED = "BudgetExhausted"
    NODE_DOWN = "NodeDown"
    ARRAY_TASK_LIMIT = "JobArrayTaskLimit"  # the array's %N throttle
    DEPENDENCY_NEVER = "DependencyNeverSatisfied"
    USER_GPU_LIMIT = "UserGpuLimit"
    USER_CPU_LIMIT = "UserCpuLimit"
    ACCOUNT_CPU_LIMIT = "AccountCpuLimit"
    PREEMPTING_FOR = "Preempting"             # victims are draining for this job
    PREEMPTION_DEFERRED = "PreemptionDeferred"  # the victims it needs have not run min_runtime yet
    RESERVED_CAPACITY = "ReservedCapacity"    # the free GPUs are protected for a higher QoS
    RESERVATION = "Reservation"               # backfill: starting now would delay a reserved job
    CRASH_GUARD = "CrashCascade"              # held: the user's jobs failed too often, too fast
    NONE = "None"  # just submitted, not yet planned


PRIORITY = Reason.PRIORITY
RESOURCES = Reason.RESOURCES
HELD = Reason.HELD
DEPENDENCY = Reason.DEPENDENCY
BEGIN_TIME = Reason.BEGIN_TIME
ACCOUNT_JOB_LIMIT = Reason.ACCOUNT_JOB_LIMIT
ACCOUNT_GPU_LIMIT = Reason.ACCOUNT_GPU_LIMIT
USER_JOB_LIMIT = Reason.USER_JOB_LIMIT
BUDGET_RESERVED = Reason.BUDGET_RESERVED
BUDGET_EXHAUSTED = Reason.BUDGET_EXHAUSTED
NODE_DOWN = Reason.NODE_DOWN
ARRAY_TASK_LIMIT = Reason.ARRAY_TASK_LIMIT
DEPENDENCY_NEVER = Reason.DEPENDENCY_NEVER
USER_GPU_LIMIT = Reason.USER_GPU_LIMIT
USER_CPU_LIMIT = Reason.USER_CPU_LIMIT
ACCOUNT_CPU_LIMIT = Reason.ACCOUNT_CPU_LIMIT
PREEMPTING_FOR = Reason.PREEMPTING_FOR
PREEMPTION_DEFERRED = Reason.PREEMPTION_DEFERRED
RESERVED_CAPACITY = Reason.RESERVED_CAPACITY
RESERVATION = Reason.RESERVATION
CRASH_GUARD = Reason.CRASH_GUARD
NONE = Reason.NONE

REASONS = frozenset({PRIORITY, RESOURCES, HELD, DEPENDENCY, BEGIN_TIME, ACCOUNT_JOB_LIMIT,
                     ACCOUNT_GPU_LIMIT, USER_JOB_LIMIT, ARRAY_TASK_LIMIT, BUDGET_RESERVED, BUDGET_EXHAUSTED, NODE_DOWN, NONE,
                     DEPENDENCY_NEVER, USER_GPU_LIMIT, USER_CPU_LIMIT, ACCOUNT_CPU_LIMIT, PREEMPTING_FOR,
                     PREEMPTION_DEFERRED, RESERVED_CAPACITY, RESERVATION, CRASH_GUARD})

# Backfill off: the detail of every job behind the pass's blocker. It does not name the blocker, so a
# new blocker rewrites none of their records (issue 41); the pass keeps the blocker's id once
# (Plan.blocker, Keys.blocker) and `labq show` names it (behind()).
BEHIND_BLOCKER = "behind the first job that waits for resources (backfill off)"


def behind(blocker: str) -> str:
    """BEHIND_BLOCKER as `labq show` prints it, naming the blocker (its display id)."""
    return f"behind job {blocker}, which waits for resources (backfill off)"


def parse_states(text: str, what: str = "--state") -> frozenset[str]:
    """`PD,R`, `pending,running` (any case, SLURM's short or long names) → state codes; an unknown
    name is a ValueError naming the known ones (a filter that matches nothing would look like an empty queue)."""
    out = set()
    for name in (x.strip().upper() for x in str(text).split(",") if x.strip()):
        if name not in _BY_NAME:
            raise ValueError(f"{what}: unknown state {name!r} (known: {', '.join(f'{k}/{v}' for k, v in LONG.items())})")
        out.add(_BY_NAME[name])
    if not out:
        raise ValueError(f"{what}: expected states like PD,R or PENDING,RUNNING, got {text!r}")
    return frozenset(out)
