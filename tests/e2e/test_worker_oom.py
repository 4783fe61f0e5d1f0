"""Memory limits and the `oom` outcome, with real processes: the runner in its job cgroup, the
runner's own watchdog where the kernel enforces nothing, and the host's OOM evidence. The exit code
alone never says OOM: a wrapper shell exits 0 after its child was killed."""
import os
import signal
import sys
import uuid

import pytest

from labq.worker import cgroup, memwatch
from tests.harness import finished, put_job, run, runner_env, wait_for

PY = sys.executable
MB = 1 << 20
# Allocate and touch N MiB after a pause (so the runner's 1 Hz sampler sees the process first).
HOG = "import time; time.sleep({pause}); x = bytearray({mb} << 20); x[::4096] = b'1' * len(x[::4096]); time.sleep(60)"


def hog(mb, pause=1.5):
    return HOG.format(mb=mb, pause=pause)


# -- pure parts --------------------------------------------------------------------------------
def test_watchdog_needs_pss_to_confirm_and_confirms_at_most_every_few_seconds():
    now, calls = [100.0], []

    def pss(pids):
        calls.append(list(pids))
        return pss.value
    pss.value = 50 * MB
    w = memwatch.Watchdog(100 * MB, pss, clock=lambda: now[0])
    assert w.check(90 * MB, [1]) is None and calls == [], "under the limit: no PSS read at all"
    assert w.check(300 * MB, [1, 2, 3]) is None and calls == [[1, 2, 3]], "shared pages: PSS is under"
    assert w.check(300 * MB, [1, 2, 3]) is None and len(calls) == 1, "not again within CONFIRM_EVERY"
    now[0] += memwatch.CONFIRM_EVERY
    pss.value = 150 * MB
    why = w.check(300 * MB, [1, 2, 3])
    assert "150M (PSS" in why and "limit of 100M" in why and w.last_pss == 150 * MB
    assert memwatch.Watchdog(0, pss).check(10 << 40, [1]) is None, "no limit, no watchdog"


def test_host_oom_needs_the_counter_to_move_and_a_victim_of_ours():
    none = lambda since: set()       # noqa: E731
    assert memwatch.host_oom(5, 5, True, {10}, 0, none) is None, "the counter did not move"
    assert memwatch.host_oom(None, 9, True, {10}, 0, none) is None, "unreadable counter"
    assert "SIGKILL" in memwatch.host_oom(5, 6, True, {10}, 0, none)
    assert memwatch.host_oom(5, 6, False, {10, 11}, 0, lambda since: {99}) is None, "someone else's process"
    assert "process 11" in memwatch.host_oom(5, 6, False, {10, 11}, 0, lambda since: {11, 99})


def test_kernel_victims_parses_oom_lines_after_a_time(tmp_path):
    log = tmp_path / "kmsg"
    log.write_bytes(b"3,100,1000,-;Out of memory: Killed process 111 (python3) total-vm:1kB\n"
                    b"6,101,5000,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=222,uid=0\n"
                    b" SUBSYSTEM=memory\n"
                    b"3,102,6000,-;Memory cgroup out of memory: Killed process 222 (python3)\n"
                    b"6,103,7000,-;EXT4-fs mounted filesystem pid=333\n")
    assert memwatch.kernel_victims(2000, str(log)) == {222}
    assert memwatch.kernel_victims(0, str(log)) == {111, 222}
    assert memwatch.kernel_victims(0, str(tmp_path / "missing")) == set()


# -- the runner's watchdog (no memory cgroup) ---------------------------------------------------
def test_watchdog_kills_a_tree_over_its_limit_even_behind_a_wrapper(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("/bin/bash", "-c", f'{PY} -c "{hog(200)}"; echo wrapper-survived; exit 0'),
            workdir=str(tmp_path), mem=64 * MB, mem_limit=96 * MB, time_limit=120)
    res = run(runner_env(redis_server, tmp_path))
    body = finished(real_redis)
    assert res["outcome"] == body["outcome"] == "oom", body
    assert "watchdog" in body["message"] and "limit of 96M" in body["message"]
    assert body["usage"]["mem_limit_bytes"] == 96 * MB and body["usage"]["max_pss_bytes"] > 96 * MB
    assert "wrapper-survived" not in (tmp_path / "labq-1.out").read_text(), "the whole tree was killed"


def test_shared_pages_are_not_counted_once_per_process(real_redis, redis_server, tmp_path):
    """A parent and 3 forked children share 80 MiB: RSS sums to ~320 MiB, PSS stays ~80 MiB.
    A 200 MiB limit must not kill it (this is why RSS alone is not trusted)."""
    code = ("import os, time; x = bytearray(80 << 20); x[::4096] = b'1' * len(x[::4096]); "
            "kids = [os.fork() or (time.sleep(3.5), os._exit(0)) for _ in range(3)]; "
            "[os.waitpid(k, 0) for k in kids]; print('done')")
    put_job(real_redis, argv=(PY, "-c", code), workdir=str(tmp_path), mem=200 * MB, time_limit=120)
    res = run(runner_env(redis_server, tmp_path))
    body = finished(real_redis)
    assert res["outcome"] == "completed", body
    assert body["usage"]["max_rss_bytes"] >= 80 * MB
    assert (tmp_path / "labq-1.out").read_text() == "done\n"


# -- the host's OOM killer, made to act through a cgroup v1 memory limit ------------------------
@pytest.fixture
def v1_memcg():
    """A cgroup v1 memory controller limit for the job to put itself in: the kernel's OOM killer
    then kills one process (not the wrapper), as a host OOM would, and counts it in /proc/vmstat."""
    base = "/sys/fs/cgroup/memory"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(base, "memory.limit_in_bytes")):
        pytest.skip("needs root and a cgroup v1 memory controller to provoke a real kernel OOM kill safely")
    if memwatch.host_oom_kills() is None:
        pytest.skip("/proc/vmstat has no oom_kill counter (Linux < 4.13)")
    d = os.path.join(base, f"labq-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(d)
    with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
        f.write(str(64 * MB))
    yield d
    wait_for(lambda: not open(os.path.join(d, "cgroup.procs")).read().strip(), 30, what="the memcg to empty")
    os.rmdir(d)


def test_host_oom_behind_a_wrapper_that_exits_0_is_oom(real_redis, redis_server, tmp_path, v1_memcg):
    script = (f'echo $BASHPID > {v1_memcg}/cgroup.procs; {PY} -c "{hog(200)}"; echo wrapper-exits-0; exit 0')
    put_job(real_redis, argv=("/bin/bash", "-c", script), workdir=str(tmp_path), time_limit=120)  # no --mem
    before = memwatch.host_oom_kills()
    res = run(runner_env(redis_server, tmp_path))
    body = finished(real_redis)
    assert memwatch.host_oom_kills() > before, "the kernel did OOM-kill"
    assert "wrapper-exits-0" in (tmp_path / "labq-1.out").read_text()
    assert body["exit_code"] == 0, "the exit code says success"
    assert res["outcome"] == body["outcome"] == "oom", body
    assert "OOM killer" in body["message"]


# -- the runner in its job cgroup ----------------------------------------------------------------
@pytest.fixture
def real_base():
    if os.geteuid() != 0:
        pytest.skip("needs root: job cgroups are made by the root agent")
    d, why = cgroup.detect("auto", f"test-{uuid.uuid4().hex[:8]}", env={})
    if d is None:
        pytest.skip(f"no usable cgroup v2 here: {why}")
    yield d
    cgroup.sweep(d.base)
    os.rmdir(d.base)


def test_runner_puts_the_job_in_its_cgroup_and_removes_it(real_redis, redis_server, tmp_path, real_base):
    pids = tmp_path / "escapee"
    script = f"cat /proc/self/cgroup; setsid sleep 300 & echo $! > {pids}; exit 0"
    put_job(real_redis, jid=4, argv=("/bin/bash", "-c", script), workdir=str(tmp_path), mem=256 * MB)
    res = run(runner_env(redis_server, tmp_path, LABQ_CGROUP_BASE=real_base.base), jid=4)
    assert res["outcome"] == "completed"
    rel = real_base.base[len(cgroup.v2_mount()):] + "/job-4-a1"
    assert f"0::{rel}" in (tmp_path / "labq-4.out").read_text().splitlines()
    escapee = int(pids.read_text())
    assert not os.path.exists(f"/proc/{escapee}"), "cgroup.kill took the escapee"
    assert not os.path.exists(os.path.join(real_base.base, "job-4-a1")), "the cgroup is removed"
    usage = finished(real_redis)["usage"]
    assert "cgroup_cpu_s" in usage and usage["cgroup_cpu_s"] >= 0
    if "memory" in real_base.controllers:
        assert "mem_peak_bytes" in usage


def test_runner_oom_in_a_memory_cgroup(real_redis, redis_server, tmp_path, real_base):
    if "memory" not in real_base.controllers:
        pytest.skip(f"the memory controller is not delegated here ({real_base.describe()})")
    put_job(real_redis, jid=5, argv=("/bin/bash", "-c", f'{PY} -c "{hog(200, 0)}"; exit 0'),
            workdir=str(tmp_path), mem=64 * MB, time_limit=120)
    res = run(runner_env(redis_server, tmp_path, LABQ_CGROUP_BASE=real_base.base), jid=5)
    body = finished(real_redis)
    assert res["outcome"] == body["outcome"] == "oom", body
    assert "limit of 64M" in body["message"] and body["usage"]["oom_kills"] >= 1
    assert body["signal"] == signal.SIGKILL, "memory.oom.group killed the wrapper too"
