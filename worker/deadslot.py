"""The attempt a slot runner died with (killed outright: its job died with it, PDEATHSIG). Ended at
once, by the agent the moment it sees the runner gone (SIGCHLD wakes it) or else by the slot's
next runner, rather than left for the scheduler to find silent a lease and a fence margin later: a
gang's other parts are stopped as soon as this part's end is posted. The kept result (results.py)
is posted when the runner died holding one; otherwise the attempt is a node failure, its end the
runner's death as the agent saw it (results.mark_death, when Redis was away then), else now."""
import contextlib
import logging
import os
import signal
import time

from labq.scheduler.store import dispatchq
from labq.scheduler.store.agentside import AgentStore, SlotRef

from . import cgroup, ending, exitwatch, gang, launch, proctree, results

log = logging.getLogger("labq.slot")


def rank(store: AgentStore, node: str, got: tuple[int, int]) -> int:
    """This node's part of the attempt: a gang's part claims its own status hash (keys.part)."""
    job = store.job(got[0])
    if job is None or not 0 < got[1] <= len(job.attempts):
        return 0
    return gang.rank_of(job.attempts[got[1] - 1], node) or 0


def end(store: AgentStore, s: launch.Settings, slot: int, raw: str, me: int = 0, exited=None) -> bool:
    """End the attempt of slot list entry `raw` if a dead runner of this node claimed it: True
    when that was posted; False (entry left alone) when it is unclaimed or someone alive has it.
    `me`: the caller's pid, which a dead predecessor's claim may name (pids are reused). `exited`:
    the agent's reaped leaders (reap_strays), for a job that exited before its runner died."""
    got = dispatchq.parse(raw)
    if got is None:
        return False
    r = rank(store, s.node, got)
    claimed = store.claimed_by(*got, r) or ""
    node, _, pid = claimed.rpartition(":")
    if node != s.node or not pid.isdigit() or (int(pid) != me and proctree.alive(int(pid))):
        return False
    if s.cgroup_base:
        cg = cgroup.JobCgroup.for_attempt(s.cgroup_base, *got)
        if os.path.isdir(cg.path):
            cg.kill()
    body = results.kept(s.spool, slot, raw, r) or _exited(store, got, r, exited or {}, pid, (s.spool, slot))
    if body is not None:
        log.warning("slot %d: job %d attempt %d: its runner (pid %s) died holding its result (%s); posting it",
                    slot, *got, pid, body.get("outcome"))
    else:
        log.error("slot %d: job %d attempt %d: its runner (pid %s) died; ending it as a node failure", slot, *got, pid)
        # when it died, if the agent saw it (a post in a Redis outage waits for Redis, the end does not)
        died = results.death(s.spool, slot, int(pid))
        body = {"outcome": "node_failure", "exit_code": None, "signal": None, "start_time": None,
                "end_time": min(died or time.time(), time.time()), "usage": {},
                "message": ending.end_message("runner_killed", f"pid {pid}")}
    store.post("finished", got[0], got[1], s.node, body, SlotRef(s.node, slot, raw, int(pid)))
    results.drop(s.spool, slot)
    results.drop_death(s.spool, slot)
    exitwatch.forget(s.spool, slot)
    return True


def _exited(store: AgentStore, got: tuple[int, int], r: int, exited: dict, runner: str,
            where: tuple[str, int]) -> dict | None:
    """The end of a job whose leader exited on its own before its runner was killed (issue 35: the
    soak's kill -9 of a runner the instant its job exited 0 cost a finished job a re-run): the
    agent, subreaper, reaped the leader and kept its status. A leader killed by a signal (its
    runner's death kills it) is no evidence: None, a node failure. Its end: when the agent saw it
    exit (exitwatch; the runner may have been frozen long before it was killed), else reaped it."""
    pid, start = store.part_process(*got, r)
    status, at = exited.get(pid or -1, (None, 0.0))
    if status is None or not os.WIFEXITED(status) or start is None or at < start:
        return None
    seen = exitwatch.exited_at(*where, pid or -1, None)
    at = min(at, seen) if seen is not None and seen >= start else at     # since the start: this leader
    code = os.WEXITSTATUS(status)
    job = store.job(got[0])
    ckpt = job is not None and code and code == job.checkpoint_exit_code
    return {"outcome": "checkpoint_exit" if ckpt else "completed" if code == 0 else "exit", "exit_code": code,
            "signal": None, "start_time": start, "end_time": at, "usage": {},
            "message": f"exit code {code} (its runner, pid {runner}, died before it could report it)"}


def reap_strays(ours: set[int], exited: dict[int, tuple[int, float]]) -> None:
    """Reap children that are not our runners (orphans adopted as subreaper), keeping how each
    exited (for `end`), and kill those alive that come from a job: a job starts in a session of its
    own and can only make new ones, so a child outside our session is a process of a job whose
    runner died (attempts run inside the runners: nothing else of ours is left to report it), which
    must not outlive the attempt. Children in our session are someone else's (an embedding process)."""
    sid = os.getsid(0)
    for pid, (_, at) in list(exited.items()):
        if time.time() - at > 3600:     # kept for the end of its attempt, not for good
            del exited[pid]
    for pid in proctree.children(os.getpid()):
        if pid in ours:
            continue
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
            theirs = not got and os.getsid(pid) != sid
        except (ChildProcessError, ProcessLookupError):
            got, status, theirs = 0, None, False
        if got and status is not None:
            exited[got] = (status, time.time())
        if theirs:
            log.warning("killing pid %d, left behind by a runner that died", pid)
            for p in [*proctree.descendants(pid), pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


def silent(store: AgentStore, node: str, lease: float) -> list[tuple[str, int, float]]:
    """(job.attempt, runner pid, seconds silent) of this node's running attempts whose runner has
    not heart-beaten (or, never beating, not since its claim) for longer than the lease: a gang's
    part by its own status hash."""
    out = []
    for v in store.runners(node).values():
        if not v.startswith("running "):
            continue
        ref = v.split()[1]
        jid, _, n = ref.partition(".")
        got = (int(jid), int(n))
        claimed, hb = store.attempt_status(*got, rank(store, node, got))
        owner, _, pid = (claimed or "").rpartition(":")
        if owner == node and pid.isdigit() and hb and time.time() - hb > lease:
            out.append((ref, int(pid), time.time() - hb))
    return out


class Waker:
    """The agent's loop sleeps on this: woken at once by SIGCHLD (a runner died, an orphan exited)
    or any other signal with a Python handler (SIGTERM), else after the tick. Main thread only."""

    def __init__(self):
        self.rfd, self.wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_fd = signal.set_wakeup_fd(self.wfd, warn_on_full_buffer=False)
        self.old = signal.signal(signal.SIGCHLD, lambda *_: None)

    def wait(self, timeout: float) -> None:
        proctree.readable([self.rfd], timeout)
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.rfd, 512):    # drain the wake-ups: one wait per wake, not per signal
                continue

    def close(self) -> None:
        signal.set_wakeup_fd(self.old_fd)
        signal.signal(signal.SIGCHLD, self.old)
        for fd in (self.rfd, self.wfd):
            os.close(fd)


def fence(spool: str, slot: int, runner: int) -> bool:
    """The agent's fence of one runner (no lease renewal): True when it was killed with its tree;
    False when it was left to post: it holds a kept result (results.stop_unless_holding), or its
    job's leader has exited, reaped with the result not kept yet (exitwatch.leader_over), or
    unreaped (kill_unless_over). The soak killed such runners 250-400 ms after their jobs exited 0
    (jobs 94 and 527, seed 71): the attempts ended node_failure and the finished work ran again."""
    if not results.stop_unless_holding(spool, runner):
        return False
    if exitwatch.leader_over(spool, slot):
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner, signal.SIGCONT)
        return False
    return kill_unless_over(runner)


def kill_unless_over(runner: int) -> bool:
    """A runner silent past the lease, stopped by the caller (results.stop_unless_holding): kill it
    and its tree (True), unless its job is over - its leader, the runner's child in a session of its
    own, has exited, a zombie only the runner can reap (the runner was SIGSTOPped as its job ended).
    Then the job's other processes die, and the runner is resumed to post the outcome (False): the
    soak saw such finished jobs ended node_failure and run again (issue 35)."""
    over = any(_stat(c)[:1] == ["Z"] and _stat(c)[3:4] == [str(c)] for c in proctree.children(runner))
    for p in [*proctree.descendants(runner), *([] if over else [runner])]:
        if not (over and _stat(p)[:1] == ["Z"]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
    if over:
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner, signal.SIGCONT)
    return not over


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat past the command: state, ppid, pgrp, session, ... ([] once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []
