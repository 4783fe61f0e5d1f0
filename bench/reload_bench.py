"""How long a new leader's state reload takes with many recently ended jobs in Redis (issue 35:
with ~200k of them each reload took 15-23 s against a 10 s lease).

    .venv/bin/python bench/reload_bench.py --ended 200000

Writes `--ended` ended jobs (every acct column varied, all ended within the crash guard's window
before `now`: the worst case) into a private redis-server, then times Scheduler._recover under
cProfile (its steps' cumulative times), and the whole of a first tick. Numbers are the machine's;
the point is which step grows.
"""
import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from labq.scheduler.daemon.loop import Scheduler  # noqa: E402
from labq.scheduler.settings import config  # noqa: E402
from labq.scheduler.store import writes  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402
from tests.harness import ended_job, start_redis  # noqa: E402


def fill(r, k: Keys, n: int, now: float) -> None:
    rng = random.Random(35)
    for lo in range(1, n + 1, 5000):
        jobs = []
        for jid in range(lo, min(n, lo + 4999) + 1):
            j = ended_job(rng, jid)
            jobs.append(replace(j, end_time=now - rng.uniform(1, 500)))    # inside the crash guard's window
        p = r.pipeline(transaction=False)
        writes.put_jobs(p, k, jobs)
        p.execute()
    r.set(k.seq, n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ended", type=int, default=200_000)
    a = ap.parse_args()
    rp = start_redis(appendonly=False)
    try:
        r = rp.client()
        cfg = config.loads("")
        k = Keys(cfg.prefix)
        now = time.time()
        t = time.perf_counter()
        fill(r, k, a.ended, now)
        print(f"wrote {a.ended} ended jobs in {time.perf_counter() - t:.1f}s", flush=True)
        s = Scheduler(r, cfg, me="bench")
        t = time.perf_counter()
        assert s.tick(now)
        first = time.perf_counter() - t
        r.delete(k.leader)
        s2 = Scheduler(r, cfg, me="bench2")
        s2.store.acquire_leader(600)
        t = time.perf_counter()
        s2._recover(now)
        total = time.perf_counter() - t
        print(f"first tick {first:.2f}s; reload {total:.2f}s with {a.ended} ended jobs")
        r.delete(k.leader)
        s3 = Scheduler(r, cfg, me="bench3")
        s3.store.acquire_leader(600)
        prof = cProfile.Profile()
        prof.runcall(s3._recover, now)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(r"daemon|reads|state|crashguard|estimate", 14)
    finally:
        rp.proc.terminate()
        rp.proc.wait(10)


if __name__ == "__main__":
    main()
