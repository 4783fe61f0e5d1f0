"""The node agent: advertises this machine, holds its lease, and supervises `slots` RQ workers on
the node's queue. The jobs themselves are run by worker.runner inside those workers' horses.

Fencing: the scheduler requeues a node's jobs once its lease has expired, so jobs here must not
outlive the lease. If the agent cannot renew for two thirds of it, or finds it already gone, it
kills its workers; their runners see their parent die and kill the job trees.
"""
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from scheduler import sdnotify
from scheduler.config import Config
from scheduler.store import conn
from scheduler.store.agentside import AgentStore
from scheduler.store.keys import Keys
from scheduler.units import fmt_size

from . import launch, probe

log = logging.getLogger("labq.agent")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = 0.5            # supervision loop; lease renewal runs on its own schedule within it
QUICK_DEATH = 10.0    # a worker that dies sooner than this after starting counts as failing
MAX_BACKOFF = 30.0


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
        self.lease = float(cfg.node_lease)
        self.settings = launch.Settings(redis_url, cfg.prefix, self.name, float(cfg.kill_wait),
                                        os.path.expanduser(w["spool"]), w["run_as"], bool(w["allow_root"]))
        self.queue = Keys.rq_queue(self.name)
        self.store = AgentStore(conn.connect(redis_url), Keys(cfg.prefix))
        self._stop = threading.Event()
        self._next_renew = self._last_renew = 0.0
        self.fenced = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        # 0755: runners make per-job checkpoint dirs (0700, the user's) and scripts (0600) in here.
        os.makedirs(self.settings.spool, mode=0o755, exist_ok=True)
        self._register()
        now = time.monotonic()
        self._last_renew, self._next_renew = now, now + self.lease / 3
        for s in self.slots:
            self._spawn(s, now)
        models = sorted({g.model for g in self.gpus})
        log.info("node %s: %d CPUs, %s memory, %d GPUs%s, %d slots, queue %s", self.name, self.cpus,
                 fmt_size(self.mem), len(self.gpus), f" ({', '.join(models)})" if models else "",
                 len(self.slots), self.queue)

    def run(self) -> int:
        """Until stop() or SIGTERM/SIGINT; then stop the workers, give the lease up, return 0."""
        self.start()
        sdnotify.notify("READY=1")
        restore = self._catch_signals()
        try:
            while not self._stop.is_set():
                self.tick(time.monotonic())
                busy = sum(1 for s in self.slots if s.proc is not None and s.proc.poll() is None)
                sdnotify.notify(f"WATCHDOG=1\nSTATUS=node {self.name}: {busy}/{len(self.slots)} workers alive")
                self._stop.wait(TICK)
        finally:
            restore()
            sdnotify.notify("STOPPING=1")
            self.shutdown()
        return 0

    def stop(self) -> None:
        self._stop.set()

    def tick(self, now: float) -> None:
        """One round: renew the lease when due, restart workers that died. `now` is monotonic."""
        if now >= self._next_renew:
            self._renew(now)
        for s in self.slots:
            self._supervise(s, now)

    def shutdown(self) -> None:
        """Warm stop (idle workers exit, busy ones finish) for stop_timeout, then SIGKILL: their
        runners see the parent die and kill the job trees; we wait for those, then release."""
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        tree = [pid for p in procs for pid in probe.descendants(p.pid)]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        end = time.monotonic() + self.stop_timeout
        for p in procs:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d did not stop in %.0fs; killing it", p.pid, self.stop_timeout)
                p.kill()
                p.wait()
        if not probe.wait_gone(tree, self.settings.kill_wait + 5):
            log.warning("job processes still alive after the workers stopped")
        try:
            self.store.release(self.name)
        except conn.ERRORS as e:
            log.warning("could not release the lease (it will expire): %s", e)
        self.backend.close()
        log.info("node %s stopped", self.name)

    # -- lease ---------------------------------------------------------------------------------
    def _register(self) -> None:
        self.store.register(self.name, self.cpus, self.mem, len(self.slots), self.gpus, socket.gethostname(),
                            os.getpid(), self.lease)

    def _renew(self, now: float) -> None:
        try:
            if not self.store.renew(self.name, self.lease):
                # It expired under us: the scheduler may already have requeued our jobs elsewhere.
                log.error("node %s: lease found expired; stopping local jobs and registering again", self.name)
                self._fence(now)
                self._register()
            self._last_renew, self._next_renew, self.fenced = now, now + self.lease / 3, False
        except conn.ERRORS as e:
            log.warning("node %s: lease renewal failed: %s", self.name, e)
            self._next_renew = now + min(1.0, self.lease / 3)
            if now - self._last_renew > self.lease * 2 / 3 and not self.fenced:
                log.error("node %s: no lease renewal for %.0fs; stopping local jobs", self.name, now - self._last_renew)
                self._fence(now)

    def _fence(self, now: float) -> None:
        self.fenced = True
        for s in self.slots:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
            s.proc, s.failures, s.restart_at = None, 0, now

    # -- workers -------------------------------------------------------------------------------
    def _supervise(self, s: Slot, now: float) -> None:
        if s.proc is not None and s.proc.poll() is not None:
            lived = now - s.started
            s.failures = s.failures + 1 if lived < QUICK_DEATH else 0
            delay = min(2.0 ** (s.failures - 1), MAX_BACKOFF) if s.failures else 0.0
            log.warning("worker slot %d (pid %d) exited with %s after %.1fs; restarting in %.0fs",
                        s.index, s.proc.pid, s.proc.returncode, lived, delay)
            s.proc, s.restart_at = None, now + delay
        if s.proc is None and not self.fenced and now >= s.restart_at:
            self._spawn(s, now)

    def _spawn(self, s: Slot, now: float) -> None:
        env = dict(os.environ)        # the daemons' own environment; jobs get a clean one (launch.py)
        env.update(self.settings.environ(), LABQ_AGENT_PID=str(os.getpid()),
                   PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p))
        if self.config_path:
            env["LABQ_CONFIG"] = self.config_path
        argv = [sys.executable, "-m", "worker.rqworker", "--url", self.url, "--queue", self.queue,
                "--node", self.name, "--slot", str(s.index)]
        # Own process group: a terminal's Ctrl-C reaches only the agent, which stops them in order.
        s.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, close_fds=True, process_group=0)
        s.started = now

    def worker_pids(self) -> list[int]:
        return [s.proc.pid for s in self.slots if s.proc is not None and s.proc.poll() is None]

    def _catch_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        return lambda: [signal.signal(sig, h) for sig, h in old.items()]
