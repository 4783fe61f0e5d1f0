"""One cgroup v2 per job: its memory limit, OOM evidence, exact CPU and peak memory, and a kill
that reaches every process it ever forked.

Where the job cgroups live (`detect`, run once by the agent at start):
- under systemd with Delegate=yes, the unit's own cgroup. A cgroup that has controllers enabled for
  its children may hold no processes itself ("no internal processes"), so the agent first moves
  itself into a leaf `<unit>/agent`; its workers and their horses are born there.
- as root anywhere else, `<cgroup2 mount>/labq/<node>-<instance hash>`, made here and holding
  only job cgroups.
- otherwise nowhere: the runner enforces the memory limit itself (labq.worker.memwatch).

A delegated subtree may still lack controllers (a hybrid host binds memory to cgroup v1). The job
cgroup is used anyway for membership, cgroup.kill and cpu.stat; whatever controller is missing is
left to the runner's own watchdog. Only files are touched here; no psutil, no signals but SIGKILL.
"""
import contextlib
import errno
import functools
import hashlib
import logging
import os
import re
import signal
import time
from dataclasses import dataclass

log = logging.getLogger("labq.cgroup")

WANTED = ("cpu", "memory", "pids")
LEAF = "agent"
JOB_PREFIX = "job-"


@dataclass(frozen=True)
class Delegation:
    base: str                    # the directory job cgroups are made in
    controllers: frozenset       # enabled for job cgroups (base/cgroup.subtree_control)
    how: str                     # "systemd" or "root", for the log line

    def describe(self) -> str:
        ctl = " ".join(sorted(self.controllers)) or "none"
        missing = [c for c in ("memory",) if c not in self.controllers]
        tail = "; memory limits by the runner's RSS watchdog" if missing else ""
        return f"job cgroups in {self.base} ({self.how}), controllers: {ctl}{tail}"


# -- reading the hierarchy ---------------------------------------------------------------------
def v2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The cgroup2 mount point: /sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a
    hybrid one, None on a pure v1 host."""
    found = []
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    found.append(left.split()[4].replace("\\040", " "))
    except OSError:
        return None
    return "/sys/fs/cgroup" if "/sys/fs/cgroup" in found else (found[0] if found else None)


@functools.lru_cache(maxsize=1)
def _this_mount() -> str | None:
    """v2_mount() of this host, read once per process (a runner makes a JobCgroup per attempt)."""
    return v2_mount()


def own_cgroup(pid: int | str = "self") -> str | None:
    """This process's cgroup v2 path relative to the mount ("0::/path" in /proc/PID/cgroup)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:     # gone, or not ours to read: no answer, not an error
        return None
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _words(path: str) -> set[str]:
    try:
        return set(_read(path).split())
    except OSError:
        return set()


def keyed(path: str) -> dict[str, int]:
    """A flat-keyed file (memory.events, cpu.stat, cgroup.events): {} where it does not exist."""
    out = {}
    try:
        for line in _read(path).splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    except OSError:     # the cgroup went away with its job: what was read so far
        return out
    return out


def _number(path: str) -> int | None:
    try:
        v = _read(path).strip()
    except OSError:
        return None
    return int(v) if v.isdigit() else None


# -- finding a delegated subtree -----------------------------------------------------------------
def detect(mode: str, node: str, mount: str | None = None, own: str | None = None,
           env=None, instance: str = "") -> tuple[Delegation | None, str]:
    """(delegation, why) for worker.cgroups = `mode`. Never raises: a host without a usable
    cgroup v2 is a host where the runner enforces limits itself, and `why` says so. `instance`
    (the agent's Redis URL and prefix) keeps two labq installations on one host, whose nodes may
    share a name, out of each other's job cgroups: an agent sweeps its own subtree at start."""
    if mode == "off":
        return None, "worker.cgroups = \"off\""
    env = os.environ if env is None else env
    mount = mount or v2_mount()
    if not mount:
        return None, "no cgroup v2 hierarchy is mounted (cgroup v1 only)"
    own = own if own is not None else own_cgroup()
    if own is None:
        return None, "this process is in no cgroup v2 (/proc/self/cgroup has no 0:: line)"
    try:
        unit = _systemd_unit(mount, own, env)
        if unit:
            return _delegated(unit, "systemd"), ""
        if env.get("INVOCATION_ID") and own.rstrip("/").endswith(".service"):
            # Moving jobs out of a unit systemd did not delegate would hide them from its stop.
            return None, "the systemd unit has no Delegate=yes"
        if os.geteuid() != 0:
            return None, "not root, and not in a systemd unit with Delegate=yes"
        return _root_subtree(mount, node, instance), ""
    except OSError as e:
        return None, f"cannot set up job cgroups: {e}"


def _systemd_unit(mount: str, own: str, env) -> str | None:
    """The unit's cgroup directory when we run as a service with Delegate=yes (its cgroup is
    writable by us), else None. A previous call may already have moved us into its leaf."""
    if not env.get("INVOCATION_ID"):
        return None
    path = own.rstrip("/")
    if os.path.basename(path) == LEAF:
        path = os.path.dirname(path)
    if not path.endswith(".service"):
        return None
    d = mount + path
    ok = os.access(os.path.join(d, "cgroup.procs"), os.W_OK) and os.access(d, os.W_OK)
    # Root may write any cgroup, delegated or not; systemd marks the ones it delegated. Making
    # job cgroups inside a unit without Delegate=yes would fight systemd over its own tree.
    return d if ok and _delegate_mark(d) is not False else None


def _delegate_mark(d: str) -> bool | None:
    """True where systemd marked `d` delegated (trusted.delegate, or user.delegate since v251),
    False where the filesystem has xattrs and neither mark is set, None where it cannot tell."""
    unknown = False
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(d, name).strip() == b"1":
                return True
        except OSError as e:
            unknown = unknown or e.errno != errno.ENODATA
    return None if unknown else False


def _delegated(unit_dir: str, how: str) -> Delegation:
    """Move every process of the unit's cgroup into its leaf, then enable controllers below it."""
    leaf = os.path.join(unit_dir, LEAF)
    with contextlib.suppress(FileExistsError):
        os.mkdir(leaf)
    for pid in _read(os.path.join(unit_dir, "cgroup.procs")).split():
        with contextlib.suppress(ProcessLookupError):     # exited meanwhile
            _write(os.path.join(leaf, "cgroup.procs"), pid)
    _enable(unit_dir)
    return Delegation(unit_dir, frozenset(_words(os.path.join(unit_dir, "cgroup.subtree_control"))), how)


def _root_subtree(mount: str, node: str, instance: str = "") -> Delegation:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", node) or "node"
    if instance:
        name += "-" + hashlib.sha1(instance.encode()).hexdigest()[:8]
    top, base = os.path.join(mount, "labq"), os.path.join(mount, "labq", name)
    for d in (top, base):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o755)
    # Each level passes the controllers down; the mount's root cgroup is exempt from the
    # no-internal-processes rule, `labq` and `labq/<node>` hold no processes.
    for d in (mount, top, base):
        _enable(d)
    return Delegation(base, frozenset(_words(os.path.join(base, "cgroup.subtree_control"))), "root")


def _enable(d: str) -> None:
    have = _words(os.path.join(d, "cgroup.controllers"))
    on = _words(os.path.join(d, "cgroup.subtree_control"))
    for c in WANTED:
        if c in have and c not in on:
            try:
                _write(os.path.join(d, "cgroup.subtree_control"), f"+{c}")
            except OSError as e:       # EBUSY: processes live in d (a container's namespace root)
                log.info("cannot enable the %s controller in %s: %s", c, d, e.strerror)


def job_names(base: str) -> list[str]:
    """Names of the job cgroups under `base` (job-<id>-a<attempt>)."""
    try:
        return sorted(n for n in os.listdir(base) if n.startswith(JOB_PREFIX))
    except OSError:
        return []


def sweep(base: str) -> list[str]:
    """Kill and remove job cgroups left in `base` by an earlier agent of this node (a crash, a
    kill -9): their attempts were declared lost, so nothing in them may keep running."""
    removed = []
    for n in job_names(base):
        cg = JobCgroup(base, n)
        if cg.populated():
            log.warning("killing the processes left in %s by an earlier agent", cg.path)
            cg.kill()
        if cg.remove(timeout=5.0):
            removed.append(n)
    return removed


def release(d: Delegation, timeout: float = 5.0) -> None:
    """At the agent's stop: its job cgroups swept, then its own subtree (labq/<node>-<instance>,
    "root"), else every agent run leaves a directory behind (hundreds after a day of tests). A
    unit's delegated directory is systemd's to remove."""
    sweep(d.base)
    if d.how != "root":
        return
    end = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(d.base)
            return
        except FileNotFoundError:
            return
        except OSError:     # EBUSY: a runner that just died leaves it a moment later; else the next sweep's
            if time.monotonic() >= end:
                return
            time.sleep(0.05)


# -- one job's cgroup --------------------------------------------------------------------------
class JobCgroup:
    def __init__(self, base: str, name: str, mount: str | None = None):
        self.base, self.name = base, name
        self.path = os.path.join(base, name)
        self.mount = mount or _this_mount() or ""
        self.controllers = frozenset(_words(os.path.join(base, "cgroup.subtree_control")))
        self.mem_max: int | None = None
        self._home = ""

    @classmethod
    def for_attempt(cls, base: str, job_id: int, attempt: int, mount: str | None = None) -> "JobCgroup":
        return cls(base, f"{JOB_PREFIX}{job_id}-a{attempt}", mount)

    def _f(self, name: str) -> str:
        return os.path.join(self.path, name)

    def has(self, name: str) -> bool:
        return os.path.exists(self._f(name))

    def create(self, mem_max: int = 0, cpus: int = 0, pids_max: int = 0) -> None:
        """Make the cgroup and set its limits (0 = none). A leftover of the same name (an
        earlier agent's) must be empty; it is removed first so counters start from zero."""
        if os.path.isdir(self.path):
            if self.populated():
                raise OSError(errno.EBUSY, f"{self.path} exists and has processes")
            os.rmdir(self.path)
        os.mkdir(self.path, 0o755)
        if "memory" in self.controllers:
            self.mem_max = mem_max if mem_max > 0 else None
            _write(self._f("memory.max"), str(mem_max) if mem_max > 0 else "max")
            # The limit is on RAM: swapping would let the job run over it slowly instead of failing.
            if self.has("memory.swap.max"):
                _write(self._f("memory.swap.max"), "0")
            # One OOM kill ends the whole job, not one DataLoader worker behind its leader's back.
            if self.has("memory.oom.group"):
                _write(self._f("memory.oom.group"), "1")
        if "cpu" in self.controllers and cpus > 0:
            _write(self._f("cpu.max"), f"{cpus * 100_000} 100000")
        if "pids" in self.controllers and pids_max > 0:
            _write(self._f("pids.max"), str(pids_max))

    def enter(self) -> None:
        """Put this process into the job cgroup, so that the child it forks next is born there
        (before it can fork anything itself); `leave` right after the fork. Runs as root: a
        dropped user cannot write cgroup.procs, so the job cannot move itself out either."""
        back = own_cgroup()
        if back is None or not self.mount:
            raise OSError(errno.ENOENT, "cannot tell which cgroup this process is in")
        self._home = os.path.join(self.mount + back.rstrip("/"), "cgroup.procs")
        _write(self._f("cgroup.procs"), str(os.getpid()))

    def leave(self) -> bool:
        """Back to where `enter` found us. False (logged) if that failed: we then stay inside,
        and kill() spares us."""
        try:
            _write(self._home, str(os.getpid()))
            return True
        except OSError as e:
            log.error("cannot move pid %d back to %s: %s", os.getpid(), self._home, e.strerror)
            return False

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self._f("cgroup.procs")).split()]
        except OSError:
            return []

    def populated(self) -> bool:
        ev = keyed(self._f("cgroup.events"))
        return bool(ev.get("populated")) if "populated" in ev else bool(self.pids())

    def kill(self) -> None:
        """SIGKILL everything in the cgroup, escapees included, with no pid race (cgroup.kill,
        Linux 5.14); older kernels: signal what cgroup.procs lists until it is empty."""
        me = os.getpid()
        if me not in self.pids() and self.has("cgroup.kill"):
            with contextlib.suppress(FileNotFoundError):
                _write(self._f("cgroup.kill"), "1")
            return
        for _ in range(100):
            left = [p for p in self.pids() if p != me]
            if not left:
                return
            for p in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, timeout: float = 10.0) -> bool:
        """rmdir once the last process is gone (a dying process leaves the cgroup a moment after
        its SIGKILL); False if it is still busy after `timeout`."""
        end = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > end:
                    log.warning("cannot remove %s: %s", self.path, e.strerror)
                    return False
            time.sleep(0.02)

    # -- what the kernel counted ---------------------------------------------------------------
    def memory_events(self) -> dict[str, int]:
        """oom (times memory.max was hit and reclaim failed), oom_kill (processes killed by any
        OOM killer, the host's included), max, high, oom_group_kill (5.17+)."""
        return keyed(self._f("memory.events"))

    def usage(self) -> dict:
        """Counters for the attempt's `usage`, where the kernel has them."""
        out = {}
        cpu = keyed(self._f("cpu.stat"))
        if "usage_usec" in cpu:
            out["cgroup_cpu_s"] = round(cpu["usage_usec"] / 1e6, 3)
        if "nr_throttled" in cpu:
            out["cpu_throttled_periods"] = cpu["nr_throttled"]
            out["cpu_throttled_s"] = round(cpu.get("throttled_usec", 0) / 1e6, 3)
        peak = _number(self._f("memory.peak"))
        if peak is not None:
            out["mem_peak_bytes"] = peak
        ev = self.memory_events()
        if ev:
            out["mem_max_hits"] = ev.get("max", 0)
            out["oom_kills"] = ev.get("oom_kill", 0)
        pids_peak = _number(self._f("pids.peak"))
        if pids_peak is not None:
            out["pids_peak"] = pids_peak
        return out
