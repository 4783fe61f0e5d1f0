"""Starting the job's process: a new session, the submitter's umask, born in its cgroup, as its
user, dying with its runner (PR_SET_PDEATHSIG). Errors raise launch.StartError.

The job's environment is the submitter's input: it arrives only with the exec that already runs as
the job's user, never in a process that is still root (issue 34: an exported LD_PRELOAD, GCONV_PATH,
MALLOC_*, BASH_ENV … is honoured by the loader, libc or a shell in every process it reaches). Root
steps before the drop run no exec'd program at all, or one with labq's own clean environment.

Three ways, the first that this host has:
- native (worker/_clone.c, built where a C compiler is): clone3 with CLONE_INTO_CGROUP, vfork-style;
  the child sets everything up in C (ids first) and execs the command with its environment: one
  exec, and the job never migrates. A write to cgroup.procs (the other two ways) waits for an RCU
  grace period whenever no other migration happened in the last few ms: ~10 ms of an idle node's
  submit -> start (issue 12).
- setpriv: Popen's own C child switches user (user=, group=, extra_groups=) before its exec, then
  setpriv, already the user, arms the parent-death signal (which that switch would have cleared) and
  execs the command: no Python in the child. A job that enters a cgroup as another user goes the
  preexec way: entering takes root, and no exec'd program may run as root with the job's environment.
  Without a switch (the job's user is the runner's own) a shell first writes itself into cgroup.procs.
- preexec: a Python preexec_fn enters the cgroup, switches user and arms the signal; the exec that
  follows is the first to see the environment (a full fork of the runner: ~3 ms of CPU).
"""
import contextlib
import errno
import functools
import os
import re
import shutil
import signal
import subprocess

from labq.scheduler.jobs import logpath

from . import proctree
from .launch import Identity, StartError

try:
    from . import _clone
except ImportError:       # not built (no C compiler where labq was installed): the setpriv chain
    _clone = None

# Drop privileges first, then chdir: Popen's cwd= is applied while still root, which would let a
# job start in a directory its user may not enter (tech-notes §4.1).
WRAPPER = 'cd -- "$1" || exit 126; shift; exec "$@"'
# Into the job's cgroup (nothing forked yet; only where no user switch follows), then the rest of
# argv; the job never runs outside it: a failed write ends the attempt with 126 and says why in the job's log.
ENTER = 'echo $$ > "$0" || { echo "labq: cannot enter the job\'s cgroup ($0)" >&2; exit 126; }; exec "$@"'
# Dispositions set to SIG_IGN survive exec; the slot runner ignores SIGINT (worker/slot.py), a job must not.
_RESET = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


@contextlib.contextmanager
def _default_signals():
    saved = {s: signal.getsignal(s) for s in _RESET}
    for s, h in saved.items():
        if h == signal.SIG_IGN:
            signal.signal(s, signal.SIG_DFL)
    try:
        yield
    finally:
        for s, h in saved.items():
            if h == signal.SIG_IGN:
                signal.signal(s, h)


def _child_setup(ident: Identity, cgroup_procs: str):
    """What the forked child does before exec (Popen's preexec_fn runs after setsid): enter the
    job's cgroup while still root, so that the job is born there and not a runner moved in and out
    (tech-notes §4.4); drop to the user; then PR_SET_PDEATHSIG, which a change of ids would clear,
    so that the job dies with its runner (fencing)."""
    groups = ident.groups if ident.drop else None

    def setup():
        if cgroup_procs:
            fd = os.open(cgroup_procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if groups is not None:
            os.setgroups(groups)
            os.setresgid(ident.pw.pw_gid, ident.pw.pw_gid, ident.pw.pw_gid)
            os.setresuid(ident.pw.pw_uid, ident.pw.pw_uid, ident.pw.pw_uid)
        proctree.die_with_parent(signal.SIGKILL)
    return setup


@functools.lru_cache(maxsize=1)
def setpriv() -> str:
    """util-linux's setpriv when it can set the parent-death signal, else "". Exec'd between the
    fork and the job, it arms PR_SET_PDEATHSIG after the user switch (which would clear it), so
    the fork needs no Python preexec_fn: that costs ~3 ms of CPU per job (a full fork of the
    runner whose pages the child then copies) where the plain path costs under 1."""
    exe = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if not exe:
        return ""
    try:
        ok = subprocess.run([exe, "--pdeathsig", "KILL", "--", "/bin/true"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return exe if ok else ""


def warm() -> None:
    """What the persistent slot runner does once, before its first attempt: find setpriv (unless
    the native path starts jobs); compile the log-path pattern."""
    if not _native_ok:
        setpriv()
    re.compile(logpath.PATTERN)


def _check_executable(prog: str, env: dict, cwd: str) -> None:
    """StartError, as Popen's own exec would raise it, when `prog` cannot be run."""
    if "/" in prog:
        path = os.path.join(cwd, prog)
        if not os.path.exists(path):
            raise StartError(f"cannot start {prog}: No such file or directory")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise StartError(f"cannot start {prog}: Permission denied")
    elif not shutil.which(prog, path=env.get("PATH", os.defpath)):
        raise StartError(f"cannot start {prog}: No such file or directory")

class Child:
    """The job's leader as the native path started it (the fields of Popen the runner uses); the
    runner reaps it itself (ending.py)."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


_native_ok = _clone is not None


def native() -> bool:
    """Whether spawn starts jobs with worker/_clone.c (built, and the kernel has clone3 with
    CLONE_INTO_CGROUP: Linux 5.7)."""
    return _native_ok


def _candidates(prog: str, env: dict) -> list[bytes]:
    """Where execvp would look for `prog`, in order (the child tries each, as the job's user)."""
    if "/" in prog:
        return [_b(prog)]
    return [_b(f"{d or '.'}/{prog}") for d in env.get("PATH", os.defpath).split(os.pathsep)]


def _b(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")      # os.fsencode on Linux, without its checks


def _above_stdio(fd: int, keep: list) -> int:
    if fd > 2:
        return fd
    dup = os.dup(fd)
    keep.append(dup)
    return dup if dup > 2 else _above_stdio(dup, keep)


def _native(cmd: list[str], env: dict, ident: Identity, workdir: str, out_fd: int, err_fd: int, umask: int,
            cgroup_procs: str) -> Child | None:
    """The job via worker/_clone.c; None where the kernel lacks clone3 or CLONE_INTO_CGROUP (and
    from then on: the setpriv chain)."""
    global _native_ok
    fds: list[int] = []
    try:
        nul = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        fds.append(nul)
        if cgroup_procs:
            try:
                fds.append(os.open(os.path.dirname(cgroup_procs), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            except OSError as e:
                raise StartError(f"cannot start {cmd[0]} in its cgroup: {e.strerror}: {e.filename}") from None
        drop = dict(uid=ident.pw.pw_uid, gid=ident.pw.pw_gid, groups=ident.groups) if ident.drop else {}
        pid = _clone.spawn(_candidates(cmd[0], env), [_b(a) for a in cmd],
                           [_b(f"{k}={v}") for k, v in env.items()], _b(workdir),
                           _above_stdio(nul, fds), _above_stdio(out_fd, fds), _above_stdio(err_fd, fds),
                           cgroup_fd=fds[1] if cgroup_procs else -1, umask=umask,
                           pdeathsig=int(signal.SIGKILL), **drop)
    except OSError as e:
        if e.filename is None and e.errno in (errno.ENOSYS, errno.E2BIG, errno.EINVAL):
            _native_ok = False       # clone3 itself refused: a kernel before 5.7
            return None
        if e.filename == "chdir":
            raise StartError(f"cannot enter the working directory {workdir}: {e.strerror}") from None
        if e.filename is None and cgroup_procs:
            raise StartError(f"cannot start {cmd[0]} in its cgroup {os.path.dirname(cgroup_procs)}: "
                             f"{e.strerror}") from None
        raise StartError(f"cannot start {cmd[0]}: {e.strerror}") from None
    finally:
        for fd in fds:
            os.close(fd)
    return Child(pid)


def spawn(cmd: list[str], env: dict, ident: Identity, workdir: str, out_fd: int, err_fd: int,
          umask: int = 0o022, cgroup_procs: str = "") -> "subprocess.Popen | Child":
    """Start the command in a new session (its own process group, no controlling terminal), with
    the submitter's umask, in the cgroup whose cgroup.procs is `cgroup_procs` ("" = none), as the
    job's user, dying with us, `env` applied by the first exec as that user (module docstring)."""
    if _native_ok:
        child = _native(cmd, env, ident, workdir, out_fd, err_fd, umask, cgroup_procs)
        if child is not None:
            return child
    kw = dict(stdin=subprocess.DEVNULL, stdout=out_fd, stderr=err_fd, env=env, start_new_session=True,
              close_fds=True, umask=umask)
    helper = setpriv()
    if not helper or (ident.drop and cgroup_procs):
        kw["preexec_fn"] = _child_setup(ident, cgroup_procs)
        head = []
    else:
        head = [helper, "--pdeathsig", "KILL", "--"]
        if ident.drop:      # the switch happens in Popen's child before the exec: setpriv is the user
            kw.update(user=ident.pw.pw_uid, group=ident.pw.pw_gid, extra_groups=ident.groups)
        else:
            _check_executable(cmd[0], env, workdir)     # the exec fails after the fork, not here
            if cgroup_procs:    # every step runs as the job's user already
                head = ["/bin/sh", "-c", ENTER, cgroup_procs, *head]
    if ident.drop:
        argv = [*head, "/bin/sh", "-c", WRAPPER, "labq-job", workdir, *cmd]
        kw["cwd"] = "/"
    else:
        argv = [*head, *cmd]
        kw["cwd"] = workdir
    try:
        with _default_signals():
            return subprocess.Popen(argv, **kw)
    except subprocess.SubprocessError as e:      # the child setup failed (preexec_fn raised)
        raise StartError(f"cannot start {cmd[0]}: {e}") from None
    except OSError as e:
        raise StartError(f"cannot start {cmd[0]}: {e.strerror or e}") from None
