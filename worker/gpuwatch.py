"""GPU samples: taken once per node, on their own thread, and accounted per job by its runner.

NVML calls can block for seconds on a sick GPU, so they never run on the agent's
main loop (lease, watchdog pings) nor in a runner's watch loop (deadlines, signals). The agent's
`Monitor` thread samples every GPU once a second and replaces `<spool>/gpu.json` atomically; each
runner reads that file on its tick and keeps its own job's figures (`Account`). A stalled monitor
leaves the file stale, and stale samples count for nothing.

Snapshot: {"ts": epoch, "node": name, "gpus": {uuid: {"util", "mem_used", "power_mw", "energy_mj",
"procs": {pid: bytes|null}, "lost"}}}.
"""
import json
import logging
import os
import threading
import time

from labq.scheduler.units import fmt_duration

log = logging.getLogger("labq.gpuwatch")

SNAPSHOT = "gpu.json"
INTERVAL = 1.0
STALE = 5.0          # a sample older than this is not counted (the monitor is stuck)
MAX_GAP = 5.0        # at most this many seconds are credited between two counted samples


def snapshot_path(spool: str) -> str:
    return os.path.join(spool, SNAPSHOT)


# -- the agent side ----------------------------------------------------------------------------
class Monitor:
    """Samples `backend` every `interval` seconds on a daemon thread and writes the snapshot.
    `lost` collects the GPUs NVML reported lost (the agent takes them out of service)."""

    def __init__(self, backend, path: str, node: str, interval: float = INTERVAL, clock=time.time):
        self.backend, self.path, self.node, self.interval, self.clock = backend, path, node, interval, clock
        self.lost: dict[str, str] = {}
        self.samples = 0
        self.changed = False        # the device list changed (MIG reconfigured): re-register
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="labq-gpu-monitor", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def once(self) -> None:
        try:
            samples = self.backend.sample()
        except Exception as e:         # a backend bug or a driver gone: keep the agent alive
            if not self._failing:
                log.error("GPU sampling failed: %r (again every %.0fs until it works)", e, self.interval)
            self._failing = True
            return
        self._failing = False
        if getattr(self.backend, "stale", False) and self.backend.refresh():
            log.warning("GPU devices changed: %s", ", ".join(g.uuid for g in self.backend.devices()))
            self.changed = True
        for s in samples:
            if s.lost and s.uuid not in self.lost:
                self.lost[s.uuid] = s.error or "lost"
                log.error("GPU %s is lost (%s)", s.uuid, self.lost[s.uuid])
        now = self.clock()
        doc = {"ts": now, "node": self.node, "gpus": {
            s.uuid: {"util": s.util, "mem_used": s.mem_used, "power_mw": s.power_mw, "energy_mj": s.energy_mj,
                     "procs": {str(p): b for p, b in s.procs.items()}, "lost": s.lost} for s in samples}}
        try:
            write_snapshot(self.path, doc)
        except OSError as e:
            log.warning("cannot write %s: %s", self.path, e)
            return
        self.samples += 1


def write_snapshot(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps(doc, separators=(",", ":")).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


# -- the runner side ---------------------------------------------------------------------------
class Account:
    """One attempt's GPU figures from the snapshots, and the alerts they call for."""

    def __init__(self, path: str, job, gpus, node: str, idle_util: float = 5.0, idle_after: float = 1800.0,
                 clock=time.time):
        self.path, self.job, self.gpus, self.node = path, job, tuple(gpus), node
        self.idle_util, self.idle_after, self.clock = idle_util, idle_after, clock
        self._mtime = None
        self._last_ts: float | None = None
        self.util_sum, self.util_n, self.util_peak = 0.0, 0, None
        self.mem_peak: int | None = None
        self.energy0: dict[str, int] = {}
        self.energy1: dict[str, int] = {}
        self.idle_s = 0.0
        self._idle_since: dict[str, float] = {}
        self._idle_alerted: set[str] = set()
        self._misplaced: set[str] = set()
        self.lost: str | None = None
        self.samples = 0

    def _read(self) -> dict | None:
        """The snapshot if a new, fresh one is there, else None (cheap when nothing changed)."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self._mtime:
                return None
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
        except (OSError, ValueError):
            return None
        self._mtime = mtime
        ts = doc.get("ts")
        if not isinstance(ts, (int, float)) or self.clock() - ts > STALE:
            return None
        if self._last_ts is not None and ts <= self._last_ts:
            return None
        return doc

    def tick(self, pids) -> list[dict]:
        """Fold in the newest snapshot; the alert bodies to post (each at most once per episode)."""
        doc = self._read()
        if doc is None:
            return []
        ts, devs = doc["ts"], doc.get("gpus") or {}
        dt = min(ts - self._last_ts, MAX_GAP) if self._last_ts is not None else 0.0
        self._last_ts = ts
        self.samples += 1
        alerts = []
        mem = None
        for uuid in self.gpus:
            d = devs.get(uuid)
            if not d:
                continue
            if d.get("lost"):
                self.lost = self.lost or uuid
            if d.get("mem_used") is not None:
                mem = (mem or 0) + d["mem_used"]
            if d.get("energy_mj") is not None:
                self.energy0.setdefault(uuid, d["energy_mj"])
                self.energy1[uuid] = d["energy_mj"]
            if d.get("util") is not None:
                alerts += self._util(uuid, d["util"], ts, dt)
        if mem is not None:
            self.mem_peak = max(self.mem_peak or 0, mem)
        alerts += self._placement(devs, set(pids))
        return alerts

    def _util(self, uuid: str, util: float, ts: float, dt: float) -> list[dict]:
        self.util_sum, self.util_n = self.util_sum + util, self.util_n + 1
        self.util_peak = max(self.util_peak or 0, util)
        if util >= self.idle_util:
            self._idle_since.pop(uuid, None)
            self._idle_alerted.discard(uuid)      # busy again: a later idle stretch alerts anew
            return []
        self.idle_s += dt
        since = self._idle_since.setdefault(uuid, ts)
        idle = ts - since
        if self.idle_after <= 0 or idle < self.idle_after or uuid in self._idle_alerted:
            return []
        self._idle_alerted.add(uuid)
        return [self._alert("idle_gpu", f"job {self.job.display_id} ({self.job.user}) has kept GPU {uuid} on node "
                            f"{self.node} under {self.idle_util:g}% utilisation for {fmt_duration(idle)}",
                            gpu=uuid, util_threshold=self.idle_util, idle_s=round(idle, 1))]

    def _placement(self, devs: dict, pids: set) -> list[dict]:
        """The job's processes must use only its own GPUs (CUDA_VISIBLE_DEVICES can be unset)."""
        out = []
        for uuid, d in devs.items():
            if uuid in self.gpus or uuid in self._misplaced:
                continue
            on = sorted(int(p) for p in (d.get("procs") or {}) if int(p) in pids)
            if on:
                self._misplaced.add(uuid)
                mine = ", ".join(self.gpus) or "none"
                out.append(self._alert("gpu_misplaced", f"job {self.job.display_id} ({self.job.user}) has processes "
                                       f"{', '.join(map(str, on))} on GPU {uuid} of node {self.node}, which is not "
                                       f"allocated to it (its GPUs: {mine})", gpu=uuid, pids=on, allocated=list(self.gpus)))
        return out

    def _alert(self, kind: str, message: str, **data) -> dict:
        return {"kind": kind, "scope": f"job:{self.job.id}", "level": "warn", "message": message,
                "data": {"node": self.node, "user": self.job.user, **data}}

    def usage(self) -> dict:
        """The attempt's GPU figures for `usage` ({} when no sample was ever seen)."""
        if not self.samples or not self.gpus:
            return {}
        out = {"gpu_samples": self.samples}
        if self.util_n:
            out.update(gpu_util_mean=round(self.util_sum / self.util_n, 1), gpu_util_peak=self.util_peak,
                       gpu_idle_s=round(self.idle_s, 1))
        if self.mem_peak is not None:
            # Device memory in use on the job's GPUs (each is the job's alone), summed: unlike the
            # per-process figures it needs no pid namespace match and sees CUDA contexts too.
            out["gpu_mem_peak"] = self.mem_peak
        # A whole GPU is allocated to one job at a time, so its counter's delta is the job's; a MIG
        # slice shares its parent's counter with other slices' jobs.
        whole = [u for u in self.gpus if not u.startswith("MIG-")]
        deltas = [self.energy1[u] - self.energy0[u] for u in whole if u in self.energy1]
        if whole and len(deltas) == len(whole) and all(d >= 0 for d in deltas):
            out["energy_j"] = round(sum(deltas) / 1000, 1)
        return out
