"""labq.worker.procscan: the incremental process table finds the same tree psutil does (escapees
included, strangers excluded), notices exits and pid reuse, and reads CPU and RSS from one stat."""
import json
import os
import subprocess
import sys
import textwrap

from labq.worker import procscan
from tests.harness import ROOT

# In a child that is a subreaper, like the runner: a setsid escapee and a double-forked orphan
# stay its descendants; a stranger (a sibling of the child, not below it) must not be counted.
SCAN = textwrap.dedent("""
    import json, os, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from labq.worker import procscan, proctree
    proctree.become_subreaper()
    t = procscan.ProcTable()
    assert t.pids() == []
    p = subprocess.Popen(["/bin/bash", "-c", "setsid sleep 300 & (sleep 301 &) ; exec python3 -c "
                          "'x = bytearray(40 << 20); x[::4096] = b\\"1\\" * len(x[::4096]); import time; time.sleep(300)'"])
    end = time.monotonic() + 30
    while len(proctree.descendants()) < 3 and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)
    mine = sorted(t.pids())
    want = sorted(proctree.descendants())
    s = procscan.stats(mine, t, t.seen)
    p.kill(); p.wait()
    time.sleep(0.1)
    after = sorted(t.pids())
    proctree.signal_tree(None, 9)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    print(json.dumps({"mine": mine, "want": want, "rss": s.rss_bytes, "procs": s.procs, "after": after,
                      "seen": sorted(t.seen), "leader": p.pid, "foreign": len(t.foreign)}))
""")


def test_table_matches_psutil_and_follows_exits():
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        # This interpreter, not `python3` from PATH: a pyenv shim is a chain of processes that, on a
        # loaded machine, has not yet exec'd into Python when the table is compared.
        scan = SCAN.replace("exec python3 ", f"exec {sys.executable} ")
        out = subprocess.run([sys.executable, "-c", scan, ROOT], capture_output=True, text=True, timeout=90)
    finally:
        stranger.kill()
        stranger.wait()
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["mine"] == r["want"] and len(r["mine"]) == 3, "leader, setsid escapee and orphan"
    assert stranger.pid not in r["mine"] and r["foreign"] > 0
    assert r["rss"] >= 40 << 20 and r["procs"] == 3
    assert r["leader"] not in r["after"] and len(r["after"]) == 2, "the killed leader left the table"
    assert set(r["mine"]) <= set(r["seen"])


def test_stat_fields_and_reused_pids_are_dropped():
    p = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        st = procscan.read_stat(p.pid)
        assert st.ppid == os.getpid() and st.state in "RSD" and st.rss > 0 and st.start > 0
        t = procscan.ProcTable()         # our children: p, and whatever else the test session runs
        assert p.pid in t.pids()
        t.members[p.pid] = st.start - 1           # as if the pid had been reused since it was seen
        assert procscan.stats([p.pid], t).procs == 0 and p.pid not in t.members
        assert p.pid in t.pids(), "re-classified as the new process it now is"
    finally:
        p.kill()
        p.wait()
    assert procscan.read_stat(p.pid) is None


def test_stat_of_a_process_whose_name_has_spaces_and_parentheses():
    """comm is the user's to choose: the fields are counted from the last ')'."""
    code = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, b'x) (S 1 2', 0, 0, 0); "
            "print(open('/proc/self/comm').read().strip(), flush=True); time.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "x) (S 1 2"
        st = procscan.read_stat(p.pid)
        assert st.ppid == os.getpid() and st.state in "RS" and st.rss > 1 << 20
    finally:
        p.kill()
        p.wait()
