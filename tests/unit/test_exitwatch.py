"""The agent's watch of its runners' job leaders (worker/exitwatch.py, issue 35): it marks a named
leader's exit the moment it happens, though the leader is not its child and nobody reaps it, and
never takes another process (a reused pid, another leader of the slot) for the named one."""
import os
import subprocess
import sys
import time

import pytest

from labq.worker import exitwatch
from tests.harness import wait_for


def _child(spool: str) -> subprocess.Popen:
    """A process that exits once `spool/go` exists (left unreaped: a frozen runner's leader)."""
    code = "import os, time\nwhile not os.path.exists(%r): time.sleep(0.01)" % os.path.join(spool, "go")
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_named_leader_is_marked_when_it_exits_not_when_it_is_reaped(tmp_path):
    spool = str(tmp_path)
    p = _child(spool)
    start = exitwatch.note(spool, 2, p.pid)
    w = exitwatch.Watch(spool)
    w.start()
    try:
        wait_for(lambda: 2 in w.fds, 30, what="the watch to hold the leader's pidfd")
        assert exitwatch.exited_at(spool, 2, p.pid, start) is None       # alive: no mark
        open(os.path.join(spool, "go"), "w").close()
        wait_for(lambda: exitwatch.exited_at(spool, 2, p.pid, start), 30, what="the exit mark")
        at = exitwatch.exited_at(spool, 2, p.pid, start)
        assert at is not None and at <= time.time()
        assert open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"    # still unreaped
        # another process's key (start ticks) is not this mark's
        assert exitwatch.exited_at(spool, 2, p.pid, (start or 0) + 1) is None
        assert exitwatch.exited_at(spool, 3, p.pid, start) is None
    finally:
        p.wait()
        w.stop()
    assert not w.is_alive()


def test_a_leader_named_with_another_process_start_is_not_watched(tmp_path):
    spool = str(tmp_path)
    p = _child(spool)
    try:
        # as if the named leader was reaped and its pid taken by this process before the watch looked
        exitwatch._write(exitwatch._path(spool, 1, "leader"), {"pid": p.pid, "start": exitwatch.started(p.pid) - 1})
        w = exitwatch.Watch(spool)
        w._rescan()
        assert 1 in w.named and 1 not in w.fds
        exitwatch.forget(spool, 1)
        w._rescan()
        assert w.named == {} and w.fds == {}
    finally:
        open(os.path.join(spool, "go"), "w").close()
        p.wait()


def test_a_new_leader_of_the_slot_drops_the_last_ones_mark(tmp_path):
    spool = str(tmp_path)
    exitwatch._write(exitwatch._path(spool, 4, "exit"), {"pid": 1, "start": 5, "at": 1000.0})
    assert exitwatch.exited_at(spool, 4, 1, None) == 1000.0
    p = _child(spool)
    try:
        exitwatch.note(spool, 4, p.pid)
        assert exitwatch.exited_at(spool, 4, 1, None) is None
    finally:
        open(os.path.join(spool, "go"), "w").close()
        p.wait()


def test_the_watch_waits_on_descriptors_numbered_1024_and_above():
    """select(2) raises ValueError for a descriptor of 1024 or more: the test run's exit watch died
    so once the run held that many files (ci at b692a81). proctree.readable polls instead."""
    import resource

    from labq.worker import proctree
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1600:
        pytest.skip(f"the hard limit on open files here is {hard}: no descriptor 1500 to test with")
    if soft != resource.RLIM_INFINITY and soft < 1600:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1600, hard))
    r, w = os.pipe()
    high = os.dup2(r, 1500)
    try:
        assert proctree.readable([high], 0) == set()
        os.write(w, b"x")
        assert proctree.readable([high], 5) == {high}
    finally:
        for fd in (r, w, high):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
