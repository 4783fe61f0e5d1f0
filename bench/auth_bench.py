"""What munge authentication costs (issue 11): credentials per second through libmunge (ctypes) and
through the munge/unmunge commands, and requests per second the scheduler serves with
security.auth = "none" and "munge" (the same submits, signed or not, on a private redis-server and a
private munged; the scheduler in-process, ticked by hand, no node agent).

    .venv/bin/python bench/auth_bench.py [--requests 2000] [--creds 2000]

Short by design (a few seconds each). Prints one line per figure.
"""
import argparse
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from labq.scheduler.daemon.loop import Scheduler  # noqa: E402
from labq.scheduler.jobs.model import Gpu  # noqa: E402
from labq.scheduler.security import auth, munge
from labq.scheduler.settings import config  # noqa: E402
from labq.scheduler.store.agentside import AgentStore  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402
from tests.harness import start_munged, start_redis  # noqa: E402

BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 600,
        "account": "parked", "hold": True}
CFG = """
[scheduler]
max_pending = 1000000
max_pending_per_user = 1000000
[accounts.parked]
users = ["root"]
[security]
auth = "{auth}"
munge_socket = "{sock}"
"""


def creds_per_second(backend, sock: str, n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    made = [backend.encode(b"x" * 64, sock, 0) for _ in range(n)]
    t1 = time.perf_counter()
    for c in made:
        backend.decode(c, sock)
    t2 = time.perf_counter()
    return n / (t1 - t0), n / (t2 - t1)


def requests_per_second(rp, sock: str, mode: str, n: int) -> float:
    r = rp.client()
    r.flushall()
    k = Keys()
    cfg = config.loads(CFG.format(auth=mode, sock=sock))
    AgentStore(r, k).register("n1", 4, 8 << 30, 4, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    s = Scheduler(r, cfg, me="bench", clock=time.time)
    s.tick(time.time())
    text = json.dumps(BODY)
    p = r.pipeline(transaction=False)
    for i in range(n):   # signed beforehand: the client's cost is not the scheduler's
        p.lpush(k.requests, json.dumps(auth.sign({"rid": f"r{i}", "op": "submit", "body": text}, cfg.security)))
    p.lpush(k.wake, "user:root")
    p.execute()
    t0 = time.perf_counter()
    s.tick(time.time(), ["user:root"])
    while r.llen(k.reply(f"r{n - 1}")) == 0:
        s.tick(time.time())
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--creds", type=int, default=2000)
    a = ap.parse_args()
    if not shutil.which("redis-server") or not (shutil.which("munged") or os.path.exists("/usr/sbin/munged")):
        print("needs redis-server and munge (apt-get install redis-server munge)")
        return 2
    mp, rp = start_munged(), start_redis()
    try:
        import ctypes
        lib = munge._Lib(ctypes.CDLL("libmunge.so.2"))
        enc, dec = creds_per_second(lib, mp.socket, a.creds)
        print(f"libmunge (ctypes): {enc:,.0f} encodes/s, {dec:,.0f} decodes/s ({a.creds} credentials)")
        m = max(50, a.creds // 20)
        enc, dec = creds_per_second(munge._Commands(), mp.socket, m)
        print(f"munge/unmunge commands: {enc:,.0f} encodes/s, {dec:,.0f} decodes/s ({m} credentials)")
        for mode in ("none", "munge"):
            rate = requests_per_second(rp, mp.socket, mode, a.requests)
            print(f"scheduler, security.auth = {mode!r}: {rate:,.0f} submits/s ({a.requests} requests)")
    finally:
        for p in (mp.proc, rp.proc):
            p.terminate()
            p.wait(10)
        shutil.rmtree(mp.dir, ignore_errors=True)
        shutil.rmtree(rp.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
