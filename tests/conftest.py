"""Shared fixtures: a private redis-server per session on a unix socket, fakeredis, the store pair on both,
signal hygiene. Helpers (functions, constants) live in tests/harness.py: `from tests.harness import ...`."""
import os
import shutil
import signal
import sys
import tempfile

import fakeredis
import pytest
import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.harness import E2E, SECRET, start_munged, start_postgres, start_redis  # noqa: E402  (needs ROOT on sys.path)

# Hermetic: a machine's /etc/labq/labq.toml (a system install) changes no test. Every labq the suite
# starts inherits this (the CLI honours it: cli/out.py · config_source); --config/$LABQ_CONFIG still apply.
os.environ["LABQ_NO_SYSTEM_CONFIG"] = "1"
# Nor does the state of whoever runs it (~/.local/state/labq: a `labq up` socket, a spool, an archive):
# the defaults resolve under a directory of the session's own, world-traversable like /tmp so that the
# unprivileged users the suite creates may resolve theirs there too.
if not os.environ.get("XDG_STATE_HOME", "").startswith(tempfile.gettempdir() + "/labq-state-"):
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="labq-state-")
    os.chmod(os.environ["XDG_STATE_HOME"], 0o1777)
# Nor its cache (~/.cache/labq: `labq CMD --help` pages, the thin client's settings), written by every
# labq the suite runs and read back under a stamp another checkout could match.
if not os.environ.get("XDG_CACHE_HOME", "").startswith(tempfile.gettempdir() + "/labq-cache-"):
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="labq-cache-")
os.environ.pop("LABQ_STATE_DIR", None)
os.environ.pop("STATE_DIRECTORY", None)


@pytest.fixture(scope="session")
def redis_server():
    rp = start_redis()
    yield rp
    rp.proc.terminate()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)


@pytest.fixture
def private_redis():
    """A redis-server of this test's own: its ACL roles, stops and restarts (rp.proc replaced, same
    socket and AOF) touch no other test."""
    rp = start_redis()
    yield rp
    rp.proc.kill()
    rp.proc.wait(10)
    shutil.rmtree(rp.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL cluster for the session (skipped with the reason where it cannot start)."""
    pg = start_postgres()
    yield pg
    pg.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def archive_at(request, tmp_path):
    """Where an accounting archive goes: a SQLite file, then a fresh PostgreSQL database; the
    archive's contract tests run on both."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return request.getfixturevalue("postgres").new_database(f"t{os.getpid()}_{abs(hash(request.node.nodeid))}")


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


@pytest.fixture(params=["fake", "real"])
def conns(request):
    """(decoded, raw) clients on one server: fakeredis, then a real redis-server, for the same tests."""
    if request.param == "fake":
        server = fakeredis.FakeServer(version=(7, 0))
        yield (fakeredis.FakeRedis(server=server, decode_responses=True), fakeredis.FakeRedis(server=server))
    else:
        rp = request.getfixturevalue("redis_server")
        c = rp.client()
        c.flushall()
        yield c, redis.Redis(unix_socket_path=rp.sock)


@pytest.fixture(scope="module")
def stack():
    """One E2E stack per module whose daemons hold a variable (SECRET) no job may see."""
    # The daemons inherit this variable; no job may see it.
    os.environ["LABQ_TEST_DAEMON_SECRET"] = SECRET
    try:
        e = E2E()
    finally:
        del os.environ["LABQ_TEST_DAEMON_SECRET"]
    yield e
    e.close()


@pytest.fixture(autouse=True)
def _restore_signals():
    """Code under test (an agent run in a thread, a runner) installs SIGINT/SIGTERM handlers;
    restore them after each test."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD)
    saved = {s: signal.getsignal(s) for s in sigs}
    yield
    signal.alarm(0)
    for s, h in saved.items():
        signal.signal(s, h)
