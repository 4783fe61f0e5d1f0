"""The data the policy reads and writes: frozen dataclasses, no behaviour beyond small derivations.

A `Job` is one record for its whole life: the request as submitted plus the fields the scheduler
changes (state, reason, allocation, attempts). Changes are made with `dataclasses.replace`, so a
snapshot handed to `plan()` can never be mutated under it.
"""
from collections import deque
from dataclasses import dataclass, field, fields, replace
from itertools import repeat
from operator import attrgetter, call

TYPE_CHECKING = False    # typing.TYPE_CHECKING without importing typing (mypy reads the name alike)
if TYPE_CHECKING:
    from typing import Any

from . import arrayid, states


@dataclass(frozen=True, slots=True)
class Gpu:
    uuid: str          # the CUDA_VISIBLE_DEVICES token ("GPU-…", "MIG-…")
    index: int
    model: str
    mem: int = 0       # bytes


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cpus: int
    mem: int                   # bytes
    slots: int                 # max concurrent jobs
    gpus: tuple[Gpu, ...] = ()
    state: str = "up"          # up | drain | unhealthy | down
    lease_expiry: float = 0.0  # epoch seconds; the node is down once this passes
    last_heartbeat: float = 0.0
    runs: str = ""             # whose jobs its agent can run: "*" anyone, "!root" anyone but root, else one
                               # user ("": an agent too old to say, taken as anyone)
    reason: str = ""           # why it is `unhealthy` (its runners took no work within start_timeout)

    def runs_jobs_of(self, user: str) -> bool:
        if self.runs in ("", "*"):
            return True
        if self.runs == "!root":
            return user != "root"
        return user == self.runs


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    node: str
    gpus: tuple[str, ...]
    start_time: float | None = None      # when the process started (from the runner)
    end_time: float | None = None
    outcome: str | None = None
    exit_code: int | None = None
    cost: int = 0                        # micro-units of the currency
    charges: tuple[tuple[str, int], ...] = ()   # (budget, micro-units of its unit)
    lost_work_s: float = 0.0
    last_checkpoint: float | None = None   # newest checkpoint seen during the attempt
    usage: "dict[str, Any]" = field(default_factory=dict, hash=False, compare=True)
    dispatch_time: float | None = None   # when the scheduler admitted it
    # A multi-node attempt: (node, its GPUs) per part, in rank order (node rank 0 first); `node` is the
    # first part's and `gpus` all parts' GPUs. () for a one-node attempt.
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()


# The kinds of `-d` (Job.deps), as SLURM names them: parsed in jobspec.py, judged in policy/depend.py.
DEPENDENCY_KINDS = ("afterok", "afternotok", "afterany", "singleton")


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    user: str
    account: str
    argv: tuple[str, ...] = ()            # exec'd directly when there is no script
    script: str | None = None             # script text, captured at submit like sbatch
    name: str = ""
    project: str = ""
    qos: str = "normal"
    budget: str = ""                      # a named batch budget (sub --budget)
    workdir: str = "/"
    gpus: int = 0
    gpu_type: str = ""
    cpus: int = 1
    mem: int = 0
    nodes: int = 1                        # -N: nodes of a gang; gpus, cpus and mem are then per node
    time_limit: int = 0                   # seconds
    est: int | None = None                # expected runtime, seconds
    learned_est: int | None = None        # run time learned from ended jobs at submit (estimate.py), seconds
    learned_basis: str = ""               # what it rests on: "p75 of 17 runs of user alice, name train"
    max_wait: int | None = None           # seconds of queue wait before EX
    out: str = ""
    err: str = ""
    # --signal [B:]SIG@SECS: (name, seconds before the limit), + "batch" with B: (the job's own process only)
    warn_signal: "tuple[Any, ...] | None" = None
    checkpoint_exit_code: int | None = None      # exiting with it means: requeue me now
    tags: tuple[tuple[str, str], ...] = ()
    array_id: int | None = None
    array_index: int | None = None
    array_count: int | None = None
    array_throttle: int | None = None      # at most this many tasks of the array run at once (%N)
    # An ended record that stands for many tasks of its array, (first, last, step) index runs: the
    # tasks still resting when `del` took a held array's rest whole (jobs/rest.ended), one record.
    array_runs: tuple[tuple[int, int, int], ...] = ()
    submit_time: float = 0.0
    request_id: str = ""
    mem_limit: int = 0                    # --mem-limit bytes (0: the request, `mem`)
    deadline: float | None = None         # --deadline epoch: ends `DL` once a start could not finish by it
    deps: tuple[tuple[str, tuple[int, ...]], ...] = ()   # -d: (("afterok", (12, 13)), ("singleton", ()))
    kill_on_invalid_dep: bool = False     # DependencyNeverSatisfied cancels the job instead of pending
    preemptible: bool | None = None       # --preemptible/--no-preemptible; None: the QoS decides
    requeue: bool = True                  # --no-requeue: node failure ends the job `NF`
    retries: int = 0                      # --retries N for node_failure and --retry-on exit codes
    retry_on: tuple[int, ...] = ()        # --retry-on CODES
    requeue_on_timeout: bool = False      # --requeue-on-timeout: a timeout after a checkpoint requeues
    export: str = "NONE"                  # --export: "ALL" (the submitter's environment) or "NONE" (a clean one)
    umask: int = 0o022                    # the submitter's umask at submit: the job's, and its log files' (SLURM)
    env: tuple[tuple[str, str], ...] = () # the variables captured at submit (all of them with ALL, else those named)
    # A script kept apart (store/keys.script): records say so here, never hold its text, which only the
    # scheduler, the nodes and, through the scheduler, its owner and admins read (`script` is then None).
    scripted: bool = False
    # -- changed by the scheduler --
    state: str = states.PENDING
    reason: str = states.NONE
    detail: str = ""                      # the sentence with the numbers behind the reason
    restart_count: int = 0
    held: bool = False                    # -H / labq hold: pends `Held` until released
    begin: float | None = None            # --begin: not eligible before this epoch time
    cancel_requested: bool = False        # a cancel reached a running job: never requeue it
    requeue_requested: bool = False       # labq requeue reached a running job: back to PD when it stops
    retries_used: int = 0                 # retries spent of --retries
    eligible_time: float | None = None    # retry backoff: not eligible before this epoch time
    preempt_count: int = 0                # times this job was preempted (max_preemptions)
    preempted_for: int | None = None      # while PR: the job its resources are drained for
    preempt_time: float | None = None     # while PR: when the preempt control was sent
    borrowed: bool = False                # the running attempt uses GPUs lent by other accounts
    earmark: str = ""                     # while PD after preempting: the node whose room is kept for it
    earmark_gpus: tuple[str, ...] = ()    # and the GPUs kept there (its victims' and the free ones it held)
    node: str = ""
    gpu_uuids: tuple[str, ...] = ()       # a gang's: every part's, in rank order
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()   # a running gang: (node, its GPUs) in rank order
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    commit: tuple[tuple[str, int], ...] = ()    # (budget, micro) encumbered for the running attempt
    rates: tuple[tuple[str, int], ...] = ()     # (budget, micro per hour) of the running attempt
    cost_rate: int = 0                          # currency micro per hour of the running attempt
    attempts: tuple[Attempt, ...] = ()

    @property
    def display_id(self) -> str:
        return arrayid.display_id(self.id, self.array_id, self.array_index, self.array_runs)

    @property
    def task_count(self) -> int:
        return arrayid.task_count(self.array_runs)

    def task_at(self, index: int) -> "Job | None":
        """Task `index` of the tasks this array_runs record stands for (they ended together: `del A`
        of a rest, jobs/rest.ended), as a record of its own; None where it names no such task. An
        array's ids and indices step together: id = this id + (index - this index) / step."""
        first = self.array_index
        if first is None:
            return None
        for lo, hi, step in self.array_runs:
            if lo <= index <= hi and not (index - lo) % step:
                return replace(self, id=self.id + (index - first) // step, array_index=index, array_runs=())
        return None

    @property
    def has_script(self) -> bool:
        """Whether the job runs a script (its text in hand or kept apart), not argv alone."""
        return self.scripted or bool(self.script)

    @property
    def on_nodes(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(node, its GPUs) of each part the job holds: one for a one-node job."""
        return self.parts or ((self.node, self.gpu_uuids),)

    @property
    def total_gpus(self) -> int:
        """GPUs over all the job's nodes (quotas, rates and reports count these)."""
        return self.gpus * self.nodes

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def cost(self) -> int:
        return sum(a.cost for a in self.attempts)


# Job's field names, its slots' descriptors (getattr: a type checker reads Job.id as the field's value
# type) and all its values in one call: for copies made without Job() (evolve, jobspec.expand).
JOB_FIELDS = tuple(f.name for f in fields(Job))
JOB_SETTERS = tuple(getattr(Job, n).__set__ for n in JOB_FIELDS)
JOB_VALUES = attrgetter(*JOB_FIELDS)
_JOB_SETTER = dict(zip(JOB_FIELDS, JOB_SETTERS))


def evolve(job: Job, **changes: "Any") -> Job:
    """dataclasses.replace(job, **changes) at under half its cost (a pass gives thousands of jobs a
    new reason): the slots copied by their descriptors, called by map, then the changed ones set.
    Job has no __post_init__ and no field outside __init__, so nothing replace() runs is skipped."""
    out = object.__new__(Job)
    deque(map(call, JOB_SETTERS, repeat(out, len(JOB_SETTERS)), JOB_VALUES(job)), 0)
    for name, value in changes.items():
        put = _JOB_SETTER.get(name)
        if put is None:
            raise TypeError(f"evolve: Job has no field {name!r}")
        put(out, value)
    return out


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything plan() may look at. `now` is an input: the policy never reads a clock."""
    now: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]                      # active jobs: pending and on a node
    spent: tuple[tuple[str, int], ...] = ()    # (budget, micro) settled charges
    usage: tuple[tuple[str, float], ...] = ()  # (account, decayed fair-share usage), see fairshare.py
    ended: tuple[tuple[int, str], ...] = ()    # (id, state) of ended jobs that pending jobs depend on
    shown: tuple[tuple[int, str], ...] = ()    # (id, "126_7") of those that are array tasks, for reasons
