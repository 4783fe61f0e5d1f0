"""labq.worker.spawn on real processes, on each of its paths (native clone3 where worker/_clone.c is
built, the shell + setpriv chain, the Python preexec): a job in a session of its own, born in its
cgroup, dying with its parent (fencing), as its user with only their groups, in its workdir with its
umask, an environment of exactly what it was given, default signal dispositions and no fd of ours."""
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid

import pytest

from labq.worker import cgroup, launch, spawn
from tests.harness import preload_spy, spied, unix_user, wait_for

PATHS = ("native", "setpriv", "preexec")


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Forces spawn onto one path in this process; `path.env` does it in a child process."""
    name = request.param
    if name == "native" and not spawn.native():
        pytest.skip("worker/_clone.c is not built here (or the kernel has no clone3 into a cgroup)")
    if name == "setpriv" and not spawn.setpriv():
        pytest.skip("no setpriv with --pdeathsig here")
    if name != "native":
        monkeypatch.setattr(spawn, "_native_ok", False)
    if name == "preexec":
        monkeypatch.setattr(spawn, "setpriv", lambda: "")
    return name


def _self_ident() -> launch.Identity:
    return launch.Identity(pwd.getpwuid(os.geteuid()), drop=False)


@pytest.fixture
def job_cgroup():
    """A real job cgroup (root on a host with cgroup v2), or "" where there is none."""
    if os.geteuid() != 0 or not cgroup.v2_mount():
        yield None
        return
    d, _ = cgroup.detect("auto", f"test-spawn-{uuid.uuid4().hex[:8]}", env={})
    if d is None:
        yield None
        return
    cg = cgroup.JobCgroup.for_attempt(d.base, 1, 1)
    cg.create()
    yield cg
    cgroup.sweep(d.base)
    os.rmdir(d.base)


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _read(p, timeout=30.0) -> str:
    wait_for(lambda: os.path.exists(p) and open(p).read().endswith("END\n"), timeout, what=f"{p} to be written")
    return open(p).read()


def test_a_job_is_born_in_its_cgroup_in_its_own_session_and_dies_with_its_parent(path, job_cgroup, tmp_path):
    """The spawner is a separate process here, killed with SIGKILL: its job must die with it."""
    procs = os.path.join(job_cgroup.path, "cgroup.procs") if job_cgroup else ""
    info = tmp_path / "info"
    code = textwrap.dedent(f"""
        import os, pwd, sys
        from labq.worker import launch, spawn
        if {path!r} != "native":
            spawn._native_ok = False
        if {path!r} == "preexec":
            spawn.setpriv = lambda: ""
        ident = launch.Identity(pwd.getpwuid(os.geteuid()), drop=False)
        out = os.open({str(tmp_path / "log")!r}, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        cmd = ["/bin/sh", "-c", 'cat /proc/$$/cgroup > {info}.cg; ps -o sid= -p $$ > {info}.sid; '
               'echo END >> {info}.sid; exec sleep 300']
        p = spawn.spawn(cmd, {{"PATH": "/usr/bin:/bin"}}, ident, {str(tmp_path)!r}, out, out, 0o022, {procs!r})
        print(p.pid, flush=True)
        sys.stdin.read()
    """)
    spawner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        pid = int(spawner.stdout.readline())
        assert int(_read(f"{info}.sid").split()[0]) == pid, "the job leads a session of its own"
        if job_cgroup:
            rel = job_cgroup.path[len(job_cgroup.mount):]
            assert f"0::{rel}\n" in open(f"{info}.cg").read(), "born in the job's cgroup"
            assert pid in job_cgroup.pids()
        assert cgroup.own_cgroup() == cgroup.own_cgroup(spawner.pid), "the spawner never moved"
        spawner.kill()
        spawner.wait(30)
        wait_for(lambda: _dead(pid), 30, what="the job to die with its spawner")
    finally:
        spawner.kill()
        spawner.wait(30)
        if job_cgroup:
            job_cgroup.kill()


@pytest.fixture
def shared_tmp():
    """A directory under /tmp that another user may enter (pytest's tmp_path is root's only)."""
    d = tempfile.mkdtemp(prefix="labq-spawn-", dir="/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_identity_workdir_umask_environment_signals_and_fds(path, shared_tmp):
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    pw = pwd.getpwnam("nobody")
    ident = launch.Identity(pw, drop=True)
    tmp_path = shared_tmp
    wd = tmp_path / "wd"
    wd.mkdir()
    os.chmod(wd, 0o777)
    log = tmp_path / "out"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    os.chmod(log, 0o666)
    leak = os.open(os.devnull, os.O_RDONLY)          # not close-on-exec: must not reach the job anyway
    script = ('id -u; id -g; id -G; pwd; umask; grep -E "^Sig(Ign|Blk)" /proc/self/status; '
              'ls /proc/self/fd | sort -n | tr "\\n" " "; echo; env | sort; echo END')
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGUSR1)}
    try:
        p = spawn.spawn(["sh", "-c", script], {"PATH": "/usr/bin:/bin", "A": "1 2"}, ident, str(wd), fd, fd, 0o027)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        os.close(fd)
        os.close(leak)
    assert p.wait() == 0
    lines = _read(log).splitlines()
    assert lines[:5] == [str(pw.pw_uid), str(pw.pw_gid), " ".join(map(str, ident.groups)), str(wd), "0027"]
    sig = dict(x.split(":") for x in lines[5:7])
    # glibc's own signals 32 and 33 refuse Python's and glibc's sigaction: GNU make (`make test`) leaves
    # them ignored in all it starts, and only the native path resets them (by the raw syscall)
    glibc_own = 0 if path == "native" else (1 << 31) | (1 << 32)
    assert int(sig["SigIgn"], 16) & ~glibc_own == 0, "default dispositions"
    assert int(sig["SigBlk"], 16) == 0, "nothing blocked"
    assert lines[7].split() == ["0", "1", "2", "3"], "stdio and ls's own directory fd only"
    env = dict(x.split("=", 1) for x in lines[8:-1])
    env.pop("PWD", None), env.pop("SHLVL", None), env.pop("_", None), env.pop("OLDPWD", None)
    assert env == {"PATH": "/usr/bin:/bin", "A": "1 2"}


def test_a_command_that_is_not_there_is_a_start_error(path, tmp_path):
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        with pytest.raises(launch.StartError, match="cannot start no-such-command: No such file"):
            spawn.spawn(["no-such-command"], {"PATH": "/usr/bin:/bin"}, _self_ident(), str(tmp_path), fd, fd)
        with pytest.raises(launch.StartError, match="cannot start ./not-here: No such file"):
            spawn.spawn(["./not-here"], {"PATH": "/usr/bin:/bin"}, _self_ident(), str(tmp_path), fd, fd)
        (tmp_path / "plain").write_text("not executable")
        with pytest.raises(launch.StartError, match="cannot start ./plain: Permission denied"):
            spawn.spawn(["./plain"], {"PATH": "/usr/bin:/bin"}, _self_ident(), str(tmp_path), fd, fd)
    finally:
        os.close(fd)


def test_native_enters_the_workdir_as_the_user(shared_tmp):
    """The chain's shell would exit 126 in the job's log; natively it is a StartError (the attempt
    ends `error` with the reason)."""
    if not spawn.native() or os.geteuid() != 0:
        pytest.skip("the native path as root only")
    tmp_path = shared_tmp
    wd = tmp_path / "root-only"
    wd.mkdir(mode=0o700)
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        with pytest.raises(launch.StartError, match="cannot enter the working directory .*Permission denied"):
            spawn.spawn(["true"], {"PATH": "/usr/bin:/bin"}, launch.Identity(pwd.getpwnam("nobody"), drop=True),
                        str(wd), fd, fd)
    finally:
        os.close(fd)


def test_a_job_whose_cgroup_is_gone_is_not_started(path, tmp_path):
    """Natively a StartError (the attempt ends `error`); the chain's shell cannot enter it and exits
    126 with a line in the job's log. Never a job outside its cgroup."""
    if os.geteuid() != 0 or path == "preexec":
        pytest.skip("the chain and the native path, as root")
    out = tmp_path / "out"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    marker = tmp_path / "ran"
    try:
        args = (["/bin/sh", "-c", f"touch {marker}"], {"PATH": "/usr/bin:/bin"}, _self_ident(), str(tmp_path), fd, fd,
                0o022, str(tmp_path / "no-such-cgroup" / "cgroup.procs"))
        if path == "native":
            with pytest.raises(launch.StartError, match="in its cgroup: No such file"):
                spawn.spawn(*args)
        else:
            assert spawn.spawn(*args).wait() == 126
            assert "cannot enter the job's cgroup" in out.read_text()
    finally:
        os.close(fd)
    assert not marker.exists()


def test_an_unprivileged_worker_starts_its_jobs_natively_without_a_cgroup(tmp_path):
    """A user's own worker (no root, no delegated cgroup): the native path still starts the job, as
    that user, in a session of its own, with default dispositions. Run as a user the suite creates."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not spawn.native():
        pytest.skip("creating a user needs root and useradd; the native path needs worker/_clone.c")
    from tests.harness import ROOT
    name = f"lqs{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--user-group", name], check=True)
    try:
        pw = pwd.getpwnam(name)
        d = tempfile.mkdtemp(prefix="labq-spawn-user-", dir="/tmp")
        os.chown(d, pw.pw_uid, pw.pw_gid)
        script = textwrap.dedent(f"""
            import os, pwd
            from labq.worker import launch, spawn
            fd = os.open({d!r} + "/out", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            p = spawn.spawn(["sh", "-c", "id -u; ps -o sid= -p $$; echo $$; grep SigIgn /proc/self/status"],
                            {{"PATH": "/usr/bin:/bin"}}, launch.Identity(pwd.getpwuid(os.geteuid()), drop=False),
                            {d!r}, fd, fd)
            print(type(p).__name__, p.wait())
        """)
        out = subprocess.run([sys.executable, "-c", script], cwd="/tmp", user=pw.pw_uid, group=pw.pw_gid,
                             extra_groups=[], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT},
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.split() == ["Child", "0"], out.stderr
        uid, sid, pid, ign = (pathlib.Path(d) / "out").read_text().splitlines()   # p.wait() returned: all written
        assert uid == str(pw.pw_uid) and sid.strip() == pid, "as the user, leading a session of its own"
        assert int(ign.split()[1], 16) == 0, "default dispositions"
    finally:
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(["userdel", name], check=False)


@pytest.mark.parametrize("in_cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_the_jobs_environment_never_reaches_a_root_process(path, in_cgroup, job_cgroup, shared_tmp):
    """Issue 34: `--export=ALL,LD_PRELOAD=/home/me/evil.so` ran the user's library as uid 0 in the
    chain's root steps (the shell entering the cgroup, setpriv), which started with the job's
    environment. On every path the environment must arrive with the exec that already runs as the
    job's user: the library, built here, is loaded by the job's own processes only."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("gcc"):
        pytest.skip("a real user, a privilege drop and a compiled library need root, useradd and gcc")
    if in_cgroup and job_cgroup is None:
        pytest.skip("no cgroup v2 to enter here")
    procs = os.path.join(job_cgroup.path, "cgroup.procs") if in_cgroup else ""
    lib, out = preload_spy(str(shared_tmp))
    wd = shared_tmp / "wd"
    wd.mkdir()
    os.chmod(wd, 0o777)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": lib, "GCONV_PATH": str(wd), "MALLOC_CHECK_": "3",
           "BASH_ENV": str(wd / "evil.sh"), "ENV": str(wd / "evil.sh")}
    (wd / "evil.sh").write_text(f"touch {wd}/sourced-by-$(id -u)\n")
    log = os.open(shared_tmp / "out", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    os.fchmod(log, 0o666)
    with unix_user("lqp") as pw:
        try:
            p = spawn.spawn(["/bin/sh", "-c", "env > env.txt; cat /proc/self/cgroup > cg.txt"], env, launch.Identity(pw, drop=True), str(wd),
                            log, log, 0o022, procs)
        finally:
            os.close(log)
        assert p.wait() == 0, (shared_tmp / "out").read_text()
        loaded = spied(out)
    assert loaded, "the job itself loads what it exported"
    assert {uid for uid, _ in loaded} == {pw.pw_uid}, f"loaded by a root process: {loaded}"
    assert not (wd / "sourced-by-0").exists()
    job_env = dict(x.split("=", 1) for x in (wd / "env.txt").read_text().splitlines() if "=" in x)
    assert job_env["LD_PRELOAD"] == lib and job_env["MALLOC_CHECK_"] == "3", "the job still gets all of it"
    if in_cgroup:
        assert f"0::{job_cgroup.path[len(job_cgroup.mount):]}\n" in (wd / "cg.txt").read_text(), "in its cgroup"
