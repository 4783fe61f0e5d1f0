"""When a job's leader really exited, as the agent saw it (issue 35: charges are what ran). A runner
reaps its job's leader and times the end itself; frozen (SIGSTOP, a hung host) as the job exits, it
reaped it only once resumed and billed the attempt for the time it was stopped (the chaos soak: two
jobs ~2.5 s past their processes' end). The agent is not frozen with it: the runner names its
leader on the spool at the start (`note`), the agent's watch holds a pidfd on it (readable the
moment the process exits, before anyone reaps it; also for a process that is not the agent's
child) and marks the time on the spool (`mark`), and the runner ends the attempt at the earlier of
that mark and its own reap (`exited_at`). A pid is named with its start time in clock ticks
(/proc/PID/stat), so that a reused pid is never taken for the leader."""
import contextlib
import json
import logging
import os
import threading
import time

from . import proctree
from .results import DIR

log = logging.getLogger("labq.agent")

RESCAN = 0.25       # seconds between looks for leaders named since (a job's start is not hurried)


def _path(spool: str, slot: int, kind: str) -> str:
    return os.path.join(spool, DIR, f"slot-{slot}.{kind}")


def started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _write(p: str, body: dict) -> None:
    os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, p)


def _read(p: str) -> dict:
    try:
        with open(p) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def note(spool: str, slot: int, pid: int) -> int | None:
    """The runner of `slot` started leader `pid` (its child, not reaped yet, so the pid is its):
    name it for the agent's watch. Returns its start ticks, the key of its mark."""
    start = started(pid)
    if start is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_path(spool, slot, "exit"))      # an earlier leader's
        _write(_path(spool, slot, "leader"), {"pid": pid, "start": start})
    return start


def exited_at(spool: str, slot: int, pid: int, start: int | None) -> float | None:
    """When the agent saw leader `pid` (started at `start` ticks; None: any) of `slot` exit."""
    got = _read(_path(spool, slot, "exit"))
    ok = got.get("pid") == pid and (start is None or got.get("start") == start)
    return float(got["at"]) if ok and isinstance(got.get("at"), (int, float)) else None


def leader_over(spool: str, slot: int) -> bool:
    """Whether the leader `slot`'s runner named has exited: marked by the watch, or no longer there
    (reaped by its runner, which may not have kept the result yet), or a zombie. False when none is
    named (not started, or already forgotten)."""
    named = _read(_path(spool, slot, "leader"))
    pid, start = named.get("pid"), named.get("start")
    if not isinstance(pid, int) or not isinstance(start, int):
        return False
    if exited_at(spool, slot, pid, start) is not None or started(pid) != start:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def forget(spool: str, slot: int) -> None:
    for kind in ("leader", "exit"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_path(spool, slot, kind))


class Watch(threading.Thread):
    """The agent's: a pidfd on every leader the runners named; on its exit, the time on the spool."""

    def __init__(self, spool: str):
        super().__init__(daemon=True, name="exit-watch")
        self.spool, self.done = spool, threading.Event()
        self.named: dict[int, tuple[int, int, int]] = {}     # slot -> (file inode, pid, start ticks)
        self.fds: dict[int, int] = {}                        # slot -> pidfd of a leader not yet exited

    def stop(self) -> None:
        self.done.set()
        self.join(RESCAN * 4)

    def run(self) -> None:
        try:
            while not self.done.is_set():
                self._rescan()
                if not self.fds:
                    self.done.wait(RESCAN)
                    continue
                ready = proctree.readable(list(self.fds.values()), RESCAN)
                at = time.time()
                for slot, fd in list(self.fds.items()):
                    if fd in ready:
                        self._mark(slot, at)
        except Exception:       # the runners' own reap times stand; the agent goes on
            log.exception("the leaders' exit watch failed")
        finally:
            for slot in list(self.fds):
                self._close(slot)

    def _rescan(self) -> None:
        seen = set()
        with contextlib.suppress(FileNotFoundError), os.scandir(os.path.join(self.spool, DIR)) as it:
            for e in it:
                slot = e.name[5:-7]
                if not (e.name.startswith("slot-") and e.name.endswith(".leader") and slot.isdigit()):
                    continue
                seen.add(int(slot))
                if self.named.get(int(slot), (None,))[0] != e.inode():
                    self._open(int(slot), e.inode(), _read(e.path))
        for slot in set(self.named) - seen:      # its attempt is over
            self._close(slot)
            del self.named[slot]

    def _open(self, slot: int, inode: int, got: dict) -> None:
        self._close(slot)
        pid, start = got.get("pid"), got.get("start")
        self.named[slot] = (inode, pid if isinstance(pid, int) else 0, start if isinstance(start, int) else 0)
        if not isinstance(pid, int) or not isinstance(start, int):
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return          # reaped already: its runner timed its end itself
        if started(pid) != start:       # checked after the open: the fd is now that process's or none
            os.close(fd)
            return
        self.fds[slot] = fd

    def _mark(self, slot: int, at: float) -> None:
        _, pid, start = self.named[slot]
        try:
            _write(_path(self.spool, slot, "exit"), {"pid": pid, "start": start, "at": at})
        except OSError as e:
            log.warning("cannot mark the exit of job leader pid %d (slot %d): %s", pid, slot, e)
        self._close(slot)

    def _close(self, slot: int) -> None:
        fd = self.fds.pop(slot, None)
        if fd is not None:
            os.close(fd)
