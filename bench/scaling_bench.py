"""How the scheduler's costs grow with the queue: requests/s drained, `labq stat` time, plan() time and
scheduler RSS at 1,000, 10,000 and 100,000 pending, exponents fitted on log-log, and the largest
queue that plans within one tick (1 s). Prints a markdown section for bench/RESULTS.md.

    .venv/bin/python bench/scaling_bench.py            # prints the section
    .venv/bin/python bench/scaling_bench.py --write    # also writes bench/scaling.md, which RESULTS.md includes

plan() is timed on plan_bench's cluster (1,000 nodes, 95 % full) twice: pending jobs as independent
random requests (a class per few jobs: the per-job order) and as 20 arrays (plan() judges each
class once). RSS, the drain rate and `labq stat` (a whole process over the drained queue: single
jobs, no array to fold) come from drain_bench, one child process per size (VmHWM only grows). Wall times on a shared machine: the load average is printed with them; CPU times beside.
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import plan_bench  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
NODES = 1000


def plan_times(arrays: int) -> dict[int, tuple[float, float]]:
    """pending -> (median wall s, median CPU s) of plan()."""
    from labq.scheduler.policy import plan
    from labq.scheduler.settings import config
    cfg = config.loads(plan_bench.CONFIG)
    out = {}
    for n in SIZES:
        snap = plan_bench.snapshot(n, NODES, arrays=arrays)
        plan_bench.tune_gc()
        walls, cpus = [], []
        for _ in range(3 if n < 100_000 else 2):
            t, c = time.perf_counter(), time.process_time()
            plan(snap, cfg)
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        out[n] = (statistics.median(walls), statistics.median(cpus))
    return out


def child(code: str) -> dict:
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    if got.returncode:
        raise RuntimeError(got.stderr[-2000:])
    return json.loads(got.stdout.strip().splitlines()[-1])


def within(points: dict[int, float], budget: float) -> float:
    """The queue size at which the fitted t = a·n^k reaches `budget`."""
    k = plan_bench.exponent(list(points.items()))
    n0, t0 = max(points.items())
    return n0 * (budget / t0) ** (1 / k)


def main() -> None:
    if "--write" in sys.argv:
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            measure()
        text = (f"Written by `.venv/bin/python bench/scaling_bench.py --write` on "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n" + buf.getvalue())
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling.md"), "w") as f:
            f.write(text)
        print(text)
    else:
        measure()


def measure() -> None:
    load0 = os.getloadavg()
    rows = []
    drain = {n: child(f"import drain_bench, json; print(json.dumps(drain_bench.drain({n})))") for n in SIZES}
    mem = {n: child(f"import drain_bench, json; print(json.dumps(drain_bench.memory({n})))") for n in SIZES}
    rand, arr = plan_times(0), plan_times(20)
    load1 = os.getloadavg()
    for n in SIZES:
        d = drain.get(n)
        rate = f"{d['rate']:,.0f} ({d['cpu_s'] / n * 1e6:.0f} µs CPU each)" if d else "—"
        stat = f"{d['stat_s'] * 1e3:,.0f} ({d['stat_cpu_s'] * 1e3:,.0f})" if d else "—"
        rows.append(f"| {n:,} | {rate} | {stat} | "
                    f"{rand[n][0] * 1e3:,.0f} ({rand[n][1] * 1e3:,.0f}) | {arr[n][0] * 1e3:,.0f} ({arr[n][1] * 1e3:,.0f}) | "
                    f"{mem[n]['after_mb']:.0f} (peak {mem[n]['peak_mb']:.0f}) |")
    k_rand = plan_bench.exponent([(n, rand[n][0]) for n in SIZES])
    k_arr = plan_bench.exponent([(n, arr[n][0]) for n in SIZES])
    k_mem = plan_bench.exponent([(n, mem[n]["after_mb"] - mem[SIZES[0]]["before_mb"] + 1) for n in SIZES])
    print(f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end (2 cores)\n")
    print("| pending | requests/s drained | `labq stat` ms, that many single jobs (CPU) | "
          "plan() ms, random requests, 1,000 nodes (CPU) | "
          "plan() ms, 20 arrays, 1,000 nodes (CPU) | scheduler RSS MB after an array of that size |")
    print("|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nExponents (log-log fit over 1k–100k): plan() random {k_rand:.2f}, arrays {k_arr:.2f}; "
          f"RSS above the idle scheduler {k_mem:.2f}.")
    k_rate = plan_bench.exponent([(n, drain[n]["rate"]) for n in SIZES])
    k_req = plan_bench.exponent([(n, drain[n]["cpu_s"] / n) for n in SIZES])
    k_stat = plan_bench.exponent([(n, drain[n]["stat_s"]) for n in SIZES])
    kc_stat = plan_bench.exponent([(n, drain[n]["stat_cpu_s"]) for n in SIZES])
    print(f"Drain: requests/s {k_rate:.2f}, scheduler CPU per request {k_req:.2f} (0 = flat: a request costs the "
          f"same at any queue size). `labq stat`: {k_stat:.2f} wall, {kc_stat:.2f} CPU (1 = linear: a line per job).")
    kc_rand = plan_bench.exponent([(n, rand[n][1]) for n in SIZES])
    kc_arr = plan_bench.exponent([(n, arr[n][1]) for n in SIZES])
    print(f"On CPU time: plan() random {kc_rand:.2f}, arrays {kc_arr:.2f}.")
    for what, i in (("wall", 0), ("CPU", 1)):
        print(f"Largest queue planned within one 1 s tick (fit, {what}): random requests ≈ "
              f"{within({n: rand[n][i] for n in SIZES}, 1.0):,.0f}, "
              f"arrays ≈ {within({n: arr[n][i] for n in SIZES}, 1.0):,.0f}.")
    print(f"10,000-task array submit: {drain[10_000]['array10k_s'] * 1e3:.0f} ms wall, "
          f"{drain[10_000]['array10k_cpu_s'] * 1e3:.0f} ms scheduler CPU.")


if __name__ == "__main__":
    main()
