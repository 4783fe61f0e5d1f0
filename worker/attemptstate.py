"""What one attempt on this node knows while it runs: the facts it was started with and what the
runner learns as it goes (the process, its cgroup, the lease's end, the samples, the `finished` body).
Declared here, once, so that the two halves of the runner, the watch (runner.Run) and the end
(ending.Ending), each hold the same RunState instead of sharing the attributes of one object they
both are (issue 40: the runner was `Run(Ending)`, a mixin reading a dozen attributes it never declared)."""
import math
import resource
import subprocess
from dataclasses import dataclass, field
from typing import Any

from labq.scheduler.jobs.model import Job
from labq.scheduler.store.agentside import AgentStore, SlotRef

from . import cgroup, gang, gpuwatch, launch, memwatch, procscan, spawn, waiting


@dataclass(eq=False)
class RunState:
    # -- given: the attempt and where it runs
    store: AgentStore
    s: launch.Settings
    job: Job
    n: int                                  # the attempt's number
    slot: SlotRef | None                    # the slot list entry it came from (None: run outside a slot)
    rank: int                               # a gang's node rank here (0 for a single-node job)
    part: gang.Part                         # a gang's part here (the whole job for a single-node job)
    term: waiting.Sigterm
    gpu: gpuwatch.Account
    env: Any = None                         # what the submitter exported (read with the claim)
    ppid: int = 0                           # the runner's parent at the start: the agent's supervision
    mem_limit: int = 0
    # -- learned while it runs
    proc: "subprocess.Popen[bytes] | spawn.Child | None" = None
    ckpt_dir: str | None = None
    start: float | None = None              # wall clock at the spawn
    t0: float | None = None                 # monotonic clock at the spawn
    lease_until: float = math.inf           # monotonic time by which the job must be dead (the lease's end)
    control_due: bool = False               # the control thread saw a push: read the control key now
    control0: str | None = None             # the control as read with the record, before the start
    grace: float | None = None              # seconds, from a "preempt:GRACE" control
    peak_rss: int = 0
    peak_pss: int | None = None
    next_pss: float = 0.0
    cg: cgroup.JobCgroup | None = None
    tree_gone: bool = False                 # every process of the job was reaped: its cgroup is empty
    watchdog: memwatch.Watchdog | None = None
    table: procscan.ProcTable = field(default_factory=procscan.ProcTable)
    kill_now: tuple[str, str] | None = None     # (stop reason, message) found by a tick
    stopped_at: float | None = None         # when a stop's first signal went to the job
    ident: launch.Identity | None = None    # whom the job runs as (its log files are theirs)
    ru0: resource.struct_rusage | None = None   # the children's rusage before the spawn
    oom0: Any = None                        # the host's OOM counters before the spawn (memwatch)
    kmsg0: int | None = None
    announced: bool = False                 # the `started` post went through (a Redis blip may delay it)
    kept: bool = False                      # the result is on the spool (results.keep)
    waiting_beat: float = 0.0               # when a part waiting for node rank 0 heart-beats next
    leader_start: int | None = None         # the leader's start ticks, as named to the agent (exitwatch)
    body: dict[str, Any] = field(default_factory=lambda: {
        "outcome": "error", "exit_code": None, "signal": None, "start_time": None, "end_time": None,
        "usage": {}, "message": "", "ran": False})     # ran: its process was started (a gang's billed end)

    @classmethod
    def new(cls, store: AgentStore, s: launch.Settings, job: Job, attempt: int, term: waiting.Sigterm | None,
            rank: int, slot: SlotRef | None) -> "RunState":
        term = term or waiting.Sigterm()
        part = gang.part_of(job.attempts[-1], rank)
        gpu = gpuwatch.Account(gpuwatch.snapshot_path(s.spool), job, part.gpus, s.node, s.idle_gpu_util,
                               s.idle_gpu_after)
        return cls(store, s, job, attempt, slot, rank, part, term, gpu, env=job.env, ppid=term.ppid,
                   mem_limit=job.mem_limit or job.mem)

    def lease_seen(self, sent: float, pttl: int | None) -> None:
        """A PTTL of the node lease read by a request sent at monotonic `sent`: the lease lasts at
        least until sent + pttl. -2 (gone) fences at once; -1 (no expiry) and None tell nothing."""
        if pttl is None or pttl == -1:
            return
        self.lease_until = sent + max(pttl, 0) / 1000.0
