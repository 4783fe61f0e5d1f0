"""Where a batch of the 100-client drain spends its wall time, phase by phase (issue 39): one private
stack of this checkout (live_bench's BenchStack), `strace -ttt -T` on the scheduler's socket calls and on
Redis' fdatasync, and each process's run-queue wait (/proc/PID/schedstat: runnable, waiting for a CPU).

A batch, as the scheduler sees it: the wait (BLPOP, with the next look's LMOVEs) sent and its reply read;
its CPU till the round's first read (the done keys, which opens the commit's WATCH) is sent; that read's
round trip; its CPU handling the round; the commit's round trip (MULTI..EXEC: Redis runs it, fsyncs,
answers the clients and the scheduler); its CPU after it till the next wait. strace costs the traced
processes CPU: read rates from untraced runs (live_vs.py), phases from this.

    .venv/bin/python bench/drain_timeline.py [DRAINS]     # medians and means of each phase, ms
"""
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import live_bench  # noqa: E402
from stackutil import BenchStack  # noqa: E402

LINE = re.compile(r"(\d+\.\d+) (\w+)\((\d+), (.*) <([\d.]+)>$")
SYNC = re.compile(r"\d+\.\d+ f(?:data)?sync\(\d+\).* <([\d.]+)>$")
PHASES = (("wait", "wait_s", "wait_e"), ("cpu to first read", "wait_e", "watch_s"), ("first read", "watch_s", "watch_e"),
          ("cpu handling", "watch_e", "multi"), ("commit", "multi", "multi_e"), ("cpu after commit", "multi_e", "next"),
          ("batch", "wait_s", "next"))


def _trace(pid: int, calls: str, out: str) -> subprocess.Popen:
    return subprocess.Popen(["strace", "--seccomp-bpf", "-ttt", "-T", "-e", f"trace={calls}", "-o", out, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def batches(path: str) -> list[dict]:
    """Each batch's phase boundaries (time.time seconds) from the scheduler's trace."""
    out, cur = [], None
    with open(path) as f:
        for line in f:
            m = LINE.match(line.rstrip())
            if not m:
                continue
            t, call, rest, took = float(m[1]), m[2], m[4][:60], float(m[5])
            if call == "sendto" and "BLPOP" in rest:
                if cur and "multi_e" in cur:
                    cur["next"] = t
                    out.append(cur)
                cur = {"wait_s": t}
            elif cur is None:
                continue
            elif call == "sendto" and ("WATCH" in rest or "MULTI" in rest):
                cur["watch_s" if "WATCH" in rest else "multi"] = t
            elif call == "recvfrom" and "EAGAIN" not in rest:     # the last read of each exchange ends it
                cur["multi_e" if "multi" in cur else "watch_e" if "watch_s" in cur else "wait_e"] = t + took
    return [b for b in out if all(k in b for _, s, e in PHASES for k in (s, e))]


def fsyncs(path: str) -> list[float]:
    with open(path) as f:
        return [float(m[1]) for m in map(SYNC.match, (x.rstrip() for x in f)) if m]


def main() -> int:
    drains = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 1
    with BenchStack(slots=4, max_pending=200_000) as bs:
        pids = {n: bs.stack.procs[n].pid for n in ("scheduler", "redis")}
        for n in range(drains):
            sched, redis = f"{bs.dir}/strace.scheduler", f"{bs.dir}/strace.redis"
            tracers = [_trace(pids["scheduler"], "sendto,recvfrom,pwrite64", sched), _trace(pids["redis"], "fdatasync,fsync", redis)]
            time.sleep(1)           # attached before the clients start
            w0 = {k: live_bench.run_wait(p) for k, p in pids.items()}
            d = live_bench.drain(bs, 100, 94)
            w1 = {k: live_bench.run_wait(p) for k, p in pids.items()}
            for p in tracers:
                p.send_signal(signal.SIGINT)
                p.wait()
            got, fs, b = batches(sched), fsyncs(redis), max(1, d["batches"])
            print(f"drain {n + 1}: {d['rate']:,.0f} requests/s (traced), {d['requests'] / b:.1f} requests a batch, "
                  f"load {os.getloadavg()[0]:.2f}; run-queue wait a batch: scheduler {(w1['scheduler'] - w0['scheduler']) * 1e3 / b:.2f} ms, "
                  f"Redis {(w1['redis'] - w0['redis']) * 1e3 / b:.2f} ms; Redis fdatasync a batch {len(fs) / b:.2f}, "
                  f"{statistics.mean(fs) * 1e3 if fs else 0:.2f} ms each", flush=True)
            for name, s, e in PHASES:
                xs = [(x[e] - x[s]) * 1e3 for x in got]
                if xs:
                    print(f"    {name:18s} median {statistics.median(xs):6.2f} ms, mean {statistics.mean(xs):6.2f} "
                          f"({len(xs)} batches)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
