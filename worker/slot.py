"""A persistent runner: one per slot (`worker.slots`), started and supervised by the node agent.

`python -m labq.worker.slot` reads its settings (the Redis URL with its password among them) as
one JSON line on stdin from the agent, never from argv or an environment a job could inherit.
It then loops: BLMOVE an entry "<job>:<attempt>" from the node's dispatch list into this slot's
own list, fork a child that runs the attempt (worker/runner.py), wait for it, drop the entry. An
entry left in the slot's list by a runner that died is taken up again by the next one: run if no
runner claimed it yet, dropped otherwise.

Fencing, each hop dying with its parent (PR_SET_PDEATHSIG):
- agent → this runner (probe.PARENT_DIED): kill the attempt's whole tree at once, report, exit;
- this runner → the attempt child (PARENT_DIED): the child kills its job's tree and reports a node failure;
- the attempt child → the job's leader (SIGKILL, set after the user switch so that it sticks).
This runner is a child subreaper: processes of a job whose attempt child was killed outright are
reparented here, and killed before the slot takes the next attempt.
"""
import contextlib
import json
import logging
import os
import signal
import sys
import time

from labq.scheduler import dispatch
from labq.scheduler.store import conn
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys

from . import cgroup, launch, probe, runner

log = logging.getLogger("labq.slot")

BLOCK_S = 5.0          # one blocking pop; between pops the runner re-checks its agent


class _Stop(Exception):
    """Raised from the SIGTERM handler while idle: stop taking attempts."""


class SlotRunner:
    def __init__(self, s: launch.Settings, slot: int, agent_pid: int):
        self.s, self.slot, self.agent_pid = s, slot, agent_pid
        self.store = AgentStore(conn.connect(s.redis_url), Keys(s.prefix))
        self.child: int | None = None
        self.current: tuple[int, int] | None = None
        self.stopping = self.orphaned = False

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(probe.PARENT_DIED, self._on_parent_died)
        signal.signal(signal.SIGINT, signal.SIG_IGN)      # a terminal's Ctrl-C is for the agent
        try:
            self._state("starting")
            for raw in self.store.taken(self.s.node, self.slot):
                self._handle(raw, resumed=True)
            while not (self.stopping or self.orphaned):
                self._state("idle")
                raw = self.store.take(self.s.node, self.slot, BLOCK_S)
                if raw is not None:
                    self._handle(raw)
                if os.getppid() != self.agent_pid:
                    self.orphaned = True
        except _Stop:
            pass    # an orderly stop: fall through to the slot's shutdown below
        except conn.ERRORS as e:
            log.error("slot %d: Redis: %s; exiting (the agent restarts this runner)", self.slot, e)
            return 1
        with contextlib.suppress(*conn.ERRORS):
            self._state("stopped")
        return 0

    def _on_parent_died(self, *_):
        """The agent is gone: its lease will lapse, so nothing may outlive it here."""
        self.orphaned = True
        self._kill_tree(reap=False)
        if self.child is None:
            raise _Stop

    def _on_term(self, *_):
        if os.getppid() != self.agent_pid:
            self._on_parent_died()
            return
        self.stopping = True
        if self.child is None:
            raise _Stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child, signal.SIGTERM)     # the agent's orderly stop: the runner preempts its job

    def _state(self, what: str) -> None:
        self.store.runner_state(self.s.node, self.slot, f"{what} pid={os.getpid()}")

    # -- one attempt ---------------------------------------------------------------------------
    def _handle(self, raw: str, resumed: bool = False) -> None:
        got = dispatch.parse(raw)
        if got is None:
            log.warning("slot %d: dropped a malformed dispatch entry %r", self.slot, raw[:80])
        elif resumed and self.store.claimed_by(*got) is not None:
            log.warning("slot %d: job %d attempt %d was claimed by a runner that died; its end is "
                        "reported by that runner's child or as a lost attempt", self.slot, *got)
        else:
            self.current = got
            self._state(f"running {got[0]}.{got[1]}")
            status = self._fork(*got)
            self._after(got, status)
            self.current = None
        self.store.done(self.s.node, self.slot, raw)

    def _fork(self, jid: int, attempt: int) -> int:
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(probe.PARENT_DIED, signal.SIG_DFL)
                probe.die_with_parent(probe.PARENT_DIED)
                if os.getppid() == me:
                    runner.run_job(jid, attempt, self.s)
                    code = 0
            except BaseException:
                log.exception("job %d attempt %d: runner failed", jid, attempt)
            finally:
                logging.shutdown()
                os._exit(code)
        self.child = pid
        try:
            while True:
                try:
                    _, status = os.waitpid(pid, 0)
                    return status
                except InterruptedError:
                    continue
        finally:
            self.child = None

    def _after(self, got: tuple[int, int], status: int) -> None:
        """The attempt child is gone: kill whatever of its job is left, and report a node failure if
        the child died without reporting (killed outright); a duplicate `finished` is ignored."""
        self._kill_tree()
        if os.WIFSIGNALED(status):
            sig = signal.Signals(os.WTERMSIG(status)).name
            log.error("slot %d: the runner of job %d attempt %d was killed by %s", self.slot, *got, sig)
            why = "orphaned" if self.orphaned else "runner_killed"
            body = {"outcome": "node_failure", "exit_code": None, "signal": None, "start_time": None,
                    "end_time": time.time(), "usage": {}, "message": runner.end_message(why, sig)}
            with contextlib.suppress(*conn.ERRORS):
                self.store.post("finished", got[0], got[1], self.s.node, body)

    def _kill_tree(self, reap: bool = True) -> None:
        """SIGKILL every descendant (the attempt child first, so it cannot report its job's death
        as the job's own exit) and the attempt's cgroup; reap what was ours. Not reaping while
        the attempt child lives: _fork's waitpid must get its status."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        if probe.has_children():
            probe.signal_tree(None, signal.SIGKILL)
        if self.current and self.s.cgroup_base:
            cg = cgroup.JobCgroup.for_attempt(self.s.cgroup_base, *self.current)
            if os.path.isdir(cg.path):
                cg.kill()
        while reap:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                if not probe.has_children():
                    return
                time.sleep(0.01)     # killed, not yet reaped


def main() -> int:
    probe.die_with_parent(probe.PARENT_DIED)
    cfg = json.loads(sys.stdin.readline())
    agent = int(cfg.pop("agent_pid"))
    if os.getppid() != agent:
        return 1                       # the agent died before PDEATHSIG was armed
    slot = int(cfg.pop("slot"))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s labq.slot[{slot}] %(levelname)s %(message)s")
    probe.become_subreaper()
    return SlotRunner(launch.Settings.from_dict(cfg), slot, agent).run()


if __name__ == "__main__":
    sys.exit(main())
