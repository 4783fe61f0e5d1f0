"""Out-of-memory without a memory cgroup: the runner's own limit, and the host's OOM evidence.

The exit code never says OOM by itself: `bash -c 'train.py; true'` exits 0 after the kernel
SIGKILLed train.py. So an attempt is `oom` only on evidence:
- its cgroup's memory.events counted an oom_kill (labq.worker.cgroup; the runner reads it);
- the watchdog here killed it: the tree's RSS went over the limit and PSS confirmed it (RSS alone
  counts shared pages once per process: forked DataLoader workers would look several times bigger);
- the host's oom_kill counter (/proc/vmstat) rose while it ran, and one of its processes died of a
  SIGKILL nobody in labq sent: a status we reaped, or a pid the kernel log names as the victim.
"""
import os
import re
import time

from labq.scheduler.units import fmt_size

CONFIRM_EVERY = 5.0      # seconds between PSS confirmations while RSS stays over the limit
_VICTIM = re.compile(rb"Killed process (\d+)|oom-kill:.*?[,:]pid=(\d+)")


class Watchdog:
    """Enforces `limit` bytes on a tree whose kernel does not. `pss(pids)` is probe.tree_pss."""

    def __init__(self, limit: int, pss, clock=time.monotonic):
        self.limit, self.pss, self.clock = limit, pss, clock
        self._next_confirm = 0.0
        self.last_pss: int | None = None

    def check(self, rss: int, pids) -> str | None:
        """The reason to kill the tree now, or None."""
        if self.limit <= 0 or rss <= self.limit:
            return None
        now = self.clock()
        if now < self._next_confirm:
            return None
        self.last_pss = pss = self.pss(pids)
        # A tree whose RSS stays over the limit on shared pages is confirmed again and again: keep
        # that under 2 % of a core however big it is.
        self._next_confirm = now + max(CONFIRM_EVERY, (self.clock() - now) * 50)
        if pss <= self.limit:
            return None
        return (f"out of memory: the job's processes used {fmt_size(pss)} (PSS; RSS {fmt_size(rss)}), over its "
                f"limit of {fmt_size(self.limit)}; killed by the labq runner's watchdog (no memory cgroup here)")


def host_oom_kills(path: str = "/proc/vmstat") -> int | None:
    """The host's count of OOM kills since boot (Linux 4.13+), None where unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            text = b"\n" + os.read(fd, 1 << 16)      # /proc/vmstat: ~5 KB, generated whole on the first read
        finally:
            os.close(fd)
    except OSError:     # gone, or not ours to read: no answer, not an error
        return None
    at = text.find(b"\noom_kill ")
    if at < 0:
        return None
    return int(text[at + 10:].split(b"\n", 1)[0])


def monotonic_us() -> int:
    """The kernel log's clock (CLOCK_MONOTONIC, in µs)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)


def kernel_victims(since_us: int, path: str = "/dev/kmsg") -> set[int]:
    """Pids the OOM killer named in the kernel log since `since_us` (needs root; empty otherwise)."""
    out: set[int] = set()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return out
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:       # EPIPE: a record was overwritten while we read; go on
                continue
            if not rec:
                break
            # /dev/kmsg gives one record per read; a copy in a file gives many: parse by line.
            for line in rec.split(b"\n"):
                head, _, msg = line.partition(b";")
                parts = head.split(b",")
                if len(parts) < 3 or not parts[2].isdigit() or int(parts[2]) < since_us:
                    continue      # continuation lines (" KEY=value") and older records
                for m in _VICTIM.finditer(msg):
                    out.add(int(m.group(1) or m.group(2)))
    finally:
        os.close(fd)
    return out


def host_oom(before: int | None, after: int | None, sigkilled_unsent: bool, seen_pids, since_us: int,
             victims=kernel_victims) -> str | None:
    """Why the host's OOM killer is to blame for this attempt, or None."""
    if before is None or after is None or after <= before:
        return None
    if sigkilled_unsent:
        return (f"out of memory: the host's OOM killer ran {after - before} time(s) while the job ran and "
                f"one of its processes died of SIGKILL")
    hit = sorted(victims(since_us) & set(seen_pids))
    if hit:
        return (f"out of memory: the kernel's OOM killer killed process {', '.join(map(str, hit))} of the job "
                f"(kernel log)")
    return None
