"""labq.worker.probe: GPU backends (Null, Fake, NVML against a scripted stand-in), host facts, and process
trees of real processes: sampling, signalling escapees, waiting for death."""
import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from labq.scheduler.jobs.model import Gpu
from labq.worker import probe, procscan, proctree
from tests.harness import ROOT, gpu_procs, wait_for


# -- GPU backends ------------------------------------------------------------------------------
def test_fake_backend_uuids_are_stable_per_node_and_index():
    a, b = probe.FakeBackend(2, "H100", "n1"), probe.FakeBackend(2, "H100", "n1")
    assert a.devices() == b.devices()
    assert [g.uuid for g in a.devices()] == ["GPU-fake-n1-0", "GPU-fake-n1-1"]
    assert all(isinstance(g, Gpu) and g.model == "H100" and g.mem > 0 for g in a.devices())
    assert {g.uuid for g in probe.FakeBackend(2, "H100", "n2").devices()}.isdisjoint(
        {g.uuid for g in a.devices()})


def test_fake_backend_samples_and_gpu_procs():
    b = probe.FakeBackend(2, "fake", "n1")
    b.procs = {"GPU-fake-n1-0": {100: 5, 101: 7}, "GPU-fake-n1-1": {100: 3}}
    samples = {s.uuid: s for s in b.sample()}
    assert samples["GPU-fake-n1-0"].mem_used == 12
    assert gpu_procs(b) == {100: 8, 101: 7}


def test_make_gpu_backend_specs():
    assert isinstance(probe.make_gpu_backend(3, "n", "m"), probe.FakeBackend)
    assert len(probe.make_gpu_backend("2", "n", "m").devices()) == 2
    assert probe.make_gpu_backend(0, "n").devices() == []
    assert probe.make_gpu_backend("none", "n").devices() == []
    auto = probe.make_gpu_backend("auto", "n")      # NVML where a driver works, else a CPU node
    assert isinstance(auto, (probe.NullBackend, probe.NvmlBackend))
    assert all(isinstance(g, Gpu) for g in auto.devices())
    auto.close()
    with pytest.raises(ValueError):
        probe.make_gpu_backend("lots", "n")


class _NVMLError(Exception):
    pass


def _fake_nvml(mig_on_gpu1=True):
    """Just enough of pynvml's surface: GPU 0 plain, GPU 1 in MIG mode with slot 1 empty; power
    unsupported everywhere, utilisation unsupported on MIG (as on real hardware)."""
    nv = types.SimpleNamespace(NVML_DEVICE_MIG_ENABLE=1, NVMLError=_NVMLError)
    for name in ("NotSupported", "NoPermission", "FunctionNotFound", "NotFound"):
        setattr(nv, f"NVMLError_{name}", type(name, (_NVMLError,), {}))
    mem = types.SimpleNamespace(total=80 << 30, used=1 << 30)

    def unsupported(*_):
        raise nv.NVMLError_NotSupported()

    def mig_handle(g, j):
        if j == 1:
            raise nv.NVMLError_NotFound()
        return f"mig-{g}-{j}"

    def util(h):
        if h.startswith("mig"):
            raise nv.NVMLError_NotSupported()
        return types.SimpleNamespace(gpu=42)
    nv.__dict__.update(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetUUID=lambda h: ("MIG-" if h.startswith("mig") else "GPU-") + h,
        nvmlDeviceGetName=lambda h: "NVIDIA A100", nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetMigMode=lambda g: [1, 1] if g == "gpu1" and mig_on_gpu1 else unsupported(),
        nvmlDeviceGetMaxMigDeviceCount=lambda g: 3, nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetUtilizationRates=util, nvmlDeviceGetPowerUsage=unsupported,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 1000,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=9, usedGpuMemory=256),
                                                        types.SimpleNamespace(pid=10, usedGpuMemory=None)])
    return nv


def test_nvml_backend_enumerates_mig_and_turns_unsupported_calls_into_none():
    b = probe.NvmlBackend(_fake_nvml())
    assert [(g.uuid, g.index) for g in b.devices()] == [("GPU-gpu0", 0), ("MIG-mig-gpu1-0", 1),
                                                          ("MIG-mig-gpu1-2", 1)]
    s = {x.uuid: x for x in b.sample()}
    assert s["GPU-gpu0"].util == 42 and s["MIG-mig-gpu1-0"].util is None
    assert s["GPU-gpu0"].power_mw is None and s["GPU-gpu0"].energy_mj == 1000
    # N/A memory is None, not guessed; the pid still counts (the placement check needs it)
    assert s["GPU-gpu0"].procs == {9: 256, 10: None}
    assert gpu_procs(b) == {9: 768, 10: 0}
    assert not any(x.lost for x in s.values())
    b.close()


def test_nvml_lost_gpu_is_reported_not_raised_and_a_broken_one_is_left_out():
    """A GPU that fails to enumerate must not turn the node into a CPU node; one lost later is
    reported in its samples (the agent takes it out of service) while the others keep sampling."""
    nv = _fake_nvml(mig_on_gpu1=False)
    nv.NVMLError_GpuIsLost = type("GpuIsLost", (_NVMLError,), {})
    nv.NVMLError_Unknown = type("Unknown", (_NVMLError,), {})
    count, handle = 3, nv.nvmlDeviceGetHandleByIndex

    def by_index(i):
        if i == 2:
            raise nv.NVMLError_Unknown("GPU 2 fell off the bus")
        return handle(i)
    nv.nvmlDeviceGetCount, nv.nvmlDeviceGetHandleByIndex = (lambda: count), by_index
    b = probe.NvmlBackend(nv)
    assert [g.uuid for g in b.devices()] == ["GPU-gpu0", "GPU-gpu1"] and b.broken == [(2, "GPU 2 fell off the bus")]
    util = nv.nvmlDeviceGetUtilizationRates

    def lost_util(h):
        if h == "gpu1":
            raise nv.NVMLError_GpuIsLost("gpu is lost")
        return util(h)
    nv.nvmlDeviceGetUtilizationRates = lost_util
    for _ in range(3):      # every second; logged once, never raised
        s = {x.uuid: x for x in b.sample()}
    assert s["GPU-gpu1"].lost and s["GPU-gpu1"].error == "gpu is lost" and s["GPU-gpu1"].util is None
    assert not s["GPU-gpu0"].lost and s["GPU-gpu0"].util == 42
    assert len(b._logged) == 1


def test_nvml_graphics_processes_count_too():
    nv = _fake_nvml(mig_on_gpu1=False)
    nv.nvmlDeviceGetGraphicsRunningProcesses = lambda h: [types.SimpleNamespace(pid=9, usedGpuMemory=100),
                                                          types.SimpleNamespace(pid=11, usedGpuMemory=50)]
    s = probe.NvmlBackend(nv).sample()[0]
    assert s.procs == {9: 256, 10: None, 11: 50}


def test_fake_backend_json_script_repeats_its_last_step(tmp_path):
    spec = {"count": 2, "model": "H100", "mem": 1 << 30, "samples": [
        {"0": {"util": 90, "energy_mj": 1000, "procs": {"77": 5}}},
        {"GPU-fake-n1-1": {"util": 3, "lost": True}}]}
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(spec))
    b = probe.make_gpu_backend(str(path), "n1")
    assert [(g.uuid, g.model, g.mem) for g in b.devices()] == [("GPU-fake-n1-0", "H100", 1 << 30),
                                                                ("GPU-fake-n1-1", "H100", 1 << 30)]
    first = {s.uuid: s for s in b.sample()}
    assert first["GPU-fake-n1-0"].util == 90 and first["GPU-fake-n1-0"].procs == {77: 5}
    assert first["GPU-fake-n1-1"].util is None and not first["GPU-fake-n1-1"].lost, "unscripted: unknown"
    for _ in range(2):
        later = {s.uuid: s for s in b.sample()}
        assert later["GPU-fake-n1-1"].lost and later["GPU-fake-n1-0"].util is None


def test_host_facts():
    assert probe.host_cpus() >= 1
    assert probe.host_mem() > 1 << 20


# -- process trees -----------------------------------------------------------------------------
def test_sample_tree_of_a_busy_child():
    code = "import time\nx = bytearray(64 << 20)\nt = time.time()\nwhile time.time() - t < 30: pass"
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        # procscan is the one process-tree sampler (the runner's): the child with its descendants
        s = wait_for(lambda: (lambda t: t if t.cpu_s > 0.3 and t.max_rss_bytes > 60 << 20 else None)(
            procscan.stats([p.pid, *procscan.ProcTable(root=p.pid).pids()])), timeout=30,
            what="CPU time and RSS of the busy child")
        assert s.procs == 1 and s.rss_bytes >= s.max_rss_bytes
        table = procscan.ProcTable()                  # ourselves, excluding the root: the child
        assert procscan.stats(table.pids(), table).cpu_s >= s.cpu_s * 0.9
    finally:
        p.kill()
        p.wait()


# Run in a child that is itself a subreaper, like the runner, so that this test process does not
# adopt orphans for the rest of the session.
TREE_KILLER = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from labq.worker import proctree
    proctree.become_subreaper()
    pidfile = sys.argv[2]
    # A TERM-trapping leader, a setsid escapee (own session) and a double fork (orphaned).
    script = ('trap "" TERM; setsid sleep 300 & echo $! >> "$0"; (sleep 301 & echo $! >> "$0") ;'
              'echo $$ >> "$0"; while true; do sleep 0.1; done')
    p = subprocess.Popen(["/bin/bash", "-c", script, pidfile], start_new_session=True)
    end = time.monotonic() + 30
    while len(open(pidfile).read().split()) < 3 and time.monotonic() < end:
        time.sleep(0.02)
    pids = [int(x) for x in open(pidfile).read().split()]
    found = set(proctree.descendants())
    proctree.signal_tree(p.pid, signal.SIGTERM)
    survived_term = not proctree.wait_tree_death(0.5)
    proctree.signal_tree(p.pid, signal.SIGKILL)
    dead = proctree.wait_tree_death(30)
    reaped = 0
    while True:
        try:
            os.waitpid(-1, 0)
            reaped += 1
        except ChildProcessError:
            break
    print(json.dumps({"pids": pids, "found": sorted(found), "survived_term": survived_term,
                      "dead": dead, "reaped": reaped}))
""")


def test_signal_tree_kills_setsid_escapee_and_double_fork(tmp_path):
    pidfile = tmp_path / "pids"
    pidfile.write_text("")
    out = subprocess.run([sys.executable, "-c", TREE_KILLER, ROOT, str(pidfile)], capture_output=True,
                         text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert set(r["pids"]) <= set(r["found"]), "escapees are still our descendants (subreaper)"
    assert r["survived_term"], "the leader traps TERM, so SIGTERM alone does not end the tree"
    assert r["dead"] and r["reaped"] >= 3
    for pid in r["pids"]:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]


def test_wait_gone_and_wait_tree_death_time_out_on_live_processes():
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert probe.wait_gone([p.pid], 0.2) is False
        assert proctree.wait_tree_death(0.2) is False
    finally:
        p.kill()
        p.wait()
    assert probe.wait_gone([p.pid], 5) is True


def test_nvml_stale_mig_handles_are_enumerated_again():
    """Reconfigured MIG instances invalidate their handles: the failing sample marks the backend
    stale, refresh() enumerates again and says whether the devices changed."""
    nv = _fake_nvml()
    nv.NVMLError_InvalidArgument = type("InvalidArgument", (_NVMLError,), {})
    b = probe.NvmlBackend(nv)
    assert [g.uuid for g in b.devices()][1:] == ["MIG-mig-gpu1-0", "MIG-mig-gpu1-2"]
    mem = nv.nvmlDeviceGetMemoryInfo

    def stale(h):
        if h == "mig-gpu1-0":
            raise nv.NVMLError_InvalidArgument("invalid argument")
        return mem(h)
    nv.nvmlDeviceGetMemoryInfo = stale
    s = {x.uuid: x for x in b.sample()}
    assert s["MIG-mig-gpu1-0"].error and not s["MIG-mig-gpu1-0"].lost and b.stale
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetMigDeviceHandleByIndex = lambda g, j: f"mig-{g}-{j}"     # now three instances
    assert b.refresh() is True and not b.stale
    assert [g.uuid for g in b.devices()][1:] == ["MIG-mig-gpu1-0", "MIG-mig-gpu1-1", "MIG-mig-gpu1-2"]
    assert b.refresh() is False, "unchanged"
