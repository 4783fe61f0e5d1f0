"""Starting labq's three processes on one machine: a private redis-server, the scheduler, a worker.

Used by `labq up`, `labq demo`, the end-to-end tests and the benchmarks, so that all of them run
exactly what a user runs. Children get their own process group (a Ctrl-C reaches only us, and we
stop them in order: worker, scheduler, Redis) and die with us if we are killed (PDEATHSIG).
"""
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

from labq.scheduler.errors import UnreachableError, UsageError

PR_SET_PDEATHSIG = 1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def redis_server_path() -> str:
    exe = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
    if not exe:
        raise UsageError("redis-server is not installed: run `apt-get install -y redis-server` "
                         "(or set redis.url to an existing Redis)")
    return exe


class Stack:
    def __init__(self, state_dir: str, config_path: str | None, redis_url: str = "", log=None,
                 log_dir: str | None = None, verbose: bool = False):
        """`log`: one open file for every process's output (tests); `log_dir`: a file per process
        (`labq up`), appended to across runs; neither: output discarded."""
        self.state_dir, self.config_path = state_dir, config_path
        self.url = redis_url
        self.procs: dict[str, subprocess.Popen] = {}
        self.log = log if log is not None else subprocess.DEVNULL
        self.log_dir, self.verbose = log_dir, verbose
        self.worker_args: tuple[str, ...] = ()     # extra `labq worker` flags (labq up as root: --allow-root)
        if log_dir:
            os.makedirs(log_dir, mode=0o700, exist_ok=True)

    def _out(self, name: str):
        if not self.log_dir:
            return self.log
        path = os.path.join(self.log_dir, f"{name}.log")
        rotate(path)
        return open(path, "ab", buffering=0)

    def _close(self, out) -> None:
        if self.log_dir:        # the child has its own copy
            out.close()

    # -- redis ---------------------------------------------------------------------------------
    def start_redis(self, timeout: float = 20.0) -> str:
        d = os.path.join(self.state_dir, "redis")
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
        sock = os.path.join(d, "redis.sock")
        if len(sock) > 100:
            raise UsageError(f"state directory path too long for a unix socket: {sock}")
        out = self._out("redis")
        self.procs["redis"] = subprocess.Popen(
            [redis_server_path(), "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir", d,
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
             "--loglevel", "warning"],
            stdout=out, stderr=out, process_group=0, preexec_fn=_die_with_parent)
        self._close(out)
        self.url = f"unix://{sock}"
        end = time.monotonic() + timeout
        from labq.scheduler.store.thinstore import ping
        while True:
            if self.procs["redis"].poll() is not None:
                raise UsageError(f"redis-server exited with {self.procs['redis'].returncode}; see {d}")
            why = ping(self.url)
            if why is None:
                return self.url
            if time.monotonic() > end:
                raise UnreachableError(f"redis-server at {sock} does not answer within {timeout:.0f}s: {why}")
            time.sleep(0.02)

    # -- labq daemons --------------------------------------------------------------------------
    def command(self, *args) -> list[str]:
        cfg = ["--config", self.config_path] if self.config_path else []
        return [sys.executable, "-m", "labq.cli.main", *cfg, *args]

    def env(self) -> dict:
        # LABQ_STATE_DIR: this stack's own state (its accounting archive, the scheduler's state
        # file), never the caller's.
        env = dict(os.environ, LABQ_REDIS_URL=self.url, PYTHONUNBUFFERED="1", LABQ_STATE_DIR=self.state_dir)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def start(self, name: str, *args) -> subprocess.Popen:
        out = self._out(name)
        if self.verbose and args and args[0] in ("scheduler", "worker"):
            args = (*args, "-v")
        p = subprocess.Popen(self.command(*args), env=self.env(), stdout=out, stderr=out,
                             process_group=0, preexec_fn=_die_with_parent)
        self._close(out)
        self.procs[name] = p
        return p

    def start_all(self) -> None:
        if not self.url:
            self.start_redis()
        self.start("scheduler", "scheduler")
        self.start("worker", "worker", *self.worker_args)

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def stop(self, name: str, timeout: float = 30.0, sig=signal.SIGTERM) -> int | None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait(10)

    def stop_all(self, timeout: float = 30.0) -> None:
        for name in ("worker", "scheduler", "redis"):
            self.stop(name, timeout)
        for name in list(self.procs):
            self.stop(name, timeout)


LOG_MAX_BYTES, LOG_KEEP = 10 << 20, 3


def rotate(path: str, max_bytes: int = LOG_MAX_BYTES, keep: int = LOG_KEEP) -> None:
    """A daemon's log past `max_bytes` becomes PATH.1 (PATH.1 becomes PATH.2, …, `keep` kept) when
    the daemon (re)starts: `labq up`'s logs no longer grow for ever. (The daemons write through the
    descriptor they were given, so a log rotates at a start, never under a running daemon.)"""
    try:
        if os.path.getsize(path) < max_bytes:
            return
    except OSError:
        return
    for i in range(keep - 1, 0, -1):
        if os.path.exists(f"{path}.{i}"):
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    os.replace(path, f"{path}.1")
