"""One client process of bench/live_bench.py: what `labq sub` does per request (the thin client, the
same request bytes), in a loop, so that N of them are N real clients of a live scheduler.

    python bench/drainclient.py CONFIG COUNT     # COUNT held submits after a line on stdin; prints JSON
    python bench/drainclient.py CONFIG COUNT --begin   # not held: pending until an hour from now
    python bench/drainclient.py CONFIG --churn   # submit one held job and cancel it, until stdin closes

It says "ready" once imported and connected (the start-up is not the scheduler's cost), submits on
the first line read from stdin, and prints {"t0", "t1", "n", "cpu", "sys", "lat_ms", "errors", "waits", "preempted"}: wall-clock start
and end (time.time, comparable across processes), its own CPU seconds over the requests (start-up
not counted; "sys": the kernel's part of it, in clock ticks), each request's round trip, and its
voluntary and involuntary context switches over the requests (Linux).
"""
import json
import os
import select
import sys
import time


def main() -> int:
    config, what = sys.argv[1], sys.argv[2]
    from labq.cli.fast import thin_client
    from labq.cli.subcore import build_body
    client = thin_client(config)
    # --begin: not held but pending until an hour from now (BeginTime), so that every plan pass sees them
    opts = {"account": "parked", "chdir": os.getcwd(), "time_": "10m"}
    opts.update({"begin": "now+1hour"} if "--begin" in sys.argv[3:] else {"hold": True})
    body = build_body(opts, ["true"], None)
    client.read.nodes()                       # connected before the start
    print("ready", flush=True)
    if what == "--churn":
        return churn(client, body)
    n = int(what)
    sys.stdin.readline()
    lat, errors = [], []
    t0, cpu0, sys0, sw0 = time.time(), time.process_time(), os.times().system, switches()
    for _ in range(n):
        s = time.perf_counter()
        try:
            client.submit(dict(body), timeout=120)
        except Exception as e:     # counted and shown by the bench, never hidden
            errors.append(f"{type(e).__name__}: {e}"[:200])
        lat.append((time.perf_counter() - s) * 1000)
    t1, cpu, sys_cpu, sw1 = time.time(), time.process_time() - cpu0, os.times().system - sys0, switches()
    print(json.dumps({"t0": t0, "t1": t1, "n": n, "cpu": cpu, "sys": sys_cpu, "lat_ms": lat, "errors": errors[:5],
                      "failed": len(errors), "waits": sw1[0] - sw0[0], "preempted": sw1[1] - sw0[1]}), flush=True)
    return 0


def switches() -> tuple[int, int]:
    """This process's (voluntary, involuntary) context switches so far: a voluntary one is a wait
    for Redis' answer (each wake-up costs the client far more CPU than its Python does), an
    involuntary one another process taking the core."""
    try:
        with open("/proc/self/status") as f:
            got = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
        return int(got["voluntary_ctxt_switches"]), int(got["nonvoluntary_ctxt_switches"])
    except (OSError, KeyError, ValueError):     # not Linux: not counted
        return 0, 0


def churn(client, body) -> int:
    """The queue changes while the other figures are measured: a job arrives and leaves, again and
    again, until the bench closes our stdin. Prints how many went through."""
    done = 0
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0)
        if r and not sys.stdin.readline():
            break
        jid = client.submit(dict(body), timeout=120)["job_id"]
        client.cancel([str(jid)])
        done += 1
        time.sleep(0.05)         # ~10 changes a second: a busy lab, not a flood
    print(json.dumps({"churned": done}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
