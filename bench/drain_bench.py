"""How fast the scheduler drains its inboxes: N submit requests are queued first (LPUSHed straight onto
the request list, as clients would leave them), then the scheduler's ticks are timed until every
one is answered. Redis runs with appendonly + appendfsync always, like the stack, so each
transaction costs an fsync. Also: one 10,000-task array request, from read to reply.

The scheduler runs in this process (no daemon loop, no wake-up latency): what is timed is the
intake, the handlers and the commits. The jobs are submitted held, so the plan admits nothing.

    .venv/bin/python bench/drain_bench.py [N]      # N queued submits, then `labq stat` over them and a 10,000-task array
    .venv/bin/python bench/drain_bench.py --memory # RSS around a 100,000-task array
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import redis

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store import conn
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.commit import tune_gc
from labq.scheduler.store.keys import Keys

CFG = """
[scheduler]
max_pending = 1000000
max_pending_per_user = 1000000
[accounts.parked]
users = [{users}]
"""
USERS = [f"u{i}" for i in range(8)]
# Held (-H): the jobs stay pending and the plan admits nothing (max_running = 0 is refused at submit).
BODY = {"argv": ["true"], "workdir": "/tmp", "cpus": 1, "mem": 1 << 20, "time_limit": 60, "account": "parked",
        "hold": True}


class Redis:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-drain-", dir="/tmp")
        self.sock = os.path.join(self.dir, "r.sock")
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", self.sock, "--dir", self.dir, "--save", "",
                                      "--appendonly", "yes", "--appendfsync", "always"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 20
        while True:
            try:
                redis.Redis(unix_socket_path=self.sock).ping()
                return
            except (redis.ConnectionError, FileNotFoundError):
                if time.monotonic() > end:
                    raise
                time.sleep(0.02)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def scheduler(sock: str) -> Scheduler:
    r = conn.connect(f"unix://{sock}")     # as the daemon connects (cli/daemons.py)
    AgentStore(r, Keys()).register("n1", 64, 256 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(8)],
                                   "h", 1, 3600)
    cfg = config.loads(CFG.format(users=", ".join(f'"{u}"' for u in USERS)))
    s = Scheduler(r, cfg, me="bench")
    s.tick(time.time())
    return s


def queue(r, k: Keys, n: int, body=BODY, tag="r") -> list[str]:
    rids = [f"{tag}{i}" for i in range(n)]
    text = json.dumps(body)
    p = r.pipeline(transaction=False)
    for i, rid in enumerate(rids):
        p.lpush(k.requests, json.dumps({"rid": rid, "op": "submit", "body": text, "user": USERS[i % len(USERS)]}))
        if i % 1000 == 999:
            p.execute()
    p.execute()
    return rids


def drain(n: int) -> dict:
    rs = Redis()
    try:
        s = scheduler(rs.sock)
        tune_gc()
        rids = queue(s.store.r, s.k, n)
        t0, c0 = time.perf_counter(), time.process_time()
        ticks = 0
        while not s.store.r.exists(s.k.reply(rids[-1])):
            s.tick(time.time())
            ticks += 1
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        rate = n / dt
        stat_s, stat_cpu_s = stat_times(rs.sock)
        s.state.last_plan = time.time()   # the array is timed from read to reply, not the plan after it
        rid = queue(s.store.r, s.k, 1, {**BODY, "array": [1, 10_000, 1]}, tag="arr")[0]
        t0, c0 = time.perf_counter(), time.process_time()
        while not s.store.r.exists(s.k.reply(rid)):
            s.tick(time.time())
        arr, arr_cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"requests": n, "seconds": dt, "rate": rate, "ticks": ticks, "array10k_s": arr, "cpu_s": cpu,
                "array10k_cpu_s": arr_cpu, "stat_s": stat_s, "stat_cpu_s": stat_cpu_s}
    finally:
        rs.close()




def stat_times(sock: str, k: int = 3) -> tuple[float, float]:
    """(median wall s, median CPU s) of a whole `labq stat` process over the queue the drain left
    (one single job per request: no array to fold), as a user runs it: no PYTHONPATH, bytecode
    written. Its output goes to /dev/null (a terminal would add the time to draw it)."""
    import resource
    import statistics
    d = tempfile.mkdtemp(prefix="labq-drain-stat-", dir="/tmp")
    try:
        cfg = os.path.join(d, "labq.toml")
        with open(cfg, "w") as f:
            f.write("[scheduler]\n")
        env = {k2: v for k2, v in os.environ.items() if k2 not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        env.update(LABQ_REDIS_URL=f"unix://{sock}", XDG_CACHE_HOME=d)
        argv = [sys.executable, "-c", "from labq.cli.main import main; main()", "--config", cfg, "stat"]
        walls, cpus = [], []
        for i in range(k + 1):      # the first writes the client's settings cache and bytecode
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True, timeout=300)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if i:
                walls.append(time.perf_counter() - t0)
                cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        return statistics.median(walls), statistics.median(cpus)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                got[k] = int(v.split()[0]) / 1024
    return got["VmRSS"], got["VmHWM"]


def memory(n: int = 100_000) -> dict:
    """The scheduler's memory around one n-task array: before, after the submit and a plan of the
    full queue, and the peak. The scheduler runs in this process, so this is its RSS."""
    rs = Redis()
    try:
        s = scheduler(rs.sock)
        tune_gc()
        before = rss_mb()[0]
        rid = queue(s.store.r, s.k, 1, {**BODY, "array": [1, n, 1]}, tag="big")[0]
        t0 = time.perf_counter()
        while not s.store.r.exists(s.k.reply(rid)):
            s.tick(time.time())
        took = time.perf_counter() - t0
        reply = json.loads(s.store.r.lindex(s.k.reply(rid), 0))
        if not reply.get("ok"):
            raise SystemExit(f"the array was refused: {reply.get('error')}")
        s.state.last_plan = float("-inf")
        t1 = time.perf_counter()
        s.tick(time.time())             # a plan of the whole queue
        plan_s = time.perf_counter() - t1
        after, peak = rss_mb()
        return {"jobs": len(s.jobs), "before_mb": before, "after_mb": after, "peak_mb": peak, "submit_s": took,
                "plan_tick_s": plan_s}
    finally:
        rs.close()


if __name__ == "__main__":
    if "--memory" in sys.argv:
        m = memory()
        print(f"{m['jobs']:,} pending: scheduler RSS {m['before_mb']:.0f} MB before, {m['after_mb']:.0f} MB after "
              f"(peak {m['peak_mb']:.0f} MB); the array submit {m['submit_s']:.2f} s, a plan tick {m['plan_tick_s']:.2f} s")
    else:
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
        r = drain(n)
        print(f"{r['requests']} requests drained in {r['seconds']:.3f} s over {r['ticks']} ticks: "
              f"{r['rate']:,.0f} requests/s (scheduler CPU {r['cpu_s'] / r['requests'] * 1e6:.0f} µs per request); "
              f"10,000-task array {r['array10k_s'] * 1000:.0f} ms (scheduler CPU {r['array10k_cpu_s'] * 1000:.0f} ms); "
              f"`labq stat` over the {r['requests']:,} single jobs {r['stat_s'] * 1000:.0f} ms "
              f"(CPU {r['stat_cpu_s'] * 1000:.0f} ms); load {os.getloadavg()[0]:.1f}")
