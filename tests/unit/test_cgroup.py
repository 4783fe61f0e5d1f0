"""labq.worker.cgroup: finding a delegated subtree, one cgroup per job, placement at spawn, kill, usage.

Two halves. A fake cgroupfs (a directory whose control files the test pre-creates) checks what is
written and parsed on any machine. Real cgroup v2 tests run where this process is root and a
cgroup2 hierarchy is writable (here: the hybrid host's /sys/fs/cgroup/unified, which has no
controllers, so membership, cgroup.kill, cpu.stat and removal are real, and memory.max is not);
the memory-controller test runs only where memory is delegated, and says so when skipped.
"""
import os
import signal
import subprocess
import sys
import uuid

import pytest

from labq.worker import cgroup
from tests.harness import wait_for

# -- a fake cgroupfs ---------------------------------------------------------------------------
CONTROL = {"cgroup.procs": "", "cgroup.events": "populated 0\nfrozen 0\n", "memory.swap.max": "max\n",
           "memory.oom.group": "0\n", "memory.max": "max\n", "cpu.max": "max 100000\n", "pids.max": "max\n",
           "cgroup.kill": ""}


@pytest.fixture
def fakefs(tmp_path, monkeypatch):
    """mkdir makes a cgroup with the kernel's control files; writes to subtree_control add."""
    real_mkdir, real_write = os.mkdir, cgroup._write

    def mkdir(path, mode=0o777):
        real_mkdir(path, mode)
        for name, text in CONTROL.items():
            (tmp_path / path / name).write_text(text)
        (tmp_path / path / "cgroup.controllers").write_text(_parent_subtree(path))
        (tmp_path / path / "cgroup.subtree_control").write_text("")

    def _parent_subtree(path):
        p = os.path.join(os.path.dirname(path), "cgroup.subtree_control")
        return open(p).read() if os.path.exists(p) else ""

    def write(path, value):
        if path.endswith("cgroup.subtree_control") and value.startswith("+"):
            have = set(open(path).read().split())
            value = " ".join(sorted(have | {value[1:]}))
            # What a cgroup enables for its children is what they may use (cgroup.controllers).
            d = os.path.dirname(path)
            for child in os.scandir(d):
                if child.is_dir():
                    real_write(os.path.join(child.path, "cgroup.controllers"), value)
        real_write(path, value)

    monkeypatch.setattr(cgroup.os, "mkdir", mkdir)
    monkeypatch.setattr(cgroup, "_write", write)
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("1\n")
    return root


def test_off_and_missing_hierarchy_say_why(tmp_path):
    assert cgroup.detect("off", "n") == (None, 'worker.cgroups = "off"')
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 0:21 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    assert cgroup.v2_mount(str(mi)) is None
    mi.write_text("22 1 0:21 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                  "30 1 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    assert cgroup.v2_mount(str(mi)) == "/sys/fs/cgroup/unified"


def test_systemd_delegation_moves_the_agent_into_a_leaf_and_enables_controllers(fakefs):
    unit = fakefs / "system.slice" / "labq-worker.service"
    unit.mkdir(parents=True)
    for name, text in {"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "",
                       "cgroup.procs": f"{os.getpid()}\n"}.items():
        (unit / name).write_text(text)
    env = {"INVOCATION_ID": "abc"}
    # Without Delegate=yes systemd sets no delegate mark: the unit's tree is systemd's, not ours.
    assert cgroup._delegate_mark(str(unit)) is not True
    if cgroup._delegate_mark(str(unit)) is False:
        d, why = cgroup.detect("auto", "n1", mount=str(fakefs), own="/system.slice/labq-worker.service", env=env)
        assert d is None and "Delegate=yes" in why
    os.setxattr(unit, "user.delegate", b"1")      # what systemd >= 251 sets with Delegate=yes
    d, why = cgroup.detect("auto", "n1", mount=str(fakefs), own="/system.slice/labq-worker.service",
                           env={"INVOCATION_ID": "abc"})
    assert why == "" and d.base == str(unit) and d.how == "systemd"
    assert (unit / "agent" / "cgroup.procs").read_text() == str(os.getpid()), "moved out of the inner node"
    assert d.controllers == {"cpu", "memory", "pids"}, "io is not asked for"
    # Detected again from inside the leaf (the runner, a second call): the same unit.
    again, _ = cgroup.detect("auto", "n1", mount=str(fakefs), own="/system.slice/labq-worker.service/agent",
                             env={"INVOCATION_ID": "abc"})
    assert again.base == str(unit)


def test_not_a_unit_and_not_root_finds_nothing(fakefs, monkeypatch):
    monkeypatch.setattr(cgroup.os, "geteuid", lambda: 1000)
    d, why = cgroup.detect("auto", "n1", mount=str(fakefs), own="/user.slice/session-1.scope", env={})
    assert d is None and "not root" in why


def test_root_subtree_per_node(fakefs, monkeypatch):
    monkeypatch.setattr(cgroup.os, "geteuid", lambda: 0)
    d, _ = cgroup.detect("auto", "gpu/node 7", mount=str(fakefs), own="/", env={})
    assert d.base == str(fakefs / "labq" / "gpu_node_7") and d.how == "root"
    other, _ = cgroup.detect("auto", "gpu/node 7", mount=str(fakefs), own="/", env={}, instance="labq@unix:///a")
    assert other.base.startswith(str(fakefs / "labq" / "gpu_node_7-")) and other.base != d.base, \
        "another installation's node of the same name gets its own subtree"
    assert set((fakefs / "cgroup.subtree_control").read_text().split()) == {"cpu", "memory", "pids"}
    assert d.controllers == {"cpu", "memory", "pids"}
    assert "watchdog" not in d.describe()


def test_job_cgroup_limits_and_usage(fakefs):
    base = fakefs / "base"
    os.mkdir(base)
    (base / "cgroup.subtree_control").write_text("cpu memory pids\n")
    cg = cgroup.JobCgroup.for_attempt(str(base), 12, 3, mount=str(fakefs))
    assert cg.name == "job-12-a3"
    cg.create(mem_max=4 << 30, cpus=2, pids_max=500)
    f = lambda n: (base / "job-12-a3" / n).read_text()     # noqa: E731
    assert (f("memory.max"), f("memory.swap.max"), f("memory.oom.group")) == (str(4 << 30), "0", "1")
    assert f("cpu.max") == "200000 100000" and f("pids.max") == "500"
    (base / "job-12-a3" / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
                                                 "nr_periods 10\nnr_throttled 4\nthrottled_usec 750000\n")
    (base / "job-12-a3" / "memory.peak").write_text("123456789\n")
    (base / "job-12-a3" / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\noom_group_kill 1\n")
    assert cg.usage() == {"cgroup_cpu_s": 2.5, "cpu_throttled_periods": 4, "cpu_throttled_s": 0.75,
                          "mem_peak_bytes": 123456789, "mem_max_hits": 7, "oom_kills": 2}
    assert cg.memory_events()["oom_kill"] == 2


def test_no_request_means_no_limit_and_a_busy_leftover_is_refused(fakefs):
    base = fakefs / "base"
    os.mkdir(base)
    (base / "cgroup.subtree_control").write_text("memory\n")
    cg = cgroup.JobCgroup(str(base), "job-1-a1", mount=str(fakefs))
    cg.create(mem_max=0, cpus=4)
    assert (base / "job-1-a1" / "memory.max").read_text() == "max" and cg.mem_max is None
    assert (base / "job-1-a1" / "cpu.max").read_text() == "max 100000\n", "no cpu controller: untouched"
    (base / "job-1-a1" / "cgroup.events").write_text("populated 1\n")
    with pytest.raises(OSError, match="has processes"):
        cgroup.JobCgroup(str(base), "job-1-a1", mount=str(fakefs)).create()


# -- real cgroup v2 ----------------------------------------------------------------------------
def _real_base():
    """A private delegated subtree on this machine, or a skip that says why there is none."""
    if os.geteuid() != 0:
        pytest.skip("needs root: job cgroups are made by the root agent")
    mount = cgroup.v2_mount()
    if not mount:
        pytest.skip("no cgroup v2 hierarchy on this machine")
    d, why = cgroup.detect("auto", f"test-{uuid.uuid4().hex[:8]}", env={})
    if d is None:
        pytest.skip(f"no usable cgroup v2 here: {why}")
    return d


@pytest.fixture
def real_base():
    d = _real_base()
    yield d
    cgroup.sweep(d.base)
    os.rmdir(d.base)


def _cgroup_of(pid):
    return cgroup.own_cgroup(pid)


def test_real_child_is_born_in_its_cgroup_and_kill_reaches_escapees(real_base, tmp_path):
    cg = cgroup.JobCgroup.for_attempt(real_base.base, 1, 1)
    cg.create(mem_max=1 << 30)
    home = cgroup.own_cgroup()
    pids = tmp_path / "pids"
    script = (f'setsid sleep 300 & echo $! >> {pids}; (sleep 301 & echo $! >> {pids}); echo $$ >> {pids}; '
              f'python3 -c "x = 0\nfor i in range(3_000_000): x += i"; wait')
    cg.enter()
    try:
        p = subprocess.Popen(["/bin/bash", "-c", script], start_new_session=True)
    finally:
        assert cg.leave()
    assert cgroup.own_cgroup() == home, "the spawner moved back out"
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 3, 30, what="the tree to start")
    tree = [int(x) for x in pids.read_text().split()]
    rel = cg.path[len(cg.mount):]
    assert all(_cgroup_of(x) == rel for x in tree), "escapees stay in the job's cgroup"
    assert set(tree) <= set(cg.pids()) and cg.populated()
    wait_for(lambda: cg.usage().get("cgroup_cpu_s", 0) > 0.05, 30, what="cpu.stat to count the job")
    cg.kill()
    assert p.wait(30) == -signal.SIGKILL
    wait_for(lambda: not cg.populated(), 30, what="the cgroup to empty")
    assert cg.remove() and not os.path.exists(cg.path)


def test_real_sweep_kills_what_an_earlier_agent_left(real_base):
    cg = cgroup.JobCgroup.for_attempt(real_base.base, 7, 2)
    cg.create()
    cg.enter()
    try:
        p = subprocess.Popen(["sleep", "300"])
    finally:
        cg.leave()
    assert cgroup.sweep(real_base.base) == ["job-7-a2"]
    assert p.wait(30) == -signal.SIGKILL and not os.path.exists(cg.path)


def test_real_memory_limit_kills_the_job_and_memory_events_say_so(real_base):
    if "memory" not in real_base.controllers:
        pytest.skip(f"the memory controller is not delegated here ({real_base.describe()}); on a hybrid host "
                    "it is bound to cgroup v1 and the runner's watchdog stands in")
    cg = cgroup.JobCgroup.for_attempt(real_base.base, 3, 1)
    cg.create(mem_max=64 << 20)
    hog = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"
    cg.enter()
    try:
        p = subprocess.Popen(["/bin/bash", "-c", f"{sys.executable} -c \"{hog}\"; true"])
    finally:
        cg.leave()
    # memory.oom.group: the OOM kill takes the whole job, the wrapper shell included.
    assert p.wait(60) == -signal.SIGKILL
    assert cg.memory_events().get("oom_kill", 0) >= 1
    if cg.has("memory.swap.max"):
        assert open(os.path.join(cg.path, "memory.swap.max")).read().strip() == "0"
    cg.kill()
    assert cg.remove()


def test_an_agents_own_subtree_goes_at_its_stop_a_units_stays(tmp_path):
    """Issue 36: 122 directories under /sys/fs/cgroup/unified/labq after a day of tests."""
    mine, units = tmp_path / "labq-node-1234", tmp_path / "labq-worker.service"
    mine.mkdir()
    units.mkdir()
    cgroup.release(cgroup.Delegation(str(units), frozenset(), "systemd"))
    cgroup.release(cgroup.Delegation(str(mine), frozenset(), "root"))
    assert units.exists() and not mine.exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "cgroup.procs").write_text("1\n")      # what rmdir cannot remove (EBUSY on cgroupfs)
    cgroup.release(cgroup.Delegation(str(busy), frozenset(), "root"), timeout=0.2)   # not empty: left, no error
    assert busy.exists()
