"""The scheduler's CPU per request and per batch on the intake path, in-process over a private
redis-server: what bench/live_bench.py's drains fit, without the 100 client processes sharing the
2 cores (their CPU and scheduling noise) — the same request bytes, the same tick.

Each round LPUSHes B requests exactly as the thin client sends them (store/inbox.send_commands: the
entry, then a wake token; `labq sub -H` as bench/drainclient.py builds it, with this process's
environment exported), then does what the daemon's loop does: wait_wake, then tick. Only the wait and
the tick are timed (process CPU). Rounds of B = 1, 20 and 100 give a fit of CPU = a·requests +
b·batches, as live_bench does. Jobs are held: the queue of held jobs grows as it runs, as in the drains.

    .venv/bin/python bench/drain_intake.py                  # the fit, 3 repetitions, min and median
    .venv/bin/python bench/drain_intake.py --profile 100    # cProfile of ticks of 100 requests each
    OTHER_TREE/.venv/bin/python bench/drain_intake.py       # the same over another checkout (A/B)

Imports only labq and bench/drain_bench.py (its private redis-server), so this copy runs against any tree's venv.
"""
import cProfile
import os
import pstats
import statistics
import sys
import time

import drain_bench
import redis

from labq.cli.subcore import build_body
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.settings import config
from labq.scheduler.store import conn, inbox
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.commit import tune_gc
from labq.scheduler.store.keys import Keys
from labq.scheduler.thinclient import current_umask, current_user

CFG = """
[scheduler]
max_pending = 1000000
max_pending_per_user = 1000000
[accounts.bench]
users = ["{user}"]
[accounts.parked]
users = ["{user}"]
"""


class Redis(drain_bench.Redis):
    """drain_bench's private redis-server (AOF fsynced always, as `labq up` runs it), and its CPU."""

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Harness:
    def __init__(self, sock: str):
        self.user = current_user()
        r = conn.connect(f"unix://{sock}")     # as the daemon connects (cli/daemons.py)
        AgentStore(r, Keys()).register("bench-node", 4, 8 << 30, 4, [], "h", 1, 3600)
        self.s = Scheduler(r, config.loads(CFG.format(user=self.user)), me="bench")
        self.s.tick(time.time())
        tune_gc()
        self.k = self.s.k
        self.client = redis.Redis(unix_socket_path=sock)     # the clients' side: not timed
        opts = {"account": "parked", "chdir": os.getcwd(), "time_": "10m", "hold": True}
        self.body = {"umask": current_umask(), **build_body(opts, ["true"], None)}
        self.sent = 0
        self.prof = None

    def push(self, n: int) -> list[str]:
        """n requests as n thin clients send them (the entry, then the wake token)."""
        p = self.client.pipeline(transaction=False)
        rids = []
        for _ in range(n):
            fields = inbox.request_fields("submit", dict(self.body), expires=time.time() + 25)
            rids.append(fields["rid"])
            for cmd in inbox.send_commands(self.k, self.user, fields):
                p.execute_command(*cmd)
        p.execute()
        self.sent += n
        return rids

    def round(self, n: int) -> float:
        """CPU seconds of the scheduler's wait + tick(s) that answer n requests pushed at once."""
        rids = self.push(n)
        s, last = self.s, self.k.reply(rids[-1])
        cpu = 0.0
        while True:
            c0 = time.process_time()
            if self.prof is not None:
                self.prof.enable()
            s.store.wait_wake(0.05)
            s.tick(time.time())
            if self.prof is not None:
                self.prof.disable()
            cpu += time.process_time() - c0
            if self.client.exists(last):      # the clients' side: not timed
                return cpu


def fit(points: list[tuple[int, int, float]]) -> tuple[float, float]:
    """Least squares of cpu = a·requests + b·batches over (requests, batches, cpu)."""
    rr = sum(r * r for r, _, _ in points)
    bb = sum(b * b for _, b, _ in points)
    rb = sum(r * b for r, b, _ in points)
    rc = sum(r * c for r, _, c in points)
    bc = sum(b * c for _, b, c in points)
    det = rr * bb - rb * rb
    return (rc * bb - bc * rb) / det, (rr * bc - rb * rc) / det


def measure(h: Harness, rounds: int) -> tuple[float, float, dict]:
    pts, per = [], {}
    for b in (1, 20, 100):
        cpu = [h.round(b) for _ in range(rounds * (4 if b == 1 else 1))]
        per[b] = statistics.median(cpu) / b
        pts.append((b * len(cpu), len(cpu), sum(cpu)))
    a, c = fit(pts)
    return a, c, per


def main() -> int:
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 3
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 30
    rs = Redis()
    try:
        h = Harness(rs.sock)
        for _ in range(5):      # warm: imports, the first plan passes, caches
            h.round(20)
        if "--spin" in sys.argv:        # rounds of B requests for a sampling profiler (py-spy) to watch
            b = int(sys.argv[sys.argv.index("--spin") + 1])
            for _ in range(rounds):
                h.round(b)
            return 0
        if "--profile" in sys.argv:
            b = int(sys.argv[sys.argv.index("--profile") + 1])
            prof = cProfile.Profile(time.process_time)     # CPU, not wall: a send blocked on Redis costs nothing
            h.prof = prof
            for _ in range(rounds):
                h.round(b)
            st = pstats.Stats(prof)
            st.sort_stats("cumulative").print_stats(45)
            st.sort_stats("tottime").print_stats(30)
            return 0
        fits = []
        for rep in range(reps):
            r0 = rs.cpu()
            n0 = h.sent
            a, b, per = measure(h, rounds)
            fits.append((a, b))
            print(f"rep {rep + 1}: {a * 1e6:.1f} µs per request, {b * 1e3:.3f} ms per batch; median CPU per request "
                  f"at 1/20/100: {per[1] * 1e6:.0f}/{per[20] * 1e6:.0f}/{per[100] * 1e6:.0f} µs; Redis "
                  f"{(rs.cpu() - r0) * 1e6 / (h.sent - n0):.0f} µs per request; {len(h.s.jobs):,} held; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        xs, ys = sorted(f[0] for f in fits), sorted(f[1] for f in fits)
        import labq.scheduler
        print(f"{os.path.dirname(labq.scheduler.__file__)}: per request min/median {xs[0] * 1e6:.1f}/{statistics.median(xs) * 1e6:.1f} µs; per batch "
              f"{ys[0] * 1e3:.3f}/{statistics.median(ys) * 1e3:.3f} ms")
    finally:
        rs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
