"""A persistent runner: one per slot (`worker.slots`), started and supervised by the node agent.

`python -m labq.worker.slot` reads its settings (the Redis URL with its password among them) as
one JSON line on stdin from the agent, never from argv or an environment a job could inherit.
It then loops: BLMOVE an entry "<job>:<attempt>" from the node's dispatch list into this slot's
own list, run the attempt in this process (worker/runner.py), which drops the entry with its last
write. An entry left in the slot's list by a runner that died is taken up by the next one: run if
no runner claimed it yet; otherwise the dead runner's attempt is ended as a node failure.

Attempts run here, not in a fork per attempt: a trivial job's fork, its fresh Redis connection
and the child's exit cost about 7 ms of its ~25 ms of CPU (issue 12), and one process fewer per
job is one hop fewer to fence. Fencing, each hop dying with its parent (PR_SET_PDEATHSIG):
- agent → this runner (proctree.PARENT_DIED): an idle runner exits; a busy one kills its job's tree
  at once (the attempt ends `orphaned`, a node failure) and exits;
- this runner → the job's leader (SIGKILL, armed after the user switch so that it sticks).
This runner is a child subreaper: a job's escaped processes come back to it and die with the
attempt; if this runner is killed outright they go to the agent, which kills them at once.
"""
import contextlib
import json
import logging
import os
import signal
import sys
import time

from labq.scheduler.store import dispatchq, faults
from labq.scheduler.store.agentside import AgentStore, SlotRef

from . import cgroup, deadslot, launch, proctree, results, runner, spawn

log = logging.getLogger("labq.slot")

BLOCK_S = 5.0          # one blocking pop; between pops the runner re-checks its agent


class _Stop(Exception):
    """Raised from the SIGTERM handler while idle: stop taking attempts."""


class SlotRunner:
    def __init__(self, s: launch.Settings, slot: int, agent_pid: int):
        self.s, self.slot, self.agent_pid = s, slot, agent_pid
        self.store = AgentStore.open(s.redis_url, s.prefix, fast=True)
        self.busy = False                  # an attempt is running here: signals are the attempt's
        self.current: tuple[int, int] | None = None
        self.stopping = self.orphaned = False
        self.leaving = False               # past the loop: a stop signal has nothing left to interrupt

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(proctree.PARENT_DIED, self._on_parent_died)
        signal.signal(signal.SIGINT, signal.SIG_IGN)      # a terminal's Ctrl-C is for the agent
        # The agent dying while this runner is stopped orphans its process group: the kernel then
        # sends SIGHUP (and SIGCONT), which must not kill a runner that may hold a job's result. A
        # handler, not SIG_IGN: the jobs it starts get the default back with their exec.
        signal.signal(signal.SIGHUP, lambda *_: None)
        try:
            self._state("starting")
            spawn.warm()
            for raw in self.store.taken(self.s.node, self.slot):
                self._handle(raw, resumed=True)
            results.drop(self.s.spool, self.slot)     # posted, its entry gone: a stale copy
            self._state("idle")
            while not (self.stopping or self.orphaned):
                # The state is "idle" here: written above, or with the attempt's last write.
                raw = self.store.take(self.s.node, self.slot, BLOCK_S)
                if raw is not None:
                    self._handle(raw)
                else:
                    self._state("idle")       # the runner's heartbeat: alive, taking work (nodehealth.py)
                if os.getppid() != self.agent_pid:
                    self.orphaned = True
            self.leaving = True
        except _Stop:
            self.leaving = True     # an orderly stop: fall through to the slot's shutdown below
        except faults.ERRORS as e:
            self.leaving = True
            log.error("slot %d: Redis: %s; exiting (the agent restarts this runner)", self.slot, e)
            self._give_up_lease()
            return 1
        with contextlib.suppress(*faults.ERRORS):
            self._give_up_lease()
            self._state("stopped")
        return 0

    def _give_up_lease(self) -> None:
        """The agent died: its node must not look alive for the rest of its lease (the scheduler
        would send it work no runner of this epoch may take). Deleted only while it names this
        runner's epoch, never a new incarnation's."""
        if not (self.orphaned or os.getppid() != self.agent_pid) or not self.s.epoch:
            return
        with contextlib.suppress(*faults.ERRORS):
            if self.store.give_up_lease(self.s.node, self.s.epoch):
                log.error("slot %d: the agent died; gave the node's lease up", self.slot)

    def _on_parent_died(self, *_):
        """The agent is gone: its lease will lapse, so nothing may outlive it here. (While an
        attempt runs, the runner's own handler takes this signal and fences the job.)"""
        self.orphaned = True
        self._kill_tree(reap=False)
        if not (self.busy or self.leaving):
            raise _Stop

    def _on_term(self, *_):
        if os.getppid() != self.agent_pid:
            self._on_parent_died()
            return
        self.stopping = True
        if not (self.busy or self.leaving):
            raise _Stop

    def _state(self, what: str) -> None:
        self.store.runner_state(self.s.node, self.slot, f"{what} pid={os.getpid()}")

    # -- one attempt ---------------------------------------------------------------------------
    def _handle(self, raw: str, resumed: bool = False) -> None:
        got = dispatchq.parse(raw)
        ref = SlotRef(self.s.node, self.slot, raw, os.getpid())
        if got is None:
            log.warning("slot %d: dropped a malformed dispatch entry %r", self.slot, raw[:80])
        elif resumed and self.store.claimed_by(*got, deadslot.rank(self.store, self.s.node, got)) is not None:
            self._dead_runners_attempt(got, ref)
            return
        else:
            self.current, self.busy = got, True
            try:
                res = runner.run_job(*got, self.s, ref, self.store)
            except faults.ERRORS:
                # Redis lost before the attempt was surely ours (a claim whose reply never came may
                # have won) or before its end was posted: the entry stays in this slot's list and
                # this runner exits; the one the agent starts in its place runs the attempt if it is
                # unclaimed, else ends it as a node failure. Dropped, a claimed attempt stayed R.
                self._kill_tree()
                raise
            except Exception:       # a bug: the attempt's own cleanup has run
                log.exception("slot %d: job %d attempt %d: runner failed", self.slot, *got)
                res = {}
                self._kill_tree()
            finally:
                self.current, self.busy = None, False
            self.stopping = self.stopping or bool(res.get("stop"))
            self.orphaned = self.orphaned or bool(res.get("orphaned"))
            if res.get("released") or res.get("keep"):
                return          # dropped with the attempt's last write, or left for the next incarnation
        self.store.release_slot(ref)

    def _dead_runners_attempt(self, got: tuple[int, int], ref: SlotRef) -> None:
        """An entry this slot's previous runner claimed and never released: that runner died with
        the attempt in it, and the agent could not end it (deadslot.py). Our own pid in the claim is
        a dead predecessor's that this process was given again."""
        if not deadslot.end(self.store, self.s, self.slot, ref.entry, os.getpid()):
            log.warning("slot %d: job %d attempt %d was claimed by %s; not ours to end", self.slot, *got,
                        self.store.claimed_by(*got, deadslot.rank(self.store, self.s.node, got)))
            self.store.release_slot(ref)

    def _kill_tree(self, reap: bool = True) -> None:
        """SIGKILL every descendant and the current attempt's cgroup; reap them."""
        if proctree.has_children():
            proctree.signal_tree(None, signal.SIGKILL)
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
                if not proctree.has_children():
                    return
                time.sleep(0.01)     # killed, not yet reaped


def main() -> int:
    proctree.die_with_parent(proctree.PARENT_DIED)
    cfg = json.loads(sys.stdin.readline())
    agent = int(cfg["agent_pid"])
    if os.getppid() != agent:
        return 1                       # the agent died before PDEATHSIG was armed
    slot = int(cfg.pop("slot"))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    from labq.scheduler.daemon import journal, sdnotify
    # The agent's stderr: under systemd, journald's stream, where each line needs its <N> priority.
    fmt = journal.JournalFormatter(f"labq.slot[{slot}]: %(message)s") if sdnotify.under_journal() else \
        logging.Formatter(f"%(asctime)s labq.slot[{slot}] %(levelname)s %(message)s")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    proctree.become_subreaper()
    return SlotRunner(launch.Settings.from_dict(cfg), slot, agent).run()


if __name__ == "__main__":
    sys.exit(main())
