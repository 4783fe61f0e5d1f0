"""The accounting archive at scale (issue 18): N ended jobs (each one attempt, one charge entry)
written to a private redis-server with AOF, then archived. Prints Redis memory and its restart time
(AOF replay) with the jobs kept vs archived, the archiving rate, and `acct --since 30d`'s read (the
archive's rows decoded into jobs) over them.

    .venv/bin/python bench/archive_bench.py [--jobs 100000]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import redis  # noqa: E402

from labq.scheduler import states  # noqa: E402
from labq.scheduler.model import Attempt, Job  # noqa: E402
from labq.scheduler.store import writes  # noqa: E402
from labq.scheduler.store.archive import Archive, Archiver  # noqa: E402
from labq.scheduler.store.history import History  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402
from labq.scheduler.transitions import Charge  # noqa: E402

NOW = time.time()


def start(d):
    sock = os.path.join(d, "r.sock")
    p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--dir", d, "--appendonly", "yes",
                          "--save", "", "--loglevel", "warning"], stdout=subprocess.DEVNULL)
    r = redis.Redis(unix_socket_path=sock, decode_responses=True)
    t0 = time.monotonic()
    while True:
        try:
            r.ping()
            return p, r, time.monotonic() - t0
        except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
            time.sleep(0.01)


def restart(d, p):
    p.terminate()
    p.wait()
    return start(d)


def fill(r, k, n):
    base = Job(id=1, user="alice", account="eta", argv=("python", "train.py", "--lr", "0.1"), workdir="/home/alice/x",
               gpus=1, cpus=4, mem=12 << 30, time_limit=7200, submit_time=NOW - 40 * 86400)
    for lo in range(1, n + 1, 5000):
        p = r.pipeline(transaction=False)
        jobs, charges = [], []
        for jid in range(lo, min(n + 1, lo + 5000)):
            end = NOW - 35 * 86400 + jid
            a = Attempt(1, "n1", ("GPU-0",), start_time=end - 600, dispatch_time=end - 600, end_time=end,
                        outcome="completed", exit_code=0, cost=333_333, charges=(("eta", 333_333),))
            jobs.append(replace(base, id=jid, state=states.COMPLETED, attempts=(a,), start_time=end - 600,
                                end_time=end, exit_code=0))
            charges.append(Charge(jid, 1, "eta", "usd", 333_333))
        writes.put_jobs(p, k, jobs)
        for c in charges:
            writes.put_charge(p, k, c, NOW - 35 * 86400, "")
            writes.mark_charged(p, k, c.key)
        p.execute()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    n = ap.parse_args().jobs
    d = tempfile.mkdtemp(prefix="labq-arch-", dir="/tmp")
    k = Keys()
    try:
        p, r, _ = start(d)
        fill(r, k, n)
        kept_mem = r.info("memory")["used_memory"]
        p, r, kept_restart = restart(d, p)
        path = os.path.join(d, "history.db")
        arch = Archiver(r, k, Archive(path), keep=7 * 86400, batch=5000)
        t0 = time.monotonic()
        # The ledger entries were written just now (their stream ids say so): archive as of a week on.
        while sum(arch.step(NOW + 7 * 86400 + 60)) and (r.zcard(k.history) or r.xlen(k.ledger)):
            arch.next = float("-inf")
        rate = n / (time.monotonic() - t0)
        r.bgrewriteaof()
        while r.info("persistence")["aof_rewrite_in_progress"]:
            time.sleep(0.05)
        archived_mem = r.info("memory")["used_memory"]
        p, r, archived_restart = restart(d, p)
        t0 = time.monotonic()
        rows = History(path).ended(NOW - 40 * 86400, float("inf"))
        acct = time.monotonic() - t0
        print(f"{n:,} ended jobs: Redis {kept_mem / 1e6:.1f} MB kept -> {archived_mem / 1e6:.1f} MB archived; "
              f"Redis restart {kept_restart:.2f} s -> {archived_restart:.2f} s; archiving {rate:,.0f} jobs/s; "
              f"reading {len(rows):,} archived jobs (acct --since 40d) {acct:.2f} s; "
              f"archive file {os.path.getsize(path) / 1e6:.0f} MB")
        p.terminate()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
