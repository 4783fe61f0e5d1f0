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

from . import batchenv, cgroup, gang, jobmsg, launch, memwatch, probe, procscan, proctree, spawn, waiting
from .attemptstate import RunState
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
    run.st.lease_seen(sent, pttl)
    run.st.control0, run.st.env = control, env
    return run.execute()


class Run:
    """The watch of one attempt: start it, sample it, stop it when due; its end is `end`'s (ending.py).
    Both work on one RunState (attemptstate.py)."""

    def __init__(self, store: AgentStore, s: launch.Settings, job, attempt: int,
                 term: waiting.Sigterm | None = None, rank: int = 0, slot: SlotRef | None = None):
        self.st = RunState.new(store, s, job, attempt, term, rank, slot)
        self.end = Ending(self.st)

    # -- the attempt, start to end -------------------------------------------------------------
    def execute(self) -> dict:
        """Exactly one `finished` per claimed attempt, whatever happens in between."""
        st = self.st
        try:
            self._run()
        except launch.StartError as e:
            st.body["message"] = str(e)
        except faults.ERRORS as e:
            # Redis lost where the runner cannot carry on without it: the node's failure, not the
            # job's (an `error` would end it F without its having run). Requeued.
            st.body.update(outcome="node_failure", message=end_message("redis_lost", repr(e)))
            self.end.cleanup_after_error()
        except BaseException as e:     # a bug, Redis gone, SystemExit from a signal: never leave a tree behind
            st.body.update(outcome="error", message=f"runner failed: {e!r}")
            self.end.cleanup_after_error()
            raise
        finally:
            if st.cg is not None and not st.tree_gone:
                st.cg.kill()
            st.body["end_time"] = st.body["end_time"] or time.time()
            try:
                self.end.keep_result()
                if self.end.post_finished():     # first: removing the cgroup waits for the kernel to empty it
                    self.end.drop_result()
            finally:
                self._release_cgroup()
                if st.s.pbs_env or st.s.sge_env:
                    batchenv.end(st.s.spool, st.job.id)      # TMPDIR goes with the job, as pbs_mom's
        out = {"ran": st.proc is not None, "outcome": st.body["outcome"], "exit_code": st.body["exit_code"]}
        return {**out, "released": True} if st.slot is not None else out

    def _run(self) -> None:
        st = self.st
        job, s = st.job, st.s
        early = waiting.control_verb(st.control0) or ("cancel" if job.cancel_requested else None)
        if waiting.stops_part(st.control0, st.n):
            st.body.update(outcome="cancelled", message=end_message("gang_stop") + " before it started")
            return
        if early in ("cancel", "preempt") or st.term.got:
            outcome = "cancelled" if early == "cancel" else "preempted"
            st.body.update(outcome=outcome, message=f"{outcome} before it started"
                           + (" (the node agent is stopping)" if st.term.got and early != "cancel" else ""))
            return
        if self.end.not_startable():
            return
        if st.env is None:    # AgentStore.claim could not read it: run without it, never (a wrong upgrade order)
            why = st.store.env_denied(job, s.node)
            log.error("job %s attempt %s not started: %s", job.id, st.n, why)
            raise launch.StartError(why)
        ident = st.ident = launch.identity(job, s)
        if len(st.part.nodes) > 1:
            st.part = gang.rendezvous(st.store, job.id, st.n, st.part, gang.node_addr(s.addr), RENDEZVOUS_S,
                                      self._rendezvous_stopped)
        out_fd, err_fd = launch.open_logs(job, ident, st.rank, s.node)
        try:
            try:
                ckpt = st.ckpt_dir = launch.checkpoint_dir(s, job, ident)
                script = launch.write_script(s, job, ident) if job.script else None
            except OSError as e:
                raise launch.StartError(f"cannot prepare the spool {s.spool}: {e}") from None
            cmd = launch.command(job, script)
            start = time.time()
            exported = replace(job, env=st.env)
            env = launch.environment(exported, job.attempts[-1], s, ident, start, ckpt, st.part)
            proctree.become_subreaper()
            st.ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self._limits()
            if self.end.not_startable():
                return
            self._spawn(cmd, env, ident, out_fd, err_fd)
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
        st.start, st.t0 = start, time.monotonic()
        st.body.update(start_time=start, ran=True)
        self.end.note_leader()
        self.end.announce()
        if st.gpu.gpus:
            # The GPUs' counters at the start (energy is a delta). What this first sample finds is
            # alerted like any other: the GPU then counts as alerted, and no later tick would say it.
            for alert in st.gpu.tick((st.proc.pid,)):
                self._post("alert", alert)
        self.end.finish(self._watch())

    # -- limits --------------------------------------------------------------------------------
    def _limits(self) -> None:
        """The job's cgroup where the agent found a delegated subtree; the watchdog for whatever
        memory limit the kernel will not enforce; the host OOM counters for the evidence."""
        st = self.st
        s, job = st.s, st.job
        if s.cgroup_base:
            cg = cgroup.JobCgroup.for_attempt(s.cgroup_base, job.id, st.n)
            try:
                cg.create(mem_max=st.mem_limit, cpus=job.cpus if s.limit_cpus else 0, pids_max=s.pids_max)
                st.cg = cg
            except OSError as e:
                log.warning("job %s: no cgroup at %s (%s); the runner enforces the memory limit", job.id, cg.path, e)
        if st.mem_limit > 0 and not (st.cg and "memory" in st.cg.controllers):
            st.watchdog = memwatch.Watchdog(st.mem_limit, probe.tree_pss)
        st.oom0, st.kmsg0 = memwatch.host_oom_kills(), memwatch.monotonic_us()

    def _spawn(self, cmd, env, ident, out_fd: int, err_fd: int) -> None:
        """The job is born in its cgroup (spawn.spawn: cloned into it, or the forked child writes
        itself into cgroup.procs before it execs the job), so this runner never moves. One that
        cannot be started there is not started at all (StartError: the attempt ends `error`)."""
        st = self.st
        procs = os.path.join(st.cg.path, "cgroup.procs") if st.cg is not None else ""
        st.proc = spawn.spawn(cmd, env, ident, st.job.workdir, out_fd, err_fd, st.job.umask,
                              cgroup_procs=procs)

    def _release_cgroup(self) -> None:
        st = self.st
        cg, st.cg = st.cg, None
        if cg is not None:
            if not st.tree_gone:
                cg.kill()
            cg.remove()

    # -- watching ------------------------------------------------------------------------------
    def _watch(self) -> str:
        """Why the attempt ended: "exited", or the stop reason once the tree is down (or its last
        stop phase has passed, after which _finish sends SIGKILL)."""
        st = self.st
        limit = st.job.time_limit
        deadline = st.t0 + limit if limit > 0 else math.inf
        warn_at = deadline - st.job.warn_signal[1] if st.job.warn_signal else math.inf
        tick_s = min(TICK, st.s.lease / 3)     # the lease must be re-read well within its length
        next_tick, stopping, kill_at, phases = st.t0 + tick_s, None, math.inf, []
        # The control watch starts once the job has run a moment: a job that ends at once never
        # pays for its thread and connection, and a push made before it starts waits in the list.
        watch_at = st.t0 + CONTROL_AFTER
        waiter, watch = waiting.LeaderWaiter(st.proc.pid, st.term.rfd), None
        try:
            while True:
                exited = waiter.exited()
                if exited and (stopping is None or not proctree.live_descendants()):
                    # The job's own exit, also when its agent died meanwhile (the job runs in this
                    # process, which only its own fencing could have killed it from): its outcome.
                    return stopping or "exited"
                st.term.drain()
                now = time.monotonic()
                if stopping and (st.term.orphaned or now >= st.lease_until):
                    return "orphaned" if st.term.orphaned else "fenced"    # no more grace: kill now
                if stopping and now >= kill_at:
                    if not phases:
                        return stopping
                    kill_at = self._signal_phase(stopping, phases, now)
                if now >= watch_at:
                    watch = waiting.ControlWatch(self.st)
                    watch.start()
                    watch_at = math.inf
                due = now >= next_tick
                if due:
                    next_tick = now + tick_s
                    self._tick()
                if stopping is None:
                    why = self._why_stop(now >= deadline, due or st.control_due)
                    if why in HARD:     # no grace: _finish kills at once; but a leader that exited since
                        # the look above (this runner frozen, its agent killed meanwhile) exited on its own
                        return "exited" if why in ("orphaned", "fenced") and waiter.exited() else why
                    if why:
                        stopping, phases = why, self._stop_phases(why)
                        first, grace = phases[0][0].name.removeprefix("SIG"), phases[0][1] if len(phases) > 1 else None
                        kill_at = self._signal_phase(why, phases, now)    # the signal first: the line must not delay it
                        self.end.say(jobmsg.stopped(why, st.job.display_id, st.s.node, time.time(), first, grace))
                if stopping is None and now >= warn_at:
                    name = st.job.warn_signal[0]
                    log.info("job %s attempt %d: SIG%s %ds before the limit", st.job.id, st.n, name,
                             st.job.warn_signal[1])
                    proctree.warn(st.proc.pid, getattr(signal, f"SIG{name}"), "batch" in st.job.warn_signal[2:])
                    warn_at = math.inf
                wake = max(min(next_tick, deadline, kill_at, warn_at, st.lease_until, watch_at)
                           - time.monotonic(), 0.0)
                waiter.wait(min(wake, STOP_POLL) if stopping else wake)
        finally:
            waiter.close()
            if watch is not None:
                watch.stop()

    def _signal_phase(self, why: str, phases: list, now: float) -> float:
        """Send the next stop signal to the tree; returns when the phase after it is due."""
        st = self.st
        sig, wait = phases.pop(0)
        st.stopped_at = st.stopped_at or time.time()
        log.info("job %s attempt %d: %s, %s to the tree, %ds before the next step", st.job.id, st.n, why,
                 sig.name, wait)
        proctree.signal_tree(st.proc.pid, sig)
        return now + wait

    def _why_stop(self, past_deadline: bool, check_control: bool) -> str | None:
        st = self.st
        if st.kill_now:
            return st.kill_now[0]
        if st.term.orphaned or os.getppid() != st.ppid:
            return "orphaned"         # the slot runner (and so the agent's supervision) is gone
        if time.monotonic() >= st.lease_until:
            return "fenced"
        if st.term.got:
            return "shutdown"
        if check_control:
            st.control_due = False
            ctl = self._control()
            if waiting.stops_part(ctl, st.n):
                return "gang_stop"
            if waiting.control_verb(ctl) == "cancel":
                return "cancelled"
            if waiting.control_verb(ctl) == "preempt":
                st.grace = waiting.control_grace(ctl)
                return "preempted"
        return "timeout" if past_deadline else None

    def _stop_phases(self, why: str) -> list:
        """The signals of a stop, each with the wait before the next (SIGKILL after the last).
        A preemption: the checkpoint signal (--signal's, else the QoS's, else TERM) and the grace
        (from the control; a node stop gives the QoS grace capped by worker.stop_grace), then SIGTERM
        and kill_wait. Everything else: SIGTERM and kill_wait."""
        st = self.st
        term = (signal.SIGTERM, st.s.kill_wait)
        if why not in ("preempted", "shutdown"):
            return [term]
        if why == "shutdown":
            grace = st.s.shutdown_grace(st.job.qos)
        else:
            grace = st.grace if st.grace is not None else st.s.kill_wait
        return [(getattr(signal, f"SIG{st.s.checkpoint_signal(st.job)}"), grace), term]

    def _rendezvous_stopped(self) -> str | None:
        """Why a part waiting for node rank 0 gives up, its outcome set: stopped (the stop's), or
        its node's lease or agent gone (nothing ran: a node failure, requeued). It heart-beats
        while it waits, as a running part does: its lease stays current and the scheduler and
        agent see it alive. (It read the lease once, with its claim, and gave up when that ran
        out, ending the gang `error`: the job F, though nothing had run.)"""
        st = self.st
        now = time.monotonic()
        if now >= st.waiting_beat:
            st.waiting_beat = now + min(1.0, st.s.lease / 3)
            try:
                st.lease_seen(now, st.store.heartbeat(st.job.id, st.n, st.s.node, rank=st.rank))
            except faults.ERRORS as e:       # the lease it saw last still bounds the wait
                log.warning("job %s: heartbeat failed: %s", st.job.id, e)
        ctl = self._control()
        if waiting.stops_part(ctl, st.n) or waiting.control_verb(ctl) in ("cancel", "preempt"):
            st.body["outcome"] = "preempted" if waiting.control_verb(ctl) == "preempt" else "cancelled"
            return f"stopped ({ctl})"
        if st.term.got or st.term.orphaned or time.monotonic() >= st.lease_until:
            st.body["outcome"] = "preempted" if st.term.got and not st.term.orphaned else "node_failure"
            return "the node agent is stopping or its lease lapsed"
        return None

    def _control(self) -> str | None:
        st = self.st
        try:
            return st.store.control(st.job.id, st.n, st.rank)
        except faults.ERRORS as e:
            log.warning("job %s: cannot read control: %s", st.job.id, e)
            return None

    def _tick(self) -> None:
        st = self.st
        pids = st.cg.pids() if st.cg is not None else st.table.pids()
        t = procscan.stats(pids, None if st.cg is not None else st.table, st.table.seen)
        st.peak_rss = max(st.peak_rss, t.max_rss_bytes)
        now = time.monotonic()
        if now >= st.next_pss:
            pss = probe.tree_pss(t.pids)
            # smaps_rollup walks page tables: for a very large job, sample less often so that PSS
            # never takes more than 0.5 % of a core.
            st.next_pss = now + max(PSS_EVERY, (time.monotonic() - now) * 200)
            st.peak_pss = max(st.peak_pss or 0, pss)
        if st.watchdog is not None and st.kill_now is None:
            why = st.watchdog.check(t.rss_bytes, t.pids)
            if st.watchdog.last_pss is not None:
                st.peak_pss = max(st.peak_pss or 0, st.watchdog.last_pss)
            if why:
                log.warning("job %s attempt %d: %s", st.job.id, st.n, why)
                st.kill_now = ("oom", why)
        for alert in st.gpu.tick(t.pids):
            self._post("alert", alert)
        if st.gpu.lost and st.kill_now is None:
            st.kill_now = ("gpu_lost", f"GPU {st.gpu.lost} was lost (NVML); the job was stopped and requeued")
        self.end.tick_checkpoint()
        if not st.announced:
            self.end.announce()
            return          # its post was this tick's heartbeat, or failed as one would
        try:
            sent = time.monotonic()
            st.lease_seen(sent, st.store.heartbeat(
                st.job.id, st.n, st.s.node, rank=st.rank, cpu_s=round(t.cpu_s, 3), rss=t.rss_bytes, procs=t.procs,
                ckpt=st.body.get("last_checkpoint") or ""))
        except faults.ERRORS as e:      # a Redis blip must not kill a running job (unless it outlasts the lease)
            log.warning("job %s: heartbeat failed: %s", st.job.id, e)

    def _post(self, kind: str, body: dict) -> None:
        st = self.st
        try:
            st.store.post(kind, st.job.id, st.n, st.s.node, body)
        except faults.ERRORS as e:
            log.warning("job %s: cannot post %s: %s", st.job.id, kind, e)
