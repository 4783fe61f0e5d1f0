"""One attempt of one labq job on this node, from fencing to the `finished` event.

It runs inside the slot's persistent runner (worker/slot.py), one attempt at a time: the runner is
a child subreaper, may flip effective ids while it opens the job's files and reaps every child it
has, because its only children are its current job's processes. (It ran in a fork per attempt
until issue 12's speed work: the fork, a fresh Redis connection and the child's exit were a third
of a trivial job's CPU.) The contract is docs/internals.md.

Fencing: the job's leader dies with this process (PR_SET_PDEATHSIG), this process with the agent. And the runner reads the node lease's remaining time with every
heartbeat: when the lease would lapse (the agent stopped, or cut off from Redis) it kills the job
by then, before the scheduler may requeue it elsewhere (lease + scheduler.fence_margin).
"""
import logging
import math
import os
import resource
import signal
import time
from dataclasses import replace

from labq.scheduler.store import faults
from labq.scheduler.store.agentside import AgentStore, SlotRef

from . import batchenv, cgroup, gang, gpuwatch, jobmsg, launch, memwatch, probe, procscan, proctree, spawn, waiting
from .claiming import epoch_over, fence
from .ending import HARD, Ending, end_message

log = logging.getLogger("labq.runner")

TICK = 1.0             # heartbeat, sample, control and parent checks
STOP_POLL = waiting.STOP_POLL
PSS_EVERY = 30.0       # seconds between PSS samples (smaps_rollup costs ~24 ms per 2 GiB process)

RENDEZVOUS_S = 120.0   # how long a gang's part waits for node rank 0 to publish MASTER_ADDR/PORT
CONTROL_AFTER = 0.05   # the control watch starts this long after the job


def run_job(job_id: int, attempt: int, s: launch.Settings | None = None, slot: SlotRef | None = None,
            store: AgentStore | None = None) -> dict:
    """Run the attempt if it is this node's to run. `slot`: the slot list entry it came from, which
    the runner's first read marks as running and its last write releases; the result then also
    says whether a SIGTERM (`stop`) or the parent's death (`orphaned`) arrived meanwhile."""
    s = s or launch.Settings.from_environ()
    # From the first instant: a SIGTERM now would otherwise orphan the job. Its parent is the agent's
    # pid where the agent said it: a runner orphaned before this line must not take its new parent
    # (a subreaper, init) for the agent.
    term = waiting.Sigterm(s.agent_pid)
    try:
        out = _run_job(job_id, attempt, s, slot, store or AgentStore.open(s.redis_url, s.prefix), term)
    finally:
        term.close()
    if slot is not None:
        out.update(stop=term.got, orphaned=term.orphaned or bool(out.get("orphaned")))
    return out


def _run_job(job_id: int, attempt: int, s: launch.Settings, slot: SlotRef | None, store: AgentStore,
             term: waiting.Sigterm) -> dict:
    job, control, holder = store.first_read(job_id, slot, s.node if s.epoch else "", s.node)
    over = epoch_over(s, holder) or term.orphaned and "its agent is gone"
    if over:
        # Left in the slot's list: the next incarnation's runner of this slot runs it if unclaimed.
        log.warning("job %s attempt %s not claimed: %s; this runner exits", job_id, attempt, over)
        return {"ran": False, "reason": over, "orphaned": True, "keep": True}
    why = fence(job, attempt, s.node)
    pttl, env, rank, sent = -2, (), 0, time.monotonic()
    if why is None:
        rank = gang.rank_of(job.attempts[-1], s.node) or 0
        # The PTTL is read somewhere between sending and the reply: the lease lasts at least until
        # `sent` + PTTL. Counted from the reply, a slow one would stretch it past its real end.
        sent = time.monotonic()
        won, pttl, env = store.claim(job_id, attempt, s.node, os.getpid(), rank, job)
        if not won:
            why = "already claimed"      # by another runner, or withdrawn by the scheduler
        # Won on a lapsed lease (PTTL -2): ours to report, not to run. Run.execute posts the node
        # failure (exactly one `finished` per claimed attempt); silent, the attempt would stay R
        # with no heartbeat, for as long as the scheduler did not see the node down.
    if why:
        log.warning("job %s attempt %s not run: %s", job_id, attempt, why)
        if slot is None:
            return {"ran": False, "reason": why}
        store.release_slot(slot)
        return {"ran": False, "reason": why, "released": True}
    run = Run(store, s, job, attempt, term, rank, slot)
    run.lease_seen(sent, pttl)
    run.control0, run.env = control, env
    return run.execute()


class Run(Ending):
    def __init__(self, store: AgentStore, s: launch.Settings, job, attempt: int,
                 term: waiting.Sigterm | None = None, rank: int = 0, slot: SlotRef | None = None):
        self.store, self.s, self.job, self.n, self.slot = store, s, job, attempt, slot
        self.rank, self.part = rank, gang.part_of(job.attempts[-1], rank)    # a gang's part here
        self.env = job.env          # what the submitter exported (read with the claim)
        self.term = term or waiting.Sigterm()
        self.proc = None
        self.ckpt_dir = None
        self.start, self.t0 = None, None
        self.ppid = self.term.ppid
        self.lease_until = math.inf     # monotonic time by which the job must be dead (the lease's end)
        self.control_due = False        # the control thread saw a push: read the control key now
        self.control0 = None            # the control as read with the record, before the start
        self.grace = None       # seconds, from a "preempt:GRACE" control
        self.peak_rss, self.peak_pss, self.next_pss = 0, None, 0.0
        self.mem_limit = job.mem_limit or job.mem
        self.cg: cgroup.JobCgroup | None = None
        self.tree_gone = False          # _finish reaped every process of the job: its cgroup is empty
        self.watchdog: memwatch.Watchdog | None = None
        self.table = procscan.ProcTable()
        self.kill_now: tuple[str, str] | None = None     # (stop reason, message) found by a tick
        self.stopped_at: float | None = None             # when a stop's first signal went to the job
        self.ident: launch.Identity | None = None        # whom the job runs as (its log files are theirs)
        self.gpu = gpuwatch.Account(gpuwatch.snapshot_path(s.spool), job, self.part.gpus, s.node,
                                    s.idle_gpu_util, s.idle_gpu_after)
        self.oom0 = self.kmsg0 = None
        self.announced = False          # the `started` post went through (a Redis blip may delay it)
        self.body = {"outcome": "error", "exit_code": None, "signal": None, "start_time": None,
                     "end_time": None, "usage": {}, "message": ""}

    # -- the attempt, start to end -------------------------------------------------------------
    def execute(self) -> dict:
        """Exactly one `finished` per claimed attempt, whatever happens in between."""
        try:
            self._run()
        except launch.StartError as e:
            self.body["message"] = str(e)
        except faults.ERRORS as e:
            # Redis lost where the runner cannot carry on without it: the node's failure, not the
            # job's (an `error` would end it F without its having run). Requeued.
            self.body.update(outcome="node_failure", message=end_message("redis_lost", repr(e)))
            self._cleanup_after_error()
        except BaseException as e:     # a bug, Redis gone, SystemExit from a signal: never leave a tree behind
            self.body.update(outcome="error", message=f"runner failed: {e!r}")
            self._cleanup_after_error()
            raise
        finally:
            if self.cg is not None and not self.tree_gone:
                self.cg.kill()
            self.body["end_time"] = self.body["end_time"] or time.time()
            try:
                self._keep_result()
                if self._post_finished():     # first: removing the cgroup waits for the kernel to empty it
                    self._drop_result()
            finally:
                self._release_cgroup()
                if self.s.pbs_env or self.s.sge_env:
                    batchenv.end(self.s.spool, self.job.id)      # TMPDIR goes with the job, as pbs_mom's
        out = {"ran": self.proc is not None, "outcome": self.body["outcome"], "exit_code": self.body["exit_code"]}
        return {**out, "released": True} if self.slot is not None else out

    def lease_seen(self, sent: float, pttl: int | None) -> None:
        """A PTTL of the node lease read by a request sent at monotonic `sent`: the lease lasts at
        least until sent + pttl. -2 (gone) fences at once; -1 (no expiry) and None tell nothing."""
        if pttl is None or pttl == -1:
            return
        self.lease_until = sent + max(pttl, 0) / 1000.0

    def _run(self) -> None:
        job, s = self.job, self.s
        early = waiting.control_verb(self.control0) or ("cancel" if job.cancel_requested else None)
        if waiting.stops_part(self.control0, self.n):
            self.body.update(outcome="cancelled", message=end_message("gang_stop") + " before it started")
            return
        if early in ("cancel", "preempt") or self.term.got:
            outcome = "cancelled" if early == "cancel" else "preempted"
            self.body.update(outcome=outcome, message=f"{outcome} before it started"
                             + (" (the node agent is stopping)" if self.term.got and early != "cancel" else ""))
            return
        if self._not_startable():
            return
        if self.env is None:    # AgentStore.claim could not read it: run without it, never (a wrong upgrade order)
            why = self.store.env_denied(job, s.node)
            log.error("job %s attempt %s not started: %s", job.id, self.n, why)
            raise launch.StartError(why)
        ident = self.ident = launch.identity(job, s)
        if len(self.part.nodes) > 1:
            self.part = gang.rendezvous(self.store, job.id, self.n, self.part, gang.node_addr(s.addr), RENDEZVOUS_S,
                                        self._rendezvous_stopped)
        out_fd, err_fd = launch.open_logs(job, ident, self.rank, s.node)
        try:
            try:
                ckpt = self.ckpt_dir = launch.checkpoint_dir(s, job, ident)
                script = launch.write_script(s, job, ident) if job.script else None
            except OSError as e:
                raise launch.StartError(f"cannot prepare the spool {s.spool}: {e}") from None
            cmd = launch.command(job, script)
            start = time.time()
            exported = replace(job, env=self.env)
            env = launch.environment(exported, job.attempts[-1], s, ident, start, ckpt, self.part)
            proctree.become_subreaper()
            self.ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self._limits()
            if self._not_startable():
                return
            self._spawn(cmd, env, ident, out_fd, err_fd)
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
        self.start, self.t0 = start, time.monotonic()
        self.body["start_time"] = start
        self._note_leader()
        self._announce()
        if self.gpu.gpus:
            # The GPUs' counters at the start (energy is a delta). What this first sample finds is
            # alerted like any other: the GPU then counts as alerted, and no later tick would say it.
            for alert in self.gpu.tick((self.proc.pid,)):
                self._post("alert", alert)
        self._finish(self._watch())

    # -- limits --------------------------------------------------------------------------------
    def _limits(self) -> None:
        """The job's cgroup where the agent found a delegated subtree; the watchdog for whatever
        memory limit the kernel will not enforce; the host OOM counters for the evidence."""
        s, job = self.s, self.job
        if s.cgroup_base:
            cg = cgroup.JobCgroup.for_attempt(s.cgroup_base, job.id, self.n)
            try:
                cg.create(mem_max=self.mem_limit, cpus=job.cpus if s.limit_cpus else 0, pids_max=s.pids_max)
                self.cg = cg
            except OSError as e:
                log.warning("job %s: no cgroup at %s (%s); the runner enforces the memory limit", job.id, cg.path, e)
        if self.mem_limit > 0 and not (self.cg and "memory" in self.cg.controllers):
            self.watchdog = memwatch.Watchdog(self.mem_limit, probe.tree_pss)
        self.oom0, self.kmsg0 = memwatch.host_oom_kills(), memwatch.monotonic_us()

    def _spawn(self, cmd, env, ident, out_fd: int, err_fd: int) -> None:
        """The job is born in its cgroup (spawn.spawn: cloned into it, or the forked child writes
        itself into cgroup.procs before it execs the job), so this runner never moves. One that
        cannot be started there is not started at all (StartError: the attempt ends `error`)."""
        procs = os.path.join(self.cg.path, "cgroup.procs") if self.cg is not None else ""
        self.proc = spawn.spawn(cmd, env, ident, self.job.workdir, out_fd, err_fd, self.job.umask,
                                 cgroup_procs=procs)

    def _release_cgroup(self) -> None:
        cg, self.cg = self.cg, None
        if cg is not None:
            if not self.tree_gone:
                cg.kill()
            cg.remove()

    # -- watching ------------------------------------------------------------------------------
    def _watch(self) -> str:
        """Why the attempt ended: "exited", or the stop reason once the tree is down (or its last
        stop phase has passed, after which _finish sends SIGKILL)."""
        limit = self.job.time_limit
        deadline = self.t0 + limit if limit > 0 else math.inf
        warn_at = deadline - self.job.warn_signal[1] if self.job.warn_signal else math.inf
        tick_s = min(TICK, self.s.lease / 3)     # the lease must be re-read well within its length
        next_tick, stopping, kill_at, phases = self.t0 + tick_s, None, math.inf, []
        # The control watch starts once the job has run a moment: a job that ends at once never
        # pays for its thread and connection, and a push made before it starts waits in the list.
        watch_at = self.t0 + CONTROL_AFTER
        waiter, watch = waiting.LeaderWaiter(self.proc.pid, self.term.rfd), None
        try:
            while True:
                exited = waiter.exited()
                if exited and (stopping is None or not proctree.live_descendants()):
                    # The job's own exit, also when its agent died meanwhile (the job runs in this
                    # process, which only its own fencing could have killed it from): its outcome.
                    return stopping or "exited"
                self.term.drain()
                now = time.monotonic()
                if stopping and (self.term.orphaned or now >= self.lease_until):
                    return "orphaned" if self.term.orphaned else "fenced"    # no more grace: kill now
                if stopping and now >= kill_at:
                    if not phases:
                        return stopping
                    kill_at = self._signal_phase(stopping, phases, now)
                if now >= watch_at:
                    watch = waiting.ControlWatch(self)
                    watch.start()
                    watch_at = math.inf
                due = now >= next_tick
                if due:
                    next_tick = now + tick_s
                    self._tick()
                if stopping is None:
                    why = self._why_stop(now >= deadline, due or self.control_due)
                    if why in HARD:
                        return why          # no grace: _finish kills at once
                    if why:
                        stopping, phases = why, self._stop_phases(why)
                        first, grace = phases[0][0].name.removeprefix("SIG"), phases[0][1] if len(phases) > 1 else None
                        kill_at = self._signal_phase(why, phases, now)    # the signal first: the line must not delay it
                        self._say(jobmsg.stopped(why, self.job.display_id, self.s.node, time.time(), first, grace))
                if stopping is None and now >= warn_at:
                    name = self.job.warn_signal[0]
                    log.info("job %s attempt %d: SIG%s %ds before the limit", self.job.id, self.n, name,
                             self.job.warn_signal[1])
                    proctree.warn(self.proc.pid, getattr(signal, f"SIG{name}"), "batch" in self.job.warn_signal[2:])
                    warn_at = math.inf
                wake = max(min(next_tick, deadline, kill_at, warn_at, self.lease_until, watch_at)
                           - time.monotonic(), 0.0)
                waiter.wait(min(wake, STOP_POLL) if stopping else wake)
        finally:
            waiter.close()
            if watch is not None:
                watch.stop()

    def _signal_phase(self, why: str, phases: list, now: float) -> float:
        """Send the next stop signal to the tree; returns when the phase after it is due."""
        sig, wait = phases.pop(0)
        self.stopped_at = self.stopped_at or time.time()
        log.info("job %s attempt %d: %s, %s to the tree, %ds before the next step", self.job.id, self.n, why,
                 sig.name, wait)
        proctree.signal_tree(self.proc.pid, sig)
        return now + wait

    def _why_stop(self, past_deadline: bool, check_control: bool) -> str | None:
        if self.kill_now:
            return self.kill_now[0]
        if self.term.orphaned or os.getppid() != self.ppid:
            return "orphaned"         # the slot runner (and so the agent's supervision) is gone
        if time.monotonic() >= self.lease_until:
            return "fenced"
        if self.term.got:
            return "shutdown"
        if check_control:
            self.control_due = False
            ctl = self._control()
            if waiting.stops_part(ctl, self.n):
                return "gang_stop"
            if waiting.control_verb(ctl) == "cancel":
                return "cancelled"
            if waiting.control_verb(ctl) == "preempt":
                self.grace = waiting.control_grace(ctl)
                return "preempted"
        return "timeout" if past_deadline else None

    def _stop_phases(self, why: str) -> list:
        """The signals of a stop, each with the wait before the next (SIGKILL after the last).
        A preemption: the checkpoint signal (--signal's, else the QoS's, else TERM) and the grace
        (from the control; a node stop gives the QoS grace capped by worker.stop_grace), then SIGTERM
        and kill_wait. Everything else: SIGTERM and kill_wait."""
        term = (signal.SIGTERM, self.s.kill_wait)
        if why not in ("preempted", "shutdown"):
            return [term]
        if why == "shutdown":
            grace = self.s.shutdown_grace(self.job.qos)
        else:
            grace = self.grace if self.grace is not None else self.s.kill_wait
        return [(getattr(signal, f"SIG{self.s.checkpoint_signal(self.job)}"), grace), term]

    def _control(self) -> str | None:
        try:
            return self.store.control(self.job.id, self.n, self.rank)
        except faults.ERRORS as e:
            log.warning("job %s: cannot read control: %s", self.job.id, e)
            return None

    def _tick(self) -> None:
        pids = self.cg.pids() if self.cg is not None else self.table.pids()
        t = procscan.stats(pids, None if self.cg is not None else self.table, self.table.seen)
        self.peak_rss = max(self.peak_rss, t.max_rss_bytes)
        now = time.monotonic()
        if now >= self.next_pss:
            pss = probe.tree_pss(t.pids)
            # smaps_rollup walks page tables: for a very large job, sample less often so that PSS
            # never takes more than 0.5 % of a core.
            self.next_pss = now + max(PSS_EVERY, (time.monotonic() - now) * 200)
            self.peak_pss = max(self.peak_pss or 0, pss)
        if self.watchdog is not None and self.kill_now is None:
            why = self.watchdog.check(t.rss_bytes, t.pids)
            if self.watchdog.last_pss is not None:
                self.peak_pss = max(self.peak_pss or 0, self.watchdog.last_pss)
            if why:
                log.warning("job %s attempt %d: %s", self.job.id, self.n, why)
                self.kill_now = ("oom", why)
        for alert in self.gpu.tick(t.pids):
            self._post("alert", alert)
        if self.gpu.lost and self.kill_now is None:
            self.kill_now = ("gpu_lost", f"GPU {self.gpu.lost} was lost (NVML); the job was stopped and requeued")
        self._tick_checkpoint()
        if not self.announced:
            self._announce()
            return          # its post was this tick's heartbeat, or failed as one would
        try:
            sent = time.monotonic()
            self.lease_seen(sent, self.store.heartbeat(
                self.job.id, self.n, self.s.node, rank=self.rank, cpu_s=round(t.cpu_s, 3), rss=t.rss_bytes, procs=t.procs,
                ckpt=self.body.get("last_checkpoint") or ""))
        except faults.ERRORS as e:      # a Redis blip must not kill a running job (unless it outlasts the lease)
            log.warning("job %s: heartbeat failed: %s", self.job.id, e)

    def _post(self, kind: str, body: dict) -> None:
        try:
            self.store.post(kind, self.job.id, self.n, self.s.node, body)
        except faults.ERRORS as e:
            log.warning("job %s: cannot post %s: %s", self.job.id, kind, e)

    # -- the end -------------------------------------------------------------------------------
