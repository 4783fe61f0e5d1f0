"""What this machine has and what its processes do: GPUs (NVML, or Null/Fake), CPUs, memory, and
process trees (sampling, signalling, waiting for death).

The only module of the worker that imports psutil or pynvml, so the rest of the agent can be read
and tested without either of them behaving like hardware.
"""
import contextlib
import ctypes
import logging
import os
import signal
import time
from dataclasses import dataclass, field

import psutil

from scheduler.model import Gpu

log = logging.getLogger("labq.probe")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


# -- GPUs --------------------------------------------------------------------------------------
@dataclass
class GpuSample:
    uuid: str
    util: int | None = None            # percent; None where NVML does not support it (MIG)
    mem_used: int | None = None        # bytes
    power_mw: int | None = None
    energy_mj: int | None = None       # counter since driver load; a job's energy is its delta
    procs: dict[int, int] = field(default_factory=dict)   # host pid -> GPU memory bytes


class NullBackend:
    """A CPU node: no GPUs, nothing to sample."""

    def devices(self) -> list[Gpu]:
        return []

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        """Nothing to release."""


class FakeBackend:
    """`n` declared GPUs for tests and demos. UUIDs depend only on the node name and index, so a
    restarted agent advertises the same devices and the scheduler's allocations stay valid."""

    def __init__(self, n: int, model: str = "fake", node: str = "local", mem: int = 80 << 30):
        self._devs = [Gpu(f"GPU-fake-{node}-{i}", i, model, mem) for i in range(n)]
        self.procs: dict[str, dict[int, int]] = {}    # uuid -> {pid: bytes}, set by tests

    def devices(self) -> list[Gpu]:
        return list(self._devs)

    def sample(self) -> list[GpuSample]:
        out = []
        for d in self._devs:
            procs = dict(self.procs.get(d.uuid, {}))
            out.append(GpuSample(d.uuid, util=0, mem_used=sum(procs.values()), power_mw=0, energy_mj=0,
                                 procs=procs))
        return out

    def close(self) -> None:
        """Nothing to release."""


class NvmlBackend:
    """Real GPUs through NVML (tech-notes §3.2). MIG slices are advertised instead of their parent,
    because a MIG job gets exactly one slice and its UUID is the CUDA_VISIBLE_DEVICES token."""

    def __init__(self, nv):
        self.nv = nv
        self._handles: dict[str, object] = {}
        self._devs: list[Gpu] = []
        nv.nvmlInit()
        try:
            self._enumerate()
        except nv.NVMLError:
            nv.nvmlShutdown()
            raise

    def _enumerate(self) -> None:
        nv = self.nv
        for i in range(nv.nvmlDeviceGetCount()):
            g = nv.nvmlDeviceGetHandleByIndex(i)
            for h in self._migs(g) or [g]:
                uuid = nv.nvmlDeviceGetUUID(h)
                mem = self._opt(nv.nvmlDeviceGetMemoryInfo, h)
                self._handles[uuid] = h
                self._devs.append(Gpu(uuid, i, nv.nvmlDeviceGetName(h), mem.total if mem else 0))

    def _opt(self, fn, *args):
        """A call that some GPUs, drivers or privileges do not support: None instead of an error."""
        nv = self.nv
        try:
            return fn(*args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission, nv.NVMLError_FunctionNotFound,
                nv.NVMLError_NotFound):
            return None

    def _migs(self, g) -> list:
        nv = self.nv
        mode = self._opt(nv.nvmlDeviceGetMigMode, g)
        if not mode or mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(g)):
            h = self._opt(nv.nvmlDeviceGetMigDeviceHandleByIndex, g, j)   # NotFound: an empty slot
            if h is not None:
                out.append(h)
        return out

    def devices(self) -> list[Gpu]:
        return list(self._devs)

    def sample(self) -> list[GpuSample]:
        nv, out = self.nv, []
        for d in self._devs:
            try:
                out.append(self._sample_one(d.uuid, self._handles[d.uuid]))
            except nv.NVMLError as e:     # a lost or resetting GPU: report it empty, keep the others
                log.warning("NVML sample of %s failed: %s", d.uuid, e)
                out.append(GpuSample(d.uuid))
        return out

    def _sample_one(self, uuid: str, h) -> GpuSample:
        nv = self.nv
        mem = self._opt(nv.nvmlDeviceGetMemoryInfo, h)
        util = self._opt(nv.nvmlDeviceGetUtilizationRates, h)
        procs = self._opt(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
        return GpuSample(
            uuid, util=util.gpu if util else None, mem_used=mem.used if mem else None,
            power_mw=self._opt(nv.nvmlDeviceGetPowerUsage, h),
            energy_mj=self._opt(nv.nvmlDeviceGetTotalEnergyConsumption, h),
            procs={p.pid: p.usedGpuMemory for p in procs if p.usedGpuMemory is not None})

    def close(self) -> None:
        with contextlib.suppress(self.nv.NVMLError):
            self.nv.nvmlShutdown()


def _nvml_or_none():
    """NvmlBackend if this machine has a working driver, else None (a CPU node is not an error)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        return NvmlBackend(pynvml)
    except pynvml.NVMLError as e:
        log.info("no usable NVIDIA driver (%s): this is a CPU node", e)
        return None


def make_gpu_backend(spec, node_name: str, model: str = "fake"):
    """`spec` is config worker.gpus: "auto" (NVML where it works, else none), "none", or a number
    of fake GPUs."""
    if spec in ("auto", None, ""):
        return _nvml_or_none() or NullBackend()
    if spec == "none":
        return NullBackend()
    if isinstance(spec, str) and spec.isdigit():
        spec = int(spec)
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return FakeBackend(spec, model, node_name) if spec else NullBackend()
    raise ValueError(f"worker.gpus: expected \"auto\" or a number of fake GPUs, got {spec!r}")


def gpu_procs(backend) -> dict[int, int]:
    """pid -> GPU memory bytes over all devices (a process may use several GPUs)."""
    out: dict[int, int] = {}
    for s in backend.sample():
        for pid, b in s.procs.items():
            out[pid] = out.get(pid, 0) + b
    return out


# -- host --------------------------------------------------------------------------------------
def host_cpus() -> int:
    """CPUs this process may run on: the affinity mask, which a container or cpuset narrows."""
    try:
        return len(psutil.Process().cpu_affinity()) or psutil.cpu_count() or 1
    except (AttributeError, psutil.Error):
        return psutil.cpu_count() or 1


def host_mem() -> int:
    return psutil.virtual_memory().total


# -- process control ---------------------------------------------------------------------------
def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def become_subreaper() -> None:
    """Orphans in our tree (setsid'd or double-forked escapees) are reparented to us, not to PID 1,
    so we can find, kill and reap them and their CPU time lands in our RUSAGE_CHILDREN."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    _prctl(PR_SET_PDEATHSIG, int(sig))


def _procs(pid: int | None) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def descendants(pid: int | None = None) -> list[int]:
    """Pids below `pid` (default: this process), zombies included."""
    return [p.pid for p in _procs(pid)]


def _alive(p) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def live_descendants(pid: int | None = None) -> list[int]:
    return [p.pid for p in _procs(pid) if _alive(p)]


def signal_tree(pgid: int | None, sig: int, root: int | None = None) -> None:
    """Signal the job's process group and every descendant of `root` (default: us): processes that
    left the group with setsid are still our descendants, because we are their subreaper."""
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for p in _procs(root):
        # Once each: a second USR1 (a checkpoint request) to a process of the group that killpg
        # already reached could make a job checkpoint twice, or kill it while it exits.
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if pgid and os.getpgid(p.pid) == pgid:
                continue
            p.send_signal(sig)


def wait_tree_death(timeout: float, root: int | None = None, interval: float = 0.05) -> bool:
    """True once no descendant of `root` is alive (zombies count as dead), False on timeout."""
    end = time.monotonic() + timeout
    while live_descendants(root):
        if time.monotonic() >= end:
            return False
        time.sleep(interval)
    return True


@dataclass(frozen=True)
class TreeSample:
    cpu_s: float        # user+system of live processes plus what they reaped (children_*)
    rss_bytes: int      # sum over processes (over-counts shared pages; PSS is too costly per second)
    max_rss_bytes: int  # the largest single process
    procs: int


class TreeSampler:
    """Samples a process tree once per call. Keeps psutil.Process objects across calls: they are
    cheaper than re-reading /proc and guard against pid reuse (create_time)."""

    def __init__(self, pid: int | None = None, include_root: bool = False):
        self.pid, self.include_root = pid if pid is not None else os.getpid(), include_root
        self._known: dict[int, psutil.Process] = {}

    def _members(self) -> list:
        try:
            root = psutil.Process(self.pid)
            found = root.children(recursive=True) + ([root] if self.include_root else [])
        except psutil.Error:
            return []
        members = []
        for p in found:
            known = self._known.get(p.pid)
            members.append(known if known is not None and known.is_running() else p)
        self._known = {p.pid: p for p in members}
        return members

    def sample(self) -> TreeSample:
        cpu, rss, top, n = 0.0, 0, 0, 0
        for p in self._members():
            try:
                with p.oneshot():
                    if p.status() == psutil.STATUS_ZOMBIE:
                        continue
                    t, m = p.cpu_times(), p.memory_info().rss
            except psutil.Error:
                continue
            cpu += t.user + t.system + t.children_user + t.children_system
            rss, top, n = rss + m, max(top, m), n + 1
        return TreeSample(cpu, rss, top, n)


def sample_tree(pid: int, include_root: bool = True) -> TreeSample:
    return TreeSampler(pid, include_root).sample()


def wait_gone(pids: list[int], timeout: float, interval: float = 0.05) -> bool:
    """True once none of `pids` is alive (zombies count as gone: they hold no resources), without
    needing to be their parent."""
    end = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        if not alive:
            return True
        if time.monotonic() >= end:
            return False
        pids = alive
        time.sleep(interval)
