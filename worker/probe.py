"""What this machine has and what its processes do: GPUs (NVML, or Null/Fake), CPUs, memory, and
process trees (sampling, signalling, waiting for death).

The only module of the worker that imports psutil or pynvml, so the rest of the agent can be read
and tested without either of them behaving like hardware.
"""
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field

import psutil

from labq.scheduler.jobs.model import Gpu

log = logging.getLogger("labq.probe")



# -- GPUs --------------------------------------------------------------------------------------
@dataclass
class GpuSample:
    uuid: str
    util: int | None = None            # percent; None where NVML does not support it (MIG)
    mem_used: int | None = None        # bytes
    power_mw: int | None = None
    energy_mj: int | None = None       # counter since driver load; a job's energy is its delta
    procs: dict[int, int | None] = field(default_factory=dict)   # host pid -> GPU memory bytes (None: N/A)
    lost: bool = False                 # the GPU fell off the bus / needs a reset (NVML GpuIsLost)
    error: str = ""                    # why this sample is empty, when it is


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
    restarted agent advertises the same devices and the scheduler's allocations stay valid.

    `script` is a list of samples, one per call (the last one repeats): each maps a GPU (its
    uuid, or its index as a string) to GpuSample fields; a GPU a step leaves out reports no
    utilisation, power or energy."""

    def __init__(self, n: int, model: str = "fake", node: str = "local", mem: int = 80 << 30,
                 script: list | None = None):
        self._devs = [Gpu(f"GPU-fake-{node}-{i}", i, model, mem) for i in range(n)]
        self.procs: dict[str, dict[int, int]] = {}    # uuid -> {pid: bytes}, set by tests
        self.script = list(script or [])
        self.calls = 0

    @classmethod
    def from_json(cls, path: str, node: str) -> "FakeBackend":
        """{"count": 2, "model": "H100", "mem": bytes, "samples": [...]} (worker.gpus = "PATH.json")."""
        with open(path) as f:
            spec = json.load(f)
        return cls(int(spec.get("count", 1)), spec.get("model", "fake"), node, int(spec.get("mem", 80 << 30)),
                   spec.get("samples") or [])

    def devices(self) -> list[Gpu]:
        return list(self._devs)

    def sample(self) -> list[GpuSample]:
        step = self.script[min(self.calls, len(self.script) - 1)] if self.script else {}
        self.calls += 1
        out = []
        for d in self._devs:
            procs = dict(self.procs.get(d.uuid, {}))
            # Unscripted fake GPUs report no utilisation, power or energy (None, as MIG does), so a
            # demo's jobs are neither "idle" nor charged energy they never used.
            s = GpuSample(d.uuid, mem_used=sum(b or 0 for b in procs.values()), procs=procs)
            fields = step.get(d.uuid) or step.get(str(d.index)) or {}
            for k, v in fields.items():
                if k == "procs":
                    v = {int(p): b for p, b in v.items()}
                setattr(s, k, v)
            out.append(s)
        return out

    def close(self) -> None:
        """Nothing to release."""


class NvmlBackend:
    """Real GPUs through NVML. MIG slices are advertised instead of their parent,
    because a MIG job gets exactly one slice and its UUID is the CUDA_VISIBLE_DEVICES token.
    A GPU that fails to enumerate is left out (`broken`) instead of making the node a CPU node;
    one that is lost later is reported in its samples (`lost`), never raised."""

    def __init__(self, nv):
        self.nv = nv
        self._handles: dict[str, object] = {}
        self._devs: list[Gpu] = []
        self.broken: list[tuple[int, str]] = []      # (NVML index, error) of GPUs left out
        self.stale = False                            # a MIG handle failed: enumerate again
        self._logged: set[tuple[str, str]] = set()
        nv.nvmlInit()
        try:
            self._enumerate()
        except nv.NVMLError:
            nv.nvmlShutdown()
            raise

    def _enumerate(self) -> None:
        """(Re)build the device list; assigned at the end, so another thread's devices() never
        sees half of it."""
        nv, handles, devs, broken = self.nv, {}, [], []
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                g = nv.nvmlDeviceGetHandleByIndex(i)
                for h in self._migs(g) or [g]:
                    uuid = nv.nvmlDeviceGetUUID(h)
                    mem = self._opt(nv.nvmlDeviceGetMemoryInfo, h)
                    handles[uuid] = h
                    devs.append(Gpu(uuid, i, nv.nvmlDeviceGetName(h), mem.total if mem else 0))
            except nv.NVMLError as e:
                log.error("GPU %d left out: NVML says %s", i, e)
                broken.append((i, str(e)))
        self._handles, self._devs, self.broken = handles, devs, broken

    def refresh(self) -> bool:
        """Enumerate again after a MIG handle went stale (instances were reconfigured); True when
        the devices changed (the agent then re-registers the node)."""
        before = [g.uuid for g in self._devs]
        try:
            self._enumerate()
        except self.nv.NVMLError as e:
            log.warning("NVML re-enumeration failed: %s", e)
            return False
        self.stale = False
        return [g.uuid for g in self._devs] != before

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
            except nv.NVMLError as e:     # a lost or resetting GPU: report it, keep the others
                lost = isinstance(e, getattr(nv, "NVMLError_GpuIsLost", ()))
                self.stale = self.stale or (d.uuid.startswith("MIG-") and not lost)
                if (d.uuid, type(e).__name__) not in self._logged:      # once per GPU and error, not per second
                    self._logged.add((d.uuid, type(e).__name__))
                    log.warning("NVML sample of %s failed: %s", d.uuid, e)
                out.append(GpuSample(d.uuid, lost=lost, error=str(e)))
        return out

    def _sample_one(self, uuid: str, h) -> GpuSample:
        nv = self.nv
        mem = self._opt(nv.nvmlDeviceGetMemoryInfo, h)
        util = self._opt(nv.nvmlDeviceGetUtilizationRates, h)
        return GpuSample(
            uuid, util=util.gpu if util else None, mem_used=mem.used if mem else None,
            power_mw=self._opt(nv.nvmlDeviceGetPowerUsage, h),
            energy_mj=self._opt(nv.nvmlDeviceGetTotalEnergyConsumption, h), procs=self._procs(h))

    def _procs(self, h) -> dict[int, int | None]:
        """Compute and graphics processes on the device: pid -> GPU memory, None where NVML says
        N/A (the pid still counts: the placement check needs to know it is there)."""
        out: dict[int, int | None] = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(self.nv, name, None)
            for p in (self._opt(fn, h) or []) if fn else []:
                b = p.usedGpuMemory
                out[p.pid] = max(out.get(p.pid) or 0, b) if b is not None else out.get(p.pid)
        return out

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
    """`spec` is config worker.gpus: "auto" (NVML where it works, else none), "none", a number of
    fake GPUs, or the path of a JSON file of fake GPUs with scripted samples."""
    if spec in ("auto", None, ""):
        return _nvml_or_none() or NullBackend()
    if spec == "none":
        return NullBackend()
    if isinstance(spec, str) and spec.endswith(".json"):
        return FakeBackend.from_json(os.path.expanduser(spec), node_name)
    if isinstance(spec, str) and spec.isdigit():
        spec = int(spec)
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return FakeBackend(spec, model, node_name) if spec else NullBackend()
    raise ValueError(f"worker.gpus: expected \"auto\", a number of fake GPUs or a .json file, got {spec!r}")


# -- host --------------------------------------------------------------------------------------
def host_cpus() -> int:
    """CPUs this process may run on: the affinity mask, which a container or cpuset narrows."""
    try:
        return len(psutil.Process().cpu_affinity()) or psutil.cpu_count() or 1
    except (AttributeError, psutil.Error):
        return psutil.cpu_count() or 1


def host_mem() -> int:
    return psutil.virtual_memory().total


def psutil_children(pid: int) -> list[int]:
    """Direct children of `pid` through psutil (for a kernel without /proc/<pid>/task/<tid>/children)."""
    try:
        return [p.pid for p in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def tree_pss(pids) -> int:
    """Proportional set size of the processes, summed: shared pages counted once in all. Costs
    a read of /proc/<pid>/smaps_rollup each (24 ms for a 2 GiB process), so it is sampled rarely."""
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            total += psutil.Process(pid).memory_full_info().pss
    return total


def wait_gone(pids: list[int], timeout: float, interval: float = 0.05) -> bool:
    """True once none of `pids` is alive (zombies count as gone: they hold no resources), without
    needing to be their parent."""
    end = time.monotonic() + timeout
    while True:
        left = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
        if not left:
            return True
        if time.monotonic() >= end:
            return False
        pids = left
        time.sleep(interval)
