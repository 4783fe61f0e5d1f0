"""What WAIT (redis.min_replicas_ack, issue 38) adds to a submit and to a dispatch, on loopback: a
master with two replicas (TCP, AOF everysec), `labq scheduler` on it, and N submits through the thin
client one after another (held jobs, so each round is intake + commit alone), first with
min_replicas_ack = 0, then 1, then 0 again (the first run warms the machine; the two 0-runs bound the
drift). First the bare cost: a MULTI/SET/EXEC with and without the ROLE + WAIT. Then the same for dispatch: N one-job submits that a node (a store-level runner loop in this
process: BLMOVE + claim) takes, timed from the submit's reply to the claim. Medians and p90s in ms.

    .venv/bin/python bench/wait_bench.py [-n 300]
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import redis  # noqa: E402

from labq.scheduler.jobs.model import Gpu  # noqa: E402
from labq.scheduler.store.agentside import AgentStore  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402
from labq.scheduler.thinclient import ThinClient  # noqa: E402

BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 60}


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(d: str, name: str, p: int, master: int | None) -> subprocess.Popen:
    os.makedirs(os.path.join(d, name))
    extra = ["--replicaof", "127.0.0.1", str(master)] if master else []
    return subprocess.Popen(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--dir", os.path.join(d, name),
                             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait(pred, what: str, timeout: float = 60):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def online(r) -> bool:
    try:
        info = r.info("replication")
    except redis.ConnectionError:
        return False
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v["state"] == "online") == 2


def scheduler(d: str, url: str, acks: int) -> subprocess.Popen:
    cfg = os.path.join(d, f"labq-{acks}.toml")
    with open(cfg, "w") as f:
        f.write(f'[redis]\nurl = "{url}"\nmin_replicas_ack = {acks}\n[scheduler]\ntick = 0.5\n')
    # a state directory per run: each starts on a flushed Redis (its state file would call that a loss)
    env = dict(os.environ, LABQ_STATE_DIR=tempfile.mkdtemp(dir=d), LABQ_NO_SYSTEM_CONFIG="1")
    return subprocess.Popen([sys.executable, "-m", "labq", "--config", cfg, "scheduler"], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"sched-{acks}.log"), "w"))


def submits(url: str, n: int) -> list[float]:
    c = ThinClient(url)
    c.submit({**BODY, "hold": True}, timeout=60)       # the first: connections, the inbox's group
    out = []
    for _ in range(n):
        t = time.perf_counter()
        c.submit({**BODY, "hold": True}, timeout=60)
        out.append((time.perf_counter() - t) * 1000)
    return out


def dispatches(r, url: str, n: int) -> list[float]:
    """Submit one runnable job, then time from the reply to its entry on the node's dispatch list."""
    k = Keys()
    c, out = ThinClient(url), []
    for _ in range(n):
        c.submit(dict(BODY), timeout=60)
        t = time.perf_counter()
        got = r.blmove(k.dispatch("bench-node"), k.dispatch("bench-taken"), 10, "RIGHT", "LEFT")
        if got is None:
            raise SystemExit("no dispatch within 10 s")
        out.append((time.perf_counter() - t) * 1000)
        r.set(k.node_lease("bench-node"), "up", px=3_600_000)
    return out


def raw(r, n: int, wait_too: bool) -> list[float]:
    """One SET (+ ROLE and WAIT for every replica, as a WAITed commit does) on one connection."""
    from labq.scheduler.store import conn
    out = []
    for i in range(n):
        t = time.perf_counter()
        with conn.kept_pipeline(r) as (p, keep):
            p.set("bench:wait", i)
            p.execute()
            if wait_too:
                keep.wait(1, conn.WAIT_MS)
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=10)
    return f"median {statistics.median(ms):.2f} ms, p90 {q[-1]:.2f} ms (n={len(ms)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    args = ap.parse_args()
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="labq-waitbench-", dir="/tmp")
    ports = [port(), port(), port()]
    procs = [start_redis(d, f"r{i}", p, ports[0] if i else None) for i, p in enumerate(ports)]
    try:
        r = redis.Redis(host="127.0.0.1", port=ports[0], decode_responses=True, socket_timeout=30)
        wait(lambda: online(r), "both replicas")
        url = f"redis://127.0.0.1:{ports[0]}/0"
        for label, w in (("MULTI SET EXEC", False), ("+ ROLE + WAIT", True), ("MULTI SET EXEC", False)):
            print(f"raw      {label:15}: {summary(raw(r, args.n, w))}", flush=True)
        for what, fn in (("submit", lambda: submits(url, args.n)), ("dispatch", lambda: dispatches(r, url, args.n))):
            for acks in (0, 1, 0):
                r.flushall()
                wait(lambda: online(r), "both replicas")
                AgentStore(r, Keys()).register("bench-node", 100_000, 1 << 40, 100_000, [Gpu("GPU-0", 0, "fake")], "h",
                                               os.getpid(), 3600)
                s = scheduler(d, url, acks)
                try:
                    print(f"{what:8} min_replicas_ack={acks}: {summary(fn())}", flush=True)
                finally:
                    s.send_signal(signal.SIGTERM)
                    s.wait(30)
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
