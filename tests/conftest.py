"""Shared fixtures: a private redis-server per session on a unix socket, fakeredis, signal hygiene."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import fakeredis
import pytest
import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@dataclass
class RedisProc:
    proc: subprocess.Popen
    sock: str
    dir: str

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.sock, decode_responses=True, **kw)


def start_redis(timeout: float = 20.0, appendonly: bool = True, perm: str = "700") -> RedisProc:
    """A private redis-server. With AOF by default, as the scheduler requires (fsync once a second:
    tests never kill this one)."""
    exe = shutil.which("redis-server")
    if not exe:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="labq-redis-", dir="/tmp")  # a unix socket path must stay under 108 bytes
    sock = os.path.join(d, "redis.sock")
    proc = subprocess.Popen(
        [exe, "--port", "0", "--unixsocket", sock, "--unixsocketperm", perm, "--dir", d, "--save", "",
         "--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec",
         "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if perm != "700":
        os.chmod(d, 0o755)    # other users (tests/test_auth_*.py) must reach the socket
    c, end = redis.Redis(unix_socket_path=sock), time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
        try:
            c.ping()
            return RedisProc(proc, sock, d)
        except (redis.ConnectionError, FileNotFoundError):
            if time.monotonic() > end:
                proc.kill()
                raise
            time.sleep(0.01)


@pytest.fixture(scope="session")
def redis_server():
    rp = start_redis()
    yield rp
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)


@dataclass
class MungeProc:
    proc: subprocess.Popen
    dir: str

    @property
    def socket(self) -> str:
        return os.path.join(self.dir, "munge.sock")


def start_munged(timeout: float = 20.0) -> MungeProc:
    """A private munged: its own key (mungekey), socket, pid, seed and log files in a temp dir."""
    exe = shutil.which("munged") or ("/usr/sbin/munged" if os.path.exists("/usr/sbin/munged") else None)
    if not exe or not shutil.which("mungekey"):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("munge is not installed (apt-get install munge)")
    d = tempfile.mkdtemp(prefix="labq-munge-", dir="/tmp")
    os.chmod(d, 0o755)        # the socket is for every user; the key stays 0600
    subprocess.run([shutil.which("mungekey"), "-c", "-k", f"{d}/munge.key"], check=True)
    proc = subprocess.Popen([exe, "-F", "-f", f"--socket={d}/munge.sock", f"--key-file={d}/munge.key",
                             f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                             f"--seed-file={d}/munged.seed"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    mp, end = MungeProc(proc, d), time.monotonic() + timeout
    while not os.path.exists(mp.socket):
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError("munged did not create its socket")
        time.sleep(0.01)
    return mp


@pytest.fixture(scope="session")
def munged():
    mp = start_munged()
    yield mp
    mp.proc.terminate()
    mp.proc.wait(10)
    shutil.rmtree(mp.dir, ignore_errors=True)


@pytest.fixture
def real_redis(redis_server):
    c = redis_server.client()
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def fake_redis():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)), decode_responses=True)


@pytest.fixture(autouse=True)
def _restore_signals():
    """rq.Worker.work() leaves SIGINT/SIGTERM handlers installed; restore them after each test."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD)
    saved = {s: signal.getsignal(s) for s in sigs}
    yield
    signal.alarm(0)
    for s, h in saved.items():
        signal.signal(s, h)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.05, what: str = "condition"):
    """Poll until predicate() is truthy; generous timeouts keep this deterministic on a loaded machine."""
    end = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
