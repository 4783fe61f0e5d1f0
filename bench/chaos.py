"""The soak's faults (issue 35): kill -9 and SIGSTOP of every process between Redis and a job, and
Redis outages, each on the soak's own stack (cli/embedded.Stack), none on anything else.

  scheduler_kill  kill -9 of the leading `labq scheduler` (a standby runs beside it and takes over); a
                  new one started after 0.2-2 s, now the standby
  scheduler_stop  SIGSTOP of the leading scheduler past its leader lease (the first time, then four
                  times in five; else a pause inside it), SIGCONT once the standby has taken over: the resumed one must write
                  nothing (every commit is fenced by the lease) and step down, the standby leads on
  agent_kill      kill -9 of one node's `labq worker` (the agent; its runners must die with it); a new one
                  after 0.2-2 s
  agent_stop      SIGSTOP of one node's agent, SIGCONT after a pause (some longer than the node lease: its
                  runners must fence their jobs, nothing may start there until it is back)
  runner_kill     kill -9 of a slot runner, on any node (one running a job when there is one; half the
                  time one running a gang's part when there is one: every other part must end at once)
  gang_runner_kill  kill -9 of the runner of a gang's part (planned: waits up to a minute for one to
                  run; drawn: up to 5 s, the soak submits nothing meanwhile)
  runner_stop     SIGSTOP of a slot runner, SIGCONT after a pause (some longer than the node lease: the
                  agent kills a runner silent that long)
  redis_kill      kill -9 of the soak's private redis-server, restarted from its AOF after a pause
  redis_stop      SIGTERM (an orderly shutdown) of that redis-server, restarted the same way

A pause is long (node_lease + 1 s .. 3 x node_lease) two times in five, else 0.3 s .. 0.8 x node_lease.
Every fault is synchronous: the soak submits nothing while one is in progress (the daemons go on).
"""
import signal
import subprocess
import sys
import time

import psutil

from tests.harness import wait_for

KINDS = ("scheduler_kill", "scheduler_stop", "agent_kill", "agent_stop", "runner_kill", "gang_runner_kill",
         "runner_stop", "redis_kill", "redis_stop")
WEIGHTS = (2, 2, 2, 2, 2, 1, 2, 1, 1)
SCHEDULERS = ("scheduler", "standby")
FIXED = ((0.3, "scheduler_kill"), (0.6, "agent_kill"))
LONG_SHARE = 0.4


class Chaos:
    def __init__(self, e, rnd, t0: float, settle: float, agents: dict[str, str] | None = None):
        """`e`: the soak's E2E stack; `settle`: how long after a fault its consequences (node
        failures, requeues) may still disturb the guarantee watch; `agents`: node name -> config
        file of each agent beside the stack's own ("worker", node e2e-node), started by start_agent."""
        self.e, self.stack, self.client, self.cfg = e, e.stack, e.client, e.cfg
        self.rnd, self.t0, self.settle = rnd, t0, settle
        self.lease = float(self.cfg.node_lease)
        self.leader_lease = float(self.cfg.lease) or max(10.0, 3 * self.cfg.tick)
        self.agents = {self.cfg.worker.name: ""} | dict(agents or {})
        self.counts = {k: 0 for k in KINDS}
        self.long = {k: 0 for k in KINDS}     # pauses and outages longer than the node lease
        self.skipped: dict[str, int] = {}     # runner faults with no runner to hit
        self.windows: list[list[float]] = []  # [start, end] the guarantee watch leaves out
        # (node, kill -9 of its agent, its successor started)
        self.agent_dead: list[tuple[str, float, float]] = []
        # (node, SIGSTOP of its agent + the node lease, its SIGCONT): its lease lapsed, nothing may start there
        self.agent_frozen: list[tuple[str, float, float]] = []
        # each scheduler_stop: how long it was paused, how long the standby took to lead, whether the
        # resumed one stepped down (alive, not the leader) and whether it led again while resumed
        self.failovers: list[dict] = []
        # (Redis killed or stopped, Redis answering again), wall clock: a gang's stop cannot travel then
        self.redis_down: list[tuple[float, float]] = []
        # (the job processes under a runner, its SIGSTOP, its SIGCONT), wall clock: a stopped runner
        # cannot pass its gang part the stop order, so that part may outlive a failed peer meanwhile
        self.runner_frozen: list[tuple[frozenset[int], float, float]] = []
        self.gang_runner_kills = 0
        self.planned = False
        self.pauses: list[tuple[str, float]] = []
        self.restarted: list[tuple[str, str, int]] = []   # (daemon, after which fault, its exit status)

    def plan(self, start: float, seconds: float, fixed=FIXED) -> list[tuple[float, str, bool]]:
        """(monotonic time, kind, planned): the `fixed` faults at their share of the run (a scheduler kill at
        30% and an agent kill at 60% as before issue 35), and, in runs of 3 minutes and more, one
        fault every 10-40 s: each kind once in a shuffled first round, then drawn by WEIGHTS."""
        plan = [(start + share * seconds, kind, True) for share, kind in fixed]
        first = list(KINDS)
        self.rnd.shuffle(first)
        t = start
        while seconds >= 180 and t + 60 < start + seconds:
            t += self.rnd.uniform(10, 40)
            plan.append((t, first.pop() if first else self.rnd.choices(KINDS, WEIGHTS)[0], False))
        return sorted(plan)

    def pause(self) -> float:
        if self.rnd.random() < LONG_SHARE:
            return self.rnd.uniform(self.lease + 1, 3 * self.lease)
        return self.rnd.uniform(0.3, 0.8 * self.lease)

    def inject(self, kind: str, planned: bool = False) -> None:
        """`planned`: one of the run's fixed faults (it may wait longer for something to hit)."""
        self.planned = planned
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
        name = self._leading() or "scheduler"
        self._kill9(name)
        time.sleep(self.rnd.uniform(0.2, 2.0))
        self._start_scheduler(name)
        return name

    def _scheduler_stop(self) -> str | None:
        """The leader frozen past its lease (or, one time in five, within it), resumed once the
        standby leads: from its stamps nothing may change (the checks), and it must step down."""
        name = self._leading()
        if name is None:
            return None
        other = next(n for n in SCHEDULERS if n != name)
        old = self.client.store.r.get(self.client.k.leader)
        long = not self.failovers or self.rnd.random() < 0.8     # the first always past the lease
        pause = (self.rnd.uniform(self.leader_lease + 1, 3 * self.leader_lease) if long
                 else self.rnd.uniform(0.3, 0.8 * self.leader_lease))
        p = psutil.Process(self.stack.procs[name].pid)
        start = time.monotonic()
        with _gone():
            p.suspend()
        took = None
        try:
            if long:
                # the standby leads once the frozen one's lease lapses: wait for it (generously), then
                # hold the old one a while more, so that its resume meets a settled successor
                took = wait_for(lambda: _quiet(lambda: _taken(self.client.store.r.get(self.client.k.leader), old)),
                                120, 0.05, what=f"the standby to lead (see {self.e.log.name})") and \
                    time.monotonic() - start
            time.sleep(max(0.0, pause - (time.monotonic() - start)))
        finally:
            with _gone():
                p.resume()
        paused = time.monotonic() - start
        self._record("scheduler_stop", paused)
        if long:
            self._stepped_down(name, other, old, paused, took)
        return f"{name} {paused:.1f}s" + (f" (standby led after {took:.1f}s)" if took is not None else "")

    def _stepped_down(self, name: str, other: str, old: str, paused: float, took: float | None) -> None:
        """After its SIGCONT the old leader goes on (a standby now) and never holds the lease again
        while its successor lives: watched for two leases."""
        end = time.monotonic() + 2 * self.leader_lease
        led_again = False
        while time.monotonic() < end:
            now = _quiet(lambda: self.client.store.r.get(self.client.k.leader))
            led_again = led_again or (now == old and self.stack.procs[other].poll() is None)
            time.sleep(0.05)
        alive = self.stack.procs[name].poll() is None
        self.failovers.append({"scheduler": name, "paused_s": round(paused, 2),
                               "standby_led_after_s": None if took is None else round(took, 2),
                               "stepped_down": alive and not led_again, "led_again": led_again, "alive": alive})

    def _leading(self) -> str | None:
        """Which of the two schedulers holds the leader lease (its value names host:pid:nonce)."""
        who = _quiet(lambda: self.client.store.r.get(self.client.k.leader))
        pid = who.split(":")[1] if who and who.count(":") >= 2 else ""
        for name in SCHEDULERS:
            p = self.stack.procs.get(name)
            if p is not None and str(p.pid) == pid:
                return name
        return None

    def _agent(self) -> tuple[str, str]:
        """(node, its process name in the stack): one of the agents, drawn."""
        node = self.rnd.choice(sorted(self.agents))
        return node, self._proc(node)

    def _proc(self, node: str) -> str:
        return "worker" if node == self.cfg.worker.name else node

    def _agent_kill(self) -> str:
        node, name = self._agent()
        start = time.time()
        self._kill9(name)
        time.sleep(self.rnd.uniform(0.2, 2.0))
        self.agent_dead.append((node, start, time.time()))
        self._start_agent(node)
        return node

    def _agent_stop(self) -> str:
        pause = self.pause()
        node, name = self._agent()
        p = self.stack.procs[name]
        start = time.time()
        _stop_for(psutil.Process(p.pid), pause)
        if pause > self.lease:
            self.agent_frozen.append((node, start + self.lease, time.time()))
        self._record("agent_stop", pause)
        return f"{node} {pause:.1f}s"

    def _kill9(self, name: str) -> None:
        p = self.stack.procs[name]
        p.kill()
        p.wait(60)

    def _start_scheduler(self, name: str = "scheduler") -> None:
        self.stack.start(name, "scheduler")
        k = self.client.k
        wait_for(lambda: _quiet(lambda: self.client.store.r.get(k.leader)), 180, 0.1,
                 what=f"a leader (see {self.e.log.name})")

    def start_agent(self, node: str) -> None:
        """The node's agent, its output in the stack's one log (the other nodes' agents run the same
        `labq worker` with their own config file)."""
        if not self.agents[node]:
            self.stack.start("worker", "worker", *self.stack.worker_args)
            return
        self.stack.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "labq.cli.main", "--config", self.agents[node], "worker"],
            env=self.stack.env(), stdout=self.stack.log, stderr=self.stack.log, process_group=0)

    def _start_agent(self, node: str) -> None:
        self.start_agent(node)
        wait_for(lambda: _quiet(lambda: [n for n in self.client.nodes() if n.name == node and n.state == "up"]),
                 180, 0.1, what=f"agent {node} to register (see {self.e.log.name})")

    def _revive(self, kind: str) -> None:
        """A daemon that exited on its own (after a Redis outage, say) is started again, as systemd's
        Restart= would, and reported: the soak's report names each."""
        for name in (*SCHEDULERS, *(self._proc(n) for n in sorted(self.agents))):
            p = self.stack.procs.get(name)
            if p is not None and p.poll() is not None:
                self.restarted.append((name, kind, p.returncode))
                print(f"chaos: {name} exited ({p.returncode}) after {kind}; starting it again", file=sys.stderr)
                if name in SCHEDULERS:
                    self._start_scheduler(name)
                else:
                    self._start_agent(next(n for n in self.agents if self._proc(n) == name))

    # -- the runners -------------------------------------------------------------------------------
    def _runner(self) -> psutil.Process | None:
        """One of the agents' slot runners, chosen among those running a job when any is (half the
        time among those running a gang's part, when any is)."""
        try:
            kids = [c for n in self.agents for c in psutil.Process(self.stack.procs[self._proc(n)].pid).children()
                    if "labq.worker.slot" in " ".join(c.cmdline())]
            busy = [c for c in kids if c.children()]
            gang = [c for c in busy if any(" gang " in " ".join(d.cmdline()) for d in c.children(recursive=True))]
        except psutil.Error:
            return None
        pool = (gang if gang and self.rnd.random() < 0.5 else []) or busy or kids
        return self.rnd.choice(pool) if pool else None

    def _runner_kill(self) -> str | None:
        r = self._runner()
        if r is None:
            return None
        gang = _runs_gang(r)
        with _gone():
            r.kill()
        self.gang_runner_kills += gang
        return f"pid {r.pid}" + (" (a gang's part)" if gang else "")

    def _runner_stop(self) -> str | None:
        r = self._runner()
        if r is None:
            return None
        pause, below = self.pause(), frozenset()
        with _gone():
            below = frozenset(c.pid for c in r.children(recursive=True))
        t0 = time.time()
        _stop_for(r, pause)
        self.runner_frozen.append((below, t0, time.time()))
        self._record("runner_stop", pause)
        return f"pid {r.pid} {pause:.1f}s"

    def _gang_runner_kill(self) -> str | None:
        def running_gang():
            try:
                return [c for n in self.agents for c in psutil.Process(self.stack.procs[self._proc(n)].pid).children()
                        if "labq.worker.slot" in " ".join(c.cmdline()) and _runs_gang(c)]
            except psutil.Error:
                return []
        try:
            pool = wait_for(running_gang, 60 if self.planned else 5, 0.1, what="a gang's part to run")
        except AssertionError:      # no gang ran within a minute: reported as skipped
            return None
        r = self.rnd.choice(pool)
        with _gone():
            r.kill()
        self.gang_runner_kills += 1
        return f"pid {r.pid}"

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
        start, wall = time.monotonic(), time.time()
        p.send_signal(sig)
        p.wait(60)
        time.sleep(max(0.0, pause - (time.monotonic() - start)))
        self.stack.start_redis(timeout=120)
        self.redis_down.append((wall, time.time()))
        self._record(kind, time.monotonic() - start)
        return f"{time.monotonic() - start:.1f}s"

    def report(self) -> dict:
        return {"faults": dict(self.counts), "faults_longer_than_node_lease": dict(self.long),
                "faults_skipped": dict(self.skipped), "node_lease_s": self.lease,
                "daemons_restarted_after_exit": [list(r) for r in self.restarted],
                "agent_frozen_past_lease_s": round(sum(b - a for _, a, b in self.agent_frozen), 1),
                "runner_kills_of_gang_parts": self.gang_runner_kills, "scheduler_failovers": self.failovers,
                "failover_max_s": max((f["standby_led_after_s"] or 0 for f in self.failovers), default=0),
                "schedulers_not_stepped_down": sum(not f["stepped_down"] for f in self.failovers)}


def _runs_gang(r: psutil.Process) -> bool:
    try:
        return any(" gang " in " ".join(d.cmdline()) for d in r.children(recursive=True))
    except psutil.Error:
        return False


def _taken(now: str | None, old: str | None) -> bool:
    return bool(now) and now != old


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

