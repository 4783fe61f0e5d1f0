"""KTH SP2 replay: the 20,000-job KTH IBM SP2 log (Parallel Workloads Archive) replayed by the
simulator on one 100-processor machine, each job's requested wall time as its time limit, under
labq's FIFO and EASY-backfill policies, beside the schedule KTH's own production scheduler
recorded (its `wait_s`). Prints mean wait and mean bounded slowdown side by side and writes them
as a markdown table to bench/results/kth.md.

    python bench/kth_replay.py [--trace ../shared/traces/kth_sp2_1996.csv] [--policies fifo,backfill]

The trace is read from ../shared/traces/ (beside the repository); without it the replay says so
and leaves bench/results/kth.md as it is.
"""
import argparse
import csv
import datetime
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from labq.scheduler.jobs.model import Node  # noqa: E402
from labq.scheduler.settings import config as config_mod  # noqa: E402
from labq.scheduler.sim.engine import simulate  # noqa: E402
from labq.scheduler.sim.metrics import (  # noqa: E402
    BSLD_BOUND_S,
    percentile,
    report,  # noqa: E402
)
from labq.scheduler.sim.policies import describe, policy_config  # noqa: E402
from labq.scheduler.sim.trace import load  # noqa: E402
from labq.scheduler.units import fmt_duration  # noqa: E402

TRACES = os.path.join(os.path.dirname(ROOT), "shared", "traces")
TRACE = os.path.join(TRACES, "kth_sp2_1996.csv")
PROCESSORS = 100
ATTRIBUTION = ("Source: the Parallel Workloads Archive (log `KTH-SP2-1996-2.1-cln.swf`); D. G. Feitelson, "
               "D. Tsafrir and D. Krakov, \"Experience with using the Parallel Workloads Archive\", JPDC 74(10), "
               "2014. The log was donated by Lars Malinowsky, KTH.")


def recorded(trace: str, extra: str) -> dict:
    """KTH's own schedule: mean and p95 wait and mean bounded slowdown from the recorded waits."""
    with open(extra, newline="") as f:
        waits = {r["job_id"]: float(r["wait_s"]) for r in csv.DictReader(f)}
    with open(trace, newline="") as f:
        jobs = [(waits[r["job_id"]], float(r["duration_s"])) for r in csv.DictReader(f)]
    ws = [w for w, _ in jobs]
    bsld = [max(1.0, (w + run) / max(run, BSLD_BOUND_S)) for w, run in jobs]
    return {"jobs": len(jobs), "mean_wait": sum(ws) / len(ws), "p95_wait": percentile(ws, 0.95),
            "bsld": sum(bsld) / len(bsld), "utilisation": None, "timeouts": None, "seconds": None}


def replay(trace: str, extra: str, policy: str) -> dict:
    jobs = load(trace, extra=extra, time_column="req_time_s")
    cfg = policy_config(config_mod.Config(), policy)
    t0 = time.perf_counter()
    res = simulate(jobs, (Node("kth", PROCESSORS, 1 << 40, PROCESSORS),), cfg)
    seconds = time.perf_counter() - t0
    rep = report(res)
    return {"jobs": len(jobs), "mean_wait": rep["wait_s"]["mean"], "p95_wait": rep["wait_s"]["p95"],
            "bsld": rep["bounded_slowdown"]["mean"], "utilisation": rep["utilisation"],
            "timeouts": rep["jobs"]["timeout"], "seconds": seconds, "config": describe(cfg),
            "passes": rep["plan"]["calls"], "skipped": rep["plan"]["skipped"]}


def table(rows) -> list[str]:
    out = ["| schedule | mean wait | p95 wait | mean bounded slowdown (10 s) | utilisation | stopped at the limit | replay time |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        util = "—" if r["utilisation"] is None else f"{r['utilisation']:.1%}"
        limit = "—" if r["timeouts"] is None else f"{r['timeouts']:,}"
        took = "—" if r["seconds"] is None else f"{r['seconds']:.1f} s ({r['passes']:,} plan() passes)"
        out.append(f"| {name} | {fmt_duration(r['mean_wait'])} ({r['mean_wait']:,.0f} s) | {fmt_duration(r['p95_wait'])} "
                   f"| {r['bsld']:,.1f} | {util} | {limit} | {took} |")
    return out


def markdown(rows, trace: str, total: float) -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = ["## KTH SP2 replay (bench/kth_replay.py)", "",
             f"`{os.path.basename(trace)}`: the first {rows[0][1]['jobs']:,} jobs of the KTH IBM SP2 log (100 processors, "
             "228.7 days), replayed by `scheduler/sim/` through the scheduler's own `plan()` on one 100-CPU machine, "
             "each job's requested wall time (`req_time_s`) as its time limit; a job that runs past it is stopped "
             "there. KTH's row is the production schedule the log recorded (EASY backfilling, its `wait_s`). "
             "Bounded slowdown = max(1, (wait + run) / max(run, 10 s)).", ""]
    lines += table(rows)
    lines += ["", "Policies: " + "; ".join(f"{name}: {r['config']}" for name, r in rows if "config" in r) + ".",
              f"Written {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} on {cpus} CPUs, "
              f"Python {platform.python_version()}; {total:.0f} s in all.", "", ATTRIBUTION, ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/kth_replay.py", description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--extra", help="default: the trace's name with _extra")
    ap.add_argument("--policies", default="fifo,backfill")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "kth.md"))
    a = ap.parse_args(argv)
    extra = a.extra or a.trace.replace(".csv", "_extra.csv")
    for path in (a.trace, extra):
        if not os.path.exists(path):
            print(f"skipped: {path} not found (the KTH trace is read from {TRACES}); {a.out} left as it is")
            return 0
    t0 = time.perf_counter()
    rows = [("KTH production (recorded)", recorded(a.trace, extra))]
    print(f"{'schedule':<28}{'mean wait':>16}{'mean bsld':>12}{'replay':>10}")
    print(f"{rows[0][0]:<28}{rows[0][1]['mean_wait']:>14,.0f} s{rows[0][1]['bsld']:>12,.1f}{'—':>10}", flush=True)
    for policy in a.policies.split(","):
        r = replay(a.trace, extra, policy)
        rows.append((f"labq {policy}", r))
        print(f"{'labq ' + policy:<28}{r['mean_wait']:>14,.0f} s{r['bsld']:>12,.1f}{r['seconds']:>8.1f} s", flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(markdown(rows, a.trace, time.perf_counter() - t0))
    print(f"wrote {os.path.relpath(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
