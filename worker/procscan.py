"""A job's processes and what they use, every second, for little CPU.

psutil's `children(recursive=True)` reads /proc/<pid>/stat of every process on the machine on
each call (28 ms at 425 pids). `ProcTable` lists /proc instead and reads the stat only of pids it
has not classified yet: a process outside our tree can never move into it (orphans are reparented
to their nearest subreaper ancestor, which for our tree is us), and one inside stays inside until
it exits. Pid reuse is caught by the start time; foreign pids are re-classified every
FULL_RESCAN seconds for the rare reuse between two ticks. With a job cgroup the membership is its
cgroup.procs and no table is needed at all. Either way one read of /proc/<pid>/stat per member
gives CPU and RSS; PSS (smaps_rollup, costly) is probe.tree_pss, sampled rarely.
"""
import os
import time
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
FULL_RESCAN = 30.0
MAX_SEEN = 100_000


@dataclass(frozen=True)
class Stat:
    state: str
    ppid: int
    cpu_s: float          # utime + stime + cutime + cstime
    start: int            # clock ticks since boot: with the pid, identifies the process
    rss: int              # bytes


def read_stat(pid: int) -> Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    f = data[data.rindex(b")") + 2:].split()
    return Stat(f[0].decode(), int(f[1]), (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / CLK_TCK,
                int(f[19]), int(f[21]) * PAGE)


@dataclass(frozen=True)
class TreeStats:
    cpu_s: float          # live members' own plus reaped children's CPU
    rss_bytes: int        # sum (over-counts shared pages)
    max_rss_bytes: int    # the largest single process
    procs: int            # live (non-zombie) members
    pids: tuple[int, ...] = ()


@dataclass
class ProcTable:
    """The descendants of `root` (default: this process), kept up to date incrementally."""
    root: int = field(default_factory=os.getpid)
    members: dict = field(default_factory=dict)     # pid -> start ticks
    foreign: set = field(default_factory=set)
    seen: set = field(default_factory=set)          # every member pid ever seen (OOM evidence)
    clock: object = time.monotonic
    _rescan_at: float = 0.0

    def pids(self) -> list[int]:
        now = self.clock()
        if now >= self._rescan_at:
            self.foreign.clear()
            self._rescan_at = now + FULL_RESCAN
        present = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        alive = set(present)
        self.members = {p: s for p, s in self.members.items() if p in alive}
        self.foreign &= alive
        new: dict[int, Stat] = {}
        for p in present:
            if p not in self.members and p not in self.foreign and p != self.root:
                st = read_stat(p)
                if st is not None:
                    new[p] = st
        self._classify(new)
        return list(self.members)

    def _classify(self, new: dict) -> None:
        """A new pid is ours when its parent is the root or a member; a parent that is itself new
        is resolved first (a fork and its child born in the same second)."""
        pending = dict(new)
        while pending:
            progress = False
            for p, st in list(pending.items()):
                if st.ppid == self.root or st.ppid in self.members:
                    self.members[p] = st.start
                    if len(self.seen) < MAX_SEEN:
                        self.seen.add(p)
                elif st.ppid in pending:
                    continue
                else:
                    self.foreign.add(p)
                del pending[p]
                progress = True
            if not progress:          # a parent/child cycle cannot exist; be safe anyway
                self.foreign.update(pending)
                return

    def forget(self, pid: int) -> None:
        """A member whose start time changed is a new process under a reused pid."""
        self.members.pop(pid, None)


def stats(pids, table: ProcTable | None = None, seen: set | None = None) -> TreeStats:
    """One stat read per pid. With `table`, members whose pid was reused are dropped from it."""
    cpu, rss, top, n, live = 0.0, 0, 0, 0, []
    for p in pids:
        st = read_stat(p)
        if st is None:
            continue
        if table is not None and table.members.get(p, st.start) != st.start:
            table.forget(p)
            continue
        if seen is not None and len(seen) < MAX_SEEN:
            seen.add(p)
        cpu += st.cpu_s
        if st.state in ("Z", "X"):
            continue
        rss, top, n = rss + st.rss, max(top, st.rss), n + 1
        live.append(p)
    return TreeStats(round(cpu, 3), rss, top, n, tuple(live))
