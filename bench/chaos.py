"""The soak's faults (issue 35): kill -9 and SIGSTOP of every process between Redis and a job, and
Redis outages, each on the soak's own stack (cli/embedded.Stack), none on anything else.

  scheduler_kill  kill -9 of `labq scheduler`; a new one started after 0.2-2 s
  agent_kill      kill -9 of `labq worker` (the agent; its runners must die with it); a new one after 0.2-2 s
  agent_stop      SIGSTOP of the agent, SIGCONT after a pause (some longer than the node lease: its
                  runners must fence their jobs, nothing may start there until it is back)
  runner_kill     kill -9 of a slot runner (one running a job when there is one)
  runner_stop     SIGSTOP of a slot runner, SIGCONT after a pause (some longer than the node lease: the
                  agent kills a runner silent that long)
  redis_kill      kill -9 of the soak's private redis-server, restarted from its AOF after a pause
  redis_stop      SIGTERM (an orderly shutdown) of that redis-server, restarted the same way

A pause is long (node_lease + 1 s .. 3 x node_lease) two times in five, else 0.3 s .. 0.8 x node_lease.
Every fault is synchronous: the soak submits nothing while one is in progress (the daemons go on).
"""
import signal
import sys
import time

import psutil

from tests.harness import wait_for

KINDS = ("scheduler_kill", "agent_kill", "agent_stop", "runner_kill", "runner_stop", "redis_kill", "redis_stop")
WEIGHTS = (2, 2, 2, 2, 2, 1, 1)
LONG_SHARE = 0.4


class Chaos:
    def __init__(self, e, rnd, t0: float, settle: float):
        """`e`: the soak's E2E stack; `settle`: how long after a fault its consequences (node
        failures, requeues) may still disturb the guarantee watch."""
        self.e, self.stack, self.client, self.cfg = e, e.stack, e.client, e.cfg
        self.rnd, self.t0, self.settle = rnd, t0, settle
        self.lease = float(self.cfg.node_lease)
        self.counts = {k: 0 for k in KINDS}
        self.long = {k: 0 for k in KINDS}     # pauses and outages longer than the node lease
        self.skipped: dict[str, int] = {}     # runner faults with no runner to hit
        self.windows: list[list[float]] = []  # [start, end] the guarantee watch leaves out
        self.agent_dead: list[tuple[float, float]] = []    # (kill -9 of the agent, its successor started)
        # (SIGSTOP of the agent + the node lease, its SIGCONT): its lease lapsed, nothing may start there
        self.agent_frozen: list[tuple[float, float]] = []
        self.pauses: list[tuple[str, float]] = []
        self.restarted: list[tuple[str, str, int]] = []   # (daemon, after which fault, its exit status)

    def plan(self, start: float, seconds: float) -> list[tuple[float, str]]:
        """(monotonic time, kind): a scheduler kill at 30% and an agent kill at 60% of the run (as
        before issue 35), and, in runs of 3 minutes and more, one fault every 10-40 s: each kind
        once in a shuffled first round, then drawn by WEIGHTS."""
        plan = [(start + 0.3 * seconds, "scheduler_kill"), (start + 0.6 * seconds, "agent_kill")]
        first = list(KINDS)
        self.rnd.shuffle(first)
        t = start
        while seconds >= 180 and t + 60 < start + seconds:
            t += self.rnd.uniform(10, 40)
            plan.append((t, first.pop() if first else self.rnd.choices(KINDS, WEIGHTS)[0]))
        return sorted(plan)

    def pause(self) -> float:
        if self.rnd.random() < LONG_SHARE:
            return self.rnd.uniform(self.lease + 1, 3 * self.lease)
        return self.rnd.uniform(0.3, 0.8 * self.lease)

    def inject(self, kind: str) -> None:
        start = time.time()
        window = [start, float("inf")]      # the guarantee watch leaves it out from the start
        self.windows.append(window)
        try:
            detail = getattr(self, "_" + kind)()
        finally:
            window[1] = time.time() + self.settle
        if detail is None:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            return
        self.counts[kind] += 1
        self._revive(kind)
        print(f"chaos: {kind} {detail} at +{start - self.t0:.0f}s", file=sys.stderr)

    def _record(self, kind: str, pause: float) -> None:
        self.pauses.append((kind, round(pause, 2)))
        if pause > self.lease:
            self.long[kind] += 1

    # -- the daemons -------------------------------------------------------------------------------
    def _scheduler_kill(self) -> str:
        self._kill9("scheduler")
        time.sleep(self.rnd.uniform(0.2, 2.0))
        self._start_scheduler()
        return ""

    def _agent_kill(self) -> str:
        start = time.time()
        self._kill9("worker")
        time.sleep(self.rnd.uniform(0.2, 2.0))
        self.agent_dead.append((start, time.time()))
        self._start_agent()
        return ""

    def _agent_stop(self) -> str:
        pause = self.pause()
        p = self.stack.procs["worker"]
        start = time.time()
        _stop_for(psutil.Process(p.pid), pause)
        if pause > self.lease:
            self.agent_frozen.append((start + self.lease, time.time()))
        self._record("agent_stop", pause)
        return f"{pause:.1f}s"

    def _kill9(self, name: str) -> None:
        p = self.stack.procs[name]
        p.kill()
        p.wait(60)

    def _start_scheduler(self) -> None:
        self.stack.start("scheduler", "scheduler")
        k = self.client.k
        wait_for(lambda: _quiet(lambda: self.client.r.get(k.leader)), 180, 0.1,
                 what=f"a leader (see {self.e.log.name})")

    def _start_agent(self) -> None:
        self.stack.start("worker", "worker", *self.stack.worker_args)
        wait_for(lambda: _quiet(lambda: [n for n in self.client.nodes() if n.state == "up"]), 180, 0.1,
                 what=f"the worker to register (see {self.e.log.name})")

    def _revive(self, kind: str) -> None:
        """A daemon that exited on its own (after a Redis outage, say) is started again, as systemd's
        Restart= would, and reported: the soak's report names each."""
        for name in ("scheduler", "worker"):
            p = self.stack.procs.get(name)
            if p is not None and p.poll() is not None:
                self.restarted.append((name, kind, p.returncode))
                print(f"chaos: {name} exited ({p.returncode}) after {kind}; starting it again", file=sys.stderr)
                (self._start_scheduler if name == "scheduler" else self._start_agent)()

    # -- the runners -------------------------------------------------------------------------------
    def _runner(self) -> psutil.Process | None:
        """One of the agent's slot runners, chosen among those running a job when any is."""
        try:
            kids = [c for c in psutil.Process(self.stack.procs["worker"].pid).children()
                    if "labq.worker.slot" in " ".join(c.cmdline())]
            busy = [c for c in kids if c.children()]
        except psutil.Error:
            return None
        pool = busy or kids
        return self.rnd.choice(pool) if pool else None

    def _runner_kill(self) -> str | None:
        r = self._runner()
        if r is None:
            return None
        with _gone():
            r.kill()
        return f"pid {r.pid}"

    def _runner_stop(self) -> str | None:
        r = self._runner()
        if r is None:
            return None
        pause = self.pause()
        _stop_for(r, pause)
        self._record("runner_stop", pause)
        return f"pid {r.pid} {pause:.1f}s"

    # -- Redis -------------------------------------------------------------------------------------
    def _redis_kill(self) -> str:
        return self._outage(signal.SIGKILL, "redis_kill")

    def _redis_stop(self) -> str:
        return self._outage(signal.SIGTERM, "redis_stop")

    def _outage(self, sig, kind: str) -> str:
        """Redis away for a pause, then restarted on the same socket from its AOF (appendfsync
        always: nothing it acknowledged is lost)."""
        pause = self.pause()
        p = self.stack.procs["redis"]
        start = time.monotonic()
        p.send_signal(sig)
        p.wait(60)
        time.sleep(max(0.0, pause - (time.monotonic() - start)))
        self.stack.start_redis(timeout=120)
        self._record(kind, time.monotonic() - start)
        return f"{time.monotonic() - start:.1f}s"

    def report(self) -> dict:
        return {"faults": dict(self.counts), "faults_longer_than_node_lease": dict(self.long),
                "faults_skipped": dict(self.skipped), "node_lease_s": self.lease,
                "daemons_restarted_after_exit": [list(r) for r in self.restarted],
                "agent_frozen_past_lease_s": round(sum(b - a for a, b in self.agent_frozen), 1)}


def _stop_for(p: psutil.Process, pause: float) -> None:
    with _gone():
        p.suspend()
    try:
        time.sleep(pause)
    finally:
        with _gone():
            p.resume()


class _gone:
    """A process that exited meanwhile (the agent killed a stopped runner): nothing to signal."""

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        return kind is not None and issubclass(kind, psutil.NoSuchProcess)


def _quiet(read):
    try:
        return read()
    except Exception:       # Redis restarting: not yet
        return None

