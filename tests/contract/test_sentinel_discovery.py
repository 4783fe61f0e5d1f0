"""Finding the master through Sentinel (store/sentinel.py), on a real redis-server and a real
`redis-server --sentinel` on loopback: the thin connection (store/resp.py) and the daemons' redis-py
client both skip a sentinel that does not answer and reach the master the next one names; a service
no sentinel knows is one line naming every sentinel's answer; a demoted master's READONLY sends the
thin connection back to the sentinels."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

from labq.scheduler.store import conn, resp, sentinel as sentinel_mod
from tests.harness import wait_for


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def watched():
    """(master port, sentinel port, dead port): one master watched by one sentinel."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="labq-sentinel-c-", dir="/tmp")
    master, sentinel, dead = _port(), _port(), _port()
    conf = os.path.join(d, "sentinel.conf")
    with open(conf, "w") as f:
        f.write(f"port {sentinel}\nbind 127.0.0.1\ndir {d}\nsentinel monitor labq 127.0.0.1 {master} 1\n")
    procs = [subprocess.Popen([exe, "--port", str(master), "--bind", "127.0.0.1", "--save", "", "--dir", d],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([exe, conf, "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        s = redis.Redis(host="127.0.0.1", port=sentinel, decode_responses=True)

        def knows():
            try:
                return s.sentinel_get_master_addr_by_name("labq")
            except redis.RedisError:
                return None
        wait_for(knows, 30, 0.05, what="the sentinel to know the master")
        yield master, sentinel, dead
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def test_the_thin_connection_skips_a_dead_sentinel(watched):
    master, sentinel, dead = watched
    c = resp.Connection(f"sentinel://127.0.0.1:{dead},127.0.0.1:{sentinel}/labq?ack=0")
    assert c.execute("SET", "k", "thin") == "OK"
    assert (c.opts["host"], c.opts["port"]) == ("127.0.0.1", master)
    assert c.opts["sentinels"][0] == ("127.0.0.1", sentinel)     # the one that answered is asked first next time
    c.close()


def test_the_daemons_client_skips_a_dead_sentinel(watched):
    master, sentinel, dead = watched
    r = conn.connect(f"sentinel://127.0.0.1:{dead},127.0.0.1:{sentinel}/labq?ack=1")
    r.set("k", "daemon")
    assert redis.Redis(host="127.0.0.1", port=master, decode_responses=True).get("k") == "daemon"
    assert r.labq_min_ack == 1 and "labq" in conn.describe(r)


def test_an_unknown_service_is_one_line_naming_each_sentinel(watched):
    _, sentinel, dead = watched
    c = resp.Connection(f"sentinel://127.0.0.1:{dead},127.0.0.1:{sentinel}/nosuch?failover_wait=0.5")
    with pytest.raises(resp.ConnectionLost) as e:
        c.execute("PING")
    text = str(e.value)
    assert "\n" not in text and f"127.0.0.1:{dead}" in text and "knows no master named 'nosuch'" in text, text


def test_a_demoted_master_sends_the_thin_connection_back_to_the_sentinels(watched):
    master, sentinel, _ = watched
    c = resp.Connection(f"sentinel://127.0.0.1:{sentinel}/labq?failover_wait=1")
    assert c.execute("SET", "k", "1") == "OK"
    m = redis.Redis(host="127.0.0.1", port=master)
    m.replicaof("127.0.0.1", _port())      # demoted behind Sentinel's back: READONLY from now on
    try:
        with pytest.raises(resp.ConnectionLost) as e:
            c.execute("SET", "k", "2")
        # asked the sentinel again, which still names this server, whose ROLE is no longer master
        assert "no longer the master" in str(e.value) or "refuses writes" in str(e.value), str(e.value)
    finally:
        m.replicaof("NO", "ONE")


@pytest.fixture
def frozen(watched):
    """watched, plus a second sentinel of the same master, SIGSTOPped once it knows the master: a
    frozen sentinel accepts connections (the kernel does) and never answers."""
    master, sentinel, _ = watched
    d = tempfile.mkdtemp(prefix="labq-sentinel-f-", dir="/tmp")
    port = _port()
    with open(os.path.join(d, "sentinel.conf"), "w") as f:
        f.write(f"port {port}\nbind 127.0.0.1\ndir {d}\nsentinel monitor labq 127.0.0.1 {master} 1\n")
    p = subprocess.Popen([shutil.which("redis-server"), os.path.join(d, "sentinel.conf"), "--sentinel"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)

        def knows():
            try:
                return s.sentinel_get_master_addr_by_name("labq")
            except redis.RedisError:
                return None
        wait_for(knows, 30, 0.05, what="the second sentinel to know the master")
        p.send_signal(signal.SIGSTOP)
        yield master, sentinel, port
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


# Generous: a frozen sentinel costs one SENTINEL_TIMEOUT per question; redis-py's own 30 s socket
# timeout (and its retries) made each of these wait 30 s or more.
BOUND = sentinel_mod.SENTINEL_TIMEOUT * 3


def test_the_daemons_client_moves_past_a_frozen_sentinel(frozen):
    master, live, stopped = frozen
    t0 = time.monotonic()
    r = conn.connect(f"sentinel://127.0.0.1:{stopped},127.0.0.1:{live}/labq?ack=0")
    r.set("k", "past-frozen")
    took = time.monotonic() - t0
    assert redis.Redis(host="127.0.0.1", port=master, decode_responses=True).get("k") == "past-frozen"
    assert took < BOUND, f"discovery took {took:.1f} s with one sentinel frozen"
    # The check after WAIT asks every sentinel, the frozen one included: it answers the live one's
    # figures and the frozen one's timeout, within the bound too.
    c = r.connection_pool.get_connection()
    try:
        t0 = time.monotonic()
        why, _ = sentinel_mod.doubt_redis_py(r.connection_pool, c)
        took = time.monotonic() - t0
    finally:
        r.connection_pool.release(c)
    assert took < BOUND, f"the sentinel check took {took:.1f} s with one sentinel frozen ({why})"


def test_the_thin_connection_moves_past_a_frozen_sentinel(frozen):
    master, live, stopped = frozen
    t0 = time.monotonic()
    c = resp.Connection(f"sentinel://127.0.0.1:{stopped},127.0.0.1:{live}/labq?ack=0")
    assert c.execute("SET", "k", "thin-past-frozen") == "OK"
    took = time.monotonic() - t0
    c.close()
    assert (c.opts["host"], c.opts["port"]) == ("127.0.0.1", master)
    assert took < BOUND, f"discovery took {took:.1f} s with one sentinel frozen"
