"""The node agent: advertises this machine, holds its lease, and supervises `slots` persistent
runners (labq.worker.slot) that take attempts from the node's dispatch list, `labq:dispatch:<node>`.
Each attempt runs inside its slot's runner (labq.worker.runner), one at a time.

Fencing: the scheduler requeues a node's jobs only after its lease has expired plus
scheduler.fence_margin, so jobs here must not outlive the lease. Every hop between the agent and a
job dies with its parent (PR_SET_PDEATHSIG); the runners also watch the lease themselves (an agent
stopped with SIGSTOP cannot renew, nor kill anything). If the agent cannot renew for two thirds of
the lease, or finds it already gone, it kills its runners, whose jobs die with them (and whatever
of a job escaped its session comes to the agent, a subreaper, which kills it).

Stopping (SIGTERM, `systemctl stop`): no worker takes a new job, and every running job is
preempted exactly as a preempt control would: its checkpoint signal, its QoS grace (capped by
worker.stop_grace), SIGKILL, outcome `preempted`, so the scheduler requeues it. Then the lease is
given up. TimeoutStopSec must exceed stop_grace + kill_wait + a margin.
"""
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace

from labq.scheduler.daemon import sdnotify
from labq.scheduler.settings.config import Config
from labq.scheduler.store import faults
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from labq.scheduler.units import fmt_size

from . import cgroup, deadslot, exitwatch, gang, gpuwatch, launch, probe, proctree, results, shimbin

log = logging.getLogger("labq.agent")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = 0.5            # supervision loop; lease renewal runs on its own schedule within it
QUICK_DEATH = 10.0    # a runner that dies sooner than this after starting counts as failing
MAX_BACKOFF = 30.0
STOP_MARGIN = 15.0    # beyond grace + kill_wait: the runners' last reaping and their `finished` posts


@dataclass
class Slot:
    index: int
    proc: subprocess.Popen | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float = 0.0


class Agent:
    def __init__(self, cfg: Config, redis_url: str, config_path: str | None = None, stop_timeout: float = 10.0):
        w = cfg.worker
        self.cfg, self.url, self.config_path, self.stop_timeout = cfg, redis_url, config_path, stop_timeout
        self.name = w["name"] or socket.gethostname()
        self.cpus = probe.host_cpus() if w["cpus"] == "auto" else int(w["cpus"])
        self.mem = probe.host_mem() if w["mem"] == "auto" else int(w["mem"])
        self.backend = probe.make_gpu_backend(w["gpus"], self.name, w["gpu_model"])
        self.gpus = self.backend.devices()
        self.slots = [Slot(i) for i in range(w["slots"] or self.cpus)]
        self.exited: dict[int, tuple[int, float]] = {}   # pid -> (wait status, when) of jobs' reaped leaders
        self.lease = float(cfg.node_lease)
        self.settings = launch.Settings(
            redis_url, cfg.prefix, self.name, float(cfg.kill_wait), os.path.expanduser(w["spool"]), w["run_as"],
            bool(w["allow_root"]), limit_cpus=bool(w["limit_cpus"]), pids_max=int(w["pids_max"]),
            idle_gpu_util=float(w["idle_gpu_util"]), idle_gpu_after=float(w["idle_gpu_after"]),
            stop_grace=float(w["stop_grace"]), qos_grace=tuple((q.name, int(q.grace)) for q in cfg.qos),
            slurm_env=bool(w["slurm_env"]), qos_signal=tuple((q.name, q.signal) for q in cfg.qos), lease=self.lease,
            addr=gang.node_addr(w["addr"]), pbs_env=bool(w["pbs_env"]), sge_env=bool(w["sge_env"]))
        # This incarnation's token: the lease's value. Runners of an earlier one (it died) see
        # another epoch there and claim nothing; the scheduler takes a lease of another epoch for down.
        self.epoch = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.settings = replace(self.settings, epoch=self.epoch, agent_pid=os.getpid())
        self.queue = Keys(cfg.prefix).dispatch(self.name)
        self.store = AgentStore.open(redis_url, cfg.prefix)
        self._stop = threading.Event()
        self._next_renew = self._last_renew = 0.0
        self.fenced = False
        self.delegation: cgroup.Delegation | None = None
        self.monitor: gpuwatch.Monitor | None = None
        self.lost_gpus: set[str] = set()
        self.exit_watch: exitwatch.Watch | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        # 0755: runners make per-job checkpoint dirs (0700, the user's) and scripts (0600) in here.
        os.makedirs(self.settings.spool, mode=0o755, exist_ok=True)
        self.settings = replace(self.settings, compat_bin=shimbin.for_jobs(self.settings.spool, self.cfg.worker))
        self._setup_cgroups()      # before any runner exists: under systemd we move into a leaf first
        # Orphans of a runner killed outright come to us, not to PID 1: reaped (and killed) here.
        proctree.become_subreaper()
        self.exit_watch = exitwatch.Watch(self.settings.spool)     # times its runners' jobs' ends
        self.exit_watch.start()
        self._register()
        self.store.reset_runners(self.name)
        now = time.monotonic()
        self._last_renew, self._next_renew = now, now + self.lease / 3
        for s in self.slots:
            self._spawn(s, now)
        if self.gpus:
            self.monitor = gpuwatch.Monitor(self.backend, gpuwatch.snapshot_path(self.settings.spool), self.name)
            self.monitor.start()
        for index, err in getattr(self.backend, "broken", []):
            self._alert("gpu_lost", f"GPU {index} on node {self.name} failed to initialise ({err}); it is not offered",
                        gpu_index=index, error=err)
        models = sorted({g.model for g in self.gpus})
        log.info("node %s: %d CPUs, %s memory, %d GPUs%s, %d slots, queue %s", self.name, self.cpus,
                 fmt_size(self.mem), len(self.gpus), f" ({', '.join(models)})" if models else "",
                 len(self.slots), self.queue)

    def _setup_cgroups(self) -> None:
        d, why = cgroup.detect(self.cfg.worker["cgroups"], self.name, instance=f"{self.cfg.prefix}@{self.url}")
        if d is None:
            log.info("no job cgroups (%s): the runners enforce memory limits themselves", why)
            return
        self._await_old_runners(d.base)
        swept = cgroup.sweep(d.base)
        if swept:
            log.warning("removed %d job cgroups left by an earlier agent: %s", len(swept), ", ".join(swept))
        log.info("%s", d.describe())
        self.delegation = d
        self.settings = replace(self.settings, cgroup_base=d.base)

    def _await_old_runners(self, base: str, most: float = 10.0) -> None:
        """A runner orphaned by the previous agent's death fences its own job within a tick or two
        and reports the attempt as a node failure. Sweeping its cgroup first would kill the job
        under a live runner, which would then report it as the job's own exit (`F`, not requeued)."""
        deadline = time.monotonic() + most
        for name in cgroup.job_names(base):
            jid, _, n = name[len(cgroup.JOB_PREFIX):].partition("-a")
            if not (jid.isdigit() and n.isdigit()):
                continue
            try:
                claim = self.store.claimed_by(int(jid), int(n)) or ""
            except faults.ERRORS:
                return
            node, _, pid = claim.rpartition(":")
            while node == self.name and pid.isdigit() and proctree.alive(int(pid)) and time.monotonic() < deadline:
                time.sleep(0.1)

    def run(self) -> int:
        """Until stop() or SIGTERM/SIGINT; then stop the workers, give the lease up, return 0."""
        self.start()
        sdnotify.notify("READY=1")
        restore = self._catch_signals()
        # A runner's death wakes the loop at once (SIGCHLD): a gang's other parts wait on its end.
        waker = deadslot.Waker() if threading.current_thread() is threading.main_thread() else None
        try:
            while not self._stop.is_set():
                self.tick(time.monotonic())
                busy = sum(1 for s in self.slots if s.proc is not None and s.proc.poll() is None)
                sdnotify.notify(f"WATCHDOG=1\nSTATUS=node {self.name}: {busy}/{len(self.slots)} runners alive")
                (waker.wait if waker else self._stop.wait)(TICK)
        finally:
            if waker is not None:
                waker.close()
            restore()
            sdnotify.notify("STOPPING=1")
            self.shutdown()
        return 0

    def stop(self) -> None:
        self._stop.set()

    def tick(self, now: float) -> None:
        """One round: renew the lease when due, restart runners that died, reap or kill the orphans
        they left. `now` is monotonic."""
        if now >= self._next_renew:
            self._renew(now)
            self._check_attempts()
            self._purge_spool()
        for s in self.slots:
            self._supervise(s, now)
        self._reap_strays(now)
        if self.monitor is not None:
            self._check_gpus()

    def shutdown(self) -> None:
        """Stop taking jobs and preempt the running ones: SIGTERM to each runner, which preempts
        its attempt (checkpoint signal, grace, TERM, kill_wait, KILL, outcome `preempted`). Wait for
        them, bounded by that; then SIGKILL what is left: their jobs' leaders die with them, and
        what escaped comes to us and is killed. Then give the lease up."""
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        busy = [p for p in procs if proctree.children(p.pid)]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        budget = self.stop_budget()
        # Tell systemd the stop takes this long at most (it also caps it at TimeoutStopSec).
        sdnotify.notify(f"EXTEND_TIMEOUT_USEC={int((budget + STOP_MARGIN) * 1e6)}")
        end, tree = time.monotonic() + budget, set()
        while True:
            alive = [p for p in procs if p.poll() is None]
            for p in alive:
                tree.update(proctree.descendants(p.pid))
            if not alive or time.monotonic() >= end:
                break
            time.sleep(0.05)
        for p in alive:
            log.warning("runner pid %d did not stop in %.0fs; killing it", p.pid, budget)
            p.kill()
            p.wait()
        self._reap_strays(time.monotonic())     # what of their jobs escaped to us
        if busy:
            log.info("node %s: preempted %d running job(s) for the stop", self.name, len(busy))
        if not probe.wait_gone(sorted(tree), self.settings.kill_wait + 5):
            log.warning("job processes still alive after the runners stopped")
        self._close()

    def stop_budget(self) -> float:
        """How long a stop may take: the longest grace a running job can get, kill_wait, a margin."""
        graces = [g for _, g in self.settings.qos_grace] or [self.settings.stop_grace]
        return min(max(graces), self.settings.stop_grace) + self.settings.kill_wait + self.stop_timeout

    def _close(self) -> None:
        if self.exit_watch is not None:
            self.exit_watch.stop()
        if self.monitor is not None:
            self.monitor.stop()
        if self.delegation is not None:
            cgroup.release(self.delegation)     # its job cgroups swept, then its own subtree
        try:
            self.store.release(self.name)
        except faults.ERRORS as e:
            log.warning("could not release the lease (it will expire): %s", e)
        self.backend.close()
        log.info("node %s stopped", self.name)

    # -- GPUs ----------------------------------------------------------------------------------
    def _check_gpus(self) -> None:
        """A GPU NVML reports lost leaves service: an alert, and the node re-registered without
        it, so nothing new is placed there. Its job's runner sees it in the snapshot and stops
        the job as a node failure (requeued). A changed device list (MIG instances reconfigured)
        is re-registered as well."""
        new = {u: why for u, why in self.monitor.lost.items() if u not in self.lost_gpus}
        changed = self.monitor.changed
        if not new and not changed:
            return
        out = self.lost_gpus | set(new)
        gpus = [g for g in (self.backend.devices() if changed else self.gpus) if g.uuid not in out]
        try:
            self.store.register(self.name, self.cpus, self.mem, len(self.slots), gpus, socket.gethostname(),
                                os.getpid(), self.lease, runs=launch.runs_for(self.settings), addr=self.settings.addr,
                                epoch=self.epoch)
        except faults.ERRORS as e:
            log.warning("node %s: cannot re-register its GPUs yet: %s", self.name, e)
            return
        self.gpus, self.monitor.changed = gpus, False
        for u, why in new.items():
            self.lost_gpus.add(u)
            self._alert("gpu_lost", f"GPU {u} on node {self.name} is lost ({why}): out of service until the "
                        f"agent restarts; a job on it is requeued", gpu=u, error=why)
        if changed:
            self._alert("gpu_changed", f"the GPUs of node {self.name} changed (MIG reconfigured?): now "
                        f"{', '.join(g.uuid for g in gpus) or 'none'}", level="warn", gpus=[g.uuid for g in gpus])

    def _alert(self, kind: str, message: str, level: str = "error", **data) -> None:
        body = {"kind": kind, "scope": f"node:{self.name}", "level": level, "message": message,
                "data": {"node": self.name, **data}}
        log.error("%s", message)
        try:
            self.store.post("alert", 0, 0, self.name, body)
        except faults.ERRORS as e:
            log.warning("cannot post the alert: %s", e)

    # -- lease ---------------------------------------------------------------------------------
    def _register(self) -> None:
        self.store.register(self.name, self.cpus, self.mem, len(self.slots), self.gpus, socket.gethostname(),
                            os.getpid(), self.lease, runs=launch.runs_for(self.settings), addr=self.settings.addr,
                            epoch=self.epoch)

    def _renew(self, now: float) -> None:
        try:
            if not self.store.renew(self.name, self.lease, self.epoch):
                # It expired under us: the scheduler may already have requeued our jobs elsewhere.
                log.error("node %s: lease found expired; stopping local jobs and registering again", self.name)
                self._fence(now)
                self._register()
            fenced, self._last_renew, self._next_renew, self.fenced = self.fenced, now, now + self.lease / 3, False
            if fenced:      # now, not by each slot's next runner: under load they start seconds later
                for s in self.slots:   # and the scheduler would have declared the attempts lost meanwhile
                    for raw in self.store.taken(self.name, s.index):
                        deadslot.end(self.store, self.settings, s.index, raw, exited=self.exited)
        except faults.ERRORS as e:
            log.warning("node %s: lease renewal failed: %s", self.name, e)
            self._next_renew = now + min(1.0, self.lease / 3)
            if now - self._last_renew > self.lease * 2 / 3 and not self.fenced:
                log.error("node %s: no lease renewal for %.0fs; stopping local jobs", self.name, now - self._last_renew)
                self._fence(now)

    def _fence(self, now: float) -> None:
        """Kill the runners: their jobs die with them. Not one holding a finished attempt's result,
        nor one whose job has exited (deadslot.fence): its job is over, and the result must reach the
        scheduler, however late."""
        self.fenced = True
        for s in self.slots:
            if s.proc is not None and s.proc.poll() is None:
                if not deadslot.fence(self.settings.spool, s.index, s.proc.pid):
                    log.warning("node %s: runner pid %d holds a finished result or a job that ended; left to "
                                "post it", self.name, s.proc.pid)
                    continue
                s.proc.kill()
                s.proc.wait()
                # its job died with it now; its attempt is ended once Redis is back, as of now
                results.mark_death(self.settings.spool, s.index, s.proc.pid, time.time())
            s.proc, s.failures, s.restart_at = None, 0, now

    # -- runners -------------------------------------------------------------------------------
    def _supervise(self, s: Slot, now: float) -> None:
        if s.proc is not None and s.proc.poll() is not None:
            lived = now - s.started
            s.failures = s.failures + 1 if lived < QUICK_DEATH else 0
            delay = min(2.0 ** (s.failures - 1), MAX_BACKOFF) if s.failures else 0.0
            log.warning("runner slot %d (pid %d) exited with %s after %.1fs; restarting in %.0fs",
                        s.index, s.proc.pid, s.proc.returncode, lived, delay)
            try:        # what it died with ends now; if Redis fails, its successor ends it
                self._reap_strays(now)      # its job's leader, if it had exited, and how
                for raw in self.store.taken(self.name, s.index):
                    deadslot.end(self.store, self.settings, s.index, raw, exited=self.exited)
            except faults.ERRORS as e:
                log.warning("node %s: cannot end slot %d's attempt yet: %s", self.name, s.index, e)
                results.mark_death(self.settings.spool, s.index, s.proc.pid, now)
            s.proc, s.restart_at = None, now + delay
        if s.proc is None and not self.fenced and now >= s.restart_at:
            self._spawn(s, now)

    def _spawn(self, s: Slot, now: float) -> None:
        """Start slot `s`'s runner. Its settings, the Redis URL with any password among them, go
        over a pipe: never argv (anyone can read it) nor an environment."""
        env = {k: v for k, v in os.environ.items() if k != "LABQ_REDIS_URL"}   # jobs get a clean one anyway
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        # Own process group: a terminal's Ctrl-C reaches only the agent, which stops them in order.
        s.proc = subprocess.Popen([sys.executable, "-m", "labq.worker.slot"], env=env, stdin=subprocess.PIPE,
                                  close_fds=True, process_group=0)
        line = json.dumps({**asdict(self.settings), "slot": s.index, "agent_pid": os.getpid()})
        try:
            s.proc.stdin.write(line.encode() + b"\n")
            s.proc.stdin.close()
        except BrokenPipeError:
            pass          # it died at once; supervision restarts it
        s.started = now

    def _check_attempts(self) -> None:
        """Kill the tree of an attempt runner that stopped heart-beating (SIGSTOPped, hung), or never
        beat since its claim: its job must not run on while the scheduler declares the attempt lost
        (node_lease + fence_margin without a heartbeat, or since the claim). SIGKILL reaches a
        stopped process; its slot runner then reports it."""
        try:
            stale = deadslot.silent(self.store, self.name, self.lease)
        except (faults.ERRORS + (ValueError, IndexError)) as e:
            log.warning("node %s: cannot check the runners' heartbeats: %s", self.name, e)
            return
        ours = set(proctree.children(os.getpid()))
        for ref, pid, age in stale:
            # Not a live runner of ours (dead: its pid may be reused), or holding a result to post.
            if pid not in ours or not results.stop_unless_holding(self.settings.spool, pid):
                continue
            if deadslot.kill_unless_over(pid):
                log.error("node %s: the runner of job %s (pid %d) has not heart-beaten for %.1fs; killed it and "
                          "its job", self.name, ref, pid, age)
            else:
                log.warning("node %s: the runner of job %s (pid %d), silent %.1fs, has a job that ended: resumed "
                            "to post its outcome", self.name, ref, pid, age)

    def _purge_spool(self) -> None:
        try:
            purge_spool(self.store, self.name, self.settings.spool)
        except (faults.ERRORS + (OSError,)) as e:     # the next round tries again: the ids stay listed
            log.warning("node %s: cannot clean archived jobs from the spool: %s", self.name, e)

    def _reap_strays(self, now: float) -> None:
        deadslot.reap_strays({s.proc.pid for s in self.slots if s.proc is not None}, self.exited)

    def _catch_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        return lambda: [signal.signal(sig, h) for sig, h in old.items()]


def purge_spool(store: AgentStore, node: str, spool: str) -> int:
    """Remove the spool files (stored script, checkpoints) of jobs the scheduler archived, then take
    them off this node's list: a crash in between only removes them again."""
    ids = store.purge_list(node)
    for jid in ids:
        launch.remove_spool(spool, jid)
    store.purged(node, ids)
    return len(ids)
