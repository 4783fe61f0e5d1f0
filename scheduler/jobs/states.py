"""Job state codes (SLURM's), attempt outcomes and pending reasons: the machine-readable vocabulary.
States and reasons are `StrEnum`s: each member is the very text records, JSON and filters use (the
state codes' text is codes.py's, which the thin commands read without `enum`)."""
from enum import StrEnum

from . import codes


class State(StrEnum):
    """A job's state code. A str: equal to the text in records, JSON and `--state` filters."""
    PENDING = codes.PENDING
    RUNNING = codes.RUNNING
    COMPLETING = codes.COMPLETING
    PREEMPTING = codes.PREEMPTING
    COMPLETED = codes.COMPLETED
    FAILED = codes.FAILED
    CANCELLED = codes.CANCELLED
    TIMEOUT = codes.TIMEOUT
    OOM = codes.OOM
    NODE_FAIL = codes.NODE_FAIL
    EXPIRED = codes.EXPIRED
    DEADLINE = codes.DEADLINE
    REJECTED = codes.REJECTED


PENDING, RUNNING, COMPLETING, PREEMPTING = State.PENDING, State.RUNNING, State.COMPLETING, State.PREEMPTING
COMPLETED, FAILED, CANCELLED, TIMEOUT, OOM = State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.OOM
NODE_FAIL, EXPIRED, DEADLINE, REJECTED = State.NODE_FAIL, State.EXPIRED, State.DEADLINE, State.REJECTED

LONG = {State(k): v for k, v in codes.LONG.items()}
ACTIVE = frozenset(map(State, codes.ACTIVE))
ON_NODE = frozenset(map(State, codes.ON_NODE))
TERMINAL = frozenset(map(State, codes.TERMINAL))


def parse_states(text: str, what: str = "--state") -> frozenset[State]:
    """`PD,R`, `pending,running` (any case, SLURM's short or long names) → state codes; an unknown
    name is a ValueError naming the known ones (a filter that matches nothing would look like an empty queue)."""
    return frozenset(map(State, codes.parse_states(text, what)))

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

