"""Process control for labq's own processes and its jobs' trees: child subreaper, the parent-death
signal, walking a tree through /proc, signalling it, waiting for it to die. Nothing here needs
psutil (worker/probe.py has what does)."""
import contextlib
import ctypes
import os
import select
import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_LIBC = None


def _prctl(option: int, arg: int) -> None:
    global _LIBC
    libc = _LIBC = _LIBC or ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def become_subreaper() -> None:
    """Orphans in our tree (setsid'd or double-forked escapees) are reparented to us, not to PID 1,
    so we can find, kill and reap them and their CPU time lands in our RUSAGE_CHILDREN."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


# The parent-death signal of labq's own processes (agent -> slot runner -> attempt runner): one
# nothing else sends, so a runner never mistakes it for the agent's orderly SIGTERM. PDEATHSIG fires
# when the *thread* that forked us exits: a dying multi-threaded agent (its GPU monitor thread) sends
# it first while getppid() still names the agent (we are handed to a sibling thread), then again.
PARENT_DIED = signal.SIGRTMIN + 2


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    _prctl(PR_SET_PDEATHSIG, int(sig))


# Process trees are walked through /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN): the cost
# is the tree's size. psutil's children() reads the stat of every process on the machine (28 ms at
# 425 pids), twice per job end, which was most of a trivial job's CPU.
_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _kids(pid: int) -> list[int]:
    """Direct children of `pid` (of each of its threads)."""
    if not _HAS_CHILDREN_FILE:
        from . import probe  # psutil lives there; this kernel lacks CONFIG_PROC_CHILDREN
        return probe.psutil_children(pid)
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return out


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True          # gone counts as dead
    return data[data.rindex(b")") + 2:data.rindex(b")") + 3] == b"Z"


def has_children() -> bool:
    """Whether this process has any child left."""
    return bool(_kids(os.getpid()))


def descendants(pid: int | None = None) -> list[int]:
    """Pids below `pid` (default: this process), zombies included, parents before children."""
    out, todo = [], _kids(os.getpid() if pid is None else pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_kids(p))
    return out


def readable(fds: list[int], timeout: float) -> set[int]:
    """Which of `fds` are readable within `timeout` seconds: poll(2), not select(2), which raises
    ValueError for a descriptor numbered 1024 or above (an agent embedded in a process with many
    files open: the test run's exit watch died so, ci at b692a81)."""
    p = select.poll()
    for fd in fds:
        p.register(fd, select.POLLIN)
    try:
        return {fd for fd, _ in p.poll(max(0.0, timeout) * 1000)}
    except InterruptedError:
        return set()


def children(pid: int) -> list[int]:
    """Direct children of `pid` (the agent finds its runners' strays this way)."""
    return _kids(pid)


def zombie_children(exclude: int | None = None) -> list[int]:
    """Our children that have exited and wait to be reaped (orphans adopted as subreaper)."""
    return [p for p in _kids(os.getpid()) if p != exclude and _zombie(p)]


def live_descendants(pid: int | None = None) -> list[int]:
    return [p for p in descendants(pid) if not _zombie(p)]


def signal_tree(pgid: int | None, sig: int, root: int | None = None) -> None:
    """Signal the job's process group and every descendant of `root` (default: us): processes that
    left the group with setsid are still our descendants, because we are their subreaper."""
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for p in descendants(root):
        # Once each: a second USR1 (a checkpoint request) to a process of the group that killpg
        # already reached could make a job checkpoint twice, or kill it while it exits. A pid in
        # our tree is not reused before it is reaped, by us or by its parent in the tree.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pgid and os.getpgid(p) == pgid:
                continue
            os.kill(p, sig)


def warn(pid: int, sig: int, batch: bool) -> None:
    """--signal's warning before the time limit: to the job's whole tree, or with SLURM's `B:` to
    the job's own process alone (the batch shell, which traps it; its children have no handler)."""
    if not batch:
        return signal_tree(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_tree_death(timeout: float, root: int | None = None, interval: float = 0.05) -> bool:
    """True once no descendant of `root` is alive (zombies count as dead), False on timeout."""
    end = time.monotonic() + timeout
    while live_descendants(root):
        if time.monotonic() >= end:
            return False
        time.sleep(interval)
    return True


def alive(pid: int) -> bool:
    """Whether `pid` exists (a zombie counts: it is not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
