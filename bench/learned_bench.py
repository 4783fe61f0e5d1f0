"""Run times learned from history, on the KTH SP2 trace: fifo, backfill over time limits, backfill over
learned run times (FIFO order), learned (learned backfill + short jobs first) and sjf-oracle (the same
with true run times: a bound) — in one run, on each processor count asked.

    python bench/learned_bench.py [--processors 100,50] [--jobs N] [--out bench/results/learned.md]

Each job's requested wall time (`req_time_s`) is its time limit, as in bench/kth_replay.py. Reads the
trace from ../shared/traces/ (beside the repository) and says so when it is absent.
"""
import argparse
import datetime
import os
import resource
import sys
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from labq.scheduler.jobs.model import Node  # noqa: E402
from labq.scheduler.settings import config as config_mod  # noqa: E402
from labq.scheduler.sim.engine import simulate  # noqa: E402
from labq.scheduler.sim.metrics import report  # noqa: E402
from labq.scheduler.sim.policies import policy_config, resolve  # noqa: E402
from labq.scheduler.sim.trace import load  # noqa: E402
from labq.scheduler.units import fmt_duration  # noqa: E402

TRACE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "kth_sp2_1996.csv")
ROWS = ("fifo", "backfill", "backfill-learned", "learned", "sjf-oracle")


def cfg_for(row: str, age_max: str = ""):
    """(config, hooks) of a row; `age_max` ("1d"): priority.age_max, else the built-in 7 d."""
    base = config_mod.loads(f'[priority]\nage_max = "{age_max}"\n') if age_max else config_mod.Config()
    if row == "backfill-learned":      # learned run times in backfill only: FIFO order kept
        cfg = policy_config(base, "backfill")
        return resolve(replace(cfg, estimate=cfg.estimate.with_(backfill=True)), "config")
    return resolve(base, row)


def run(jobs, processors: int, row: str, age_max: str = "") -> dict:
    cfg, hooks = cfg_for(row, age_max)
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate(jobs, (Node("kth", processors, 1 << 40, processors),), cfg, hooks=hooks)
    rep = report(res)
    stamped = sum(1 for j in res.jobs.values() if j.learned_est)
    return {"wait": rep["wait_s"]["mean"], "p95": rep["wait_s"]["p95"], "jct": rep["completion_time_s"]["mean"],
            "bsld": rep["bounded_slowdown"]["mean"], "util": rep["utilisation"], "cpu": time.process_time() - c0,
            "wall": time.perf_counter() - t0, "stamped": stamped, "jobs": len(res.jobs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/learned_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--processors", default="100,50")
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs only (0: all)")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--age-max", default="", help="priority.age_max for every row (default: 7d)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "learned.md"))
    a = ap.parse_args(argv)
    extra = a.trace.replace(".csv", "_extra.csv")
    if not (os.path.exists(a.trace) and os.path.exists(extra)):
        print(f"skipped: {a.trace} (and its _extra.csv) not found; {a.out} left as it is")
        return 0
    jobs = load(a.trace, extra=extra, time_column="req_time_s")
    jobs = jobs[:a.jobs] if a.jobs else jobs
    lines = [f"`{os.path.basename(a.trace)}`, {len(jobs):,} jobs, time limit = `req_time_s`; load "
             f"{open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'} at the start.", "",
             "| processors | policy | mean wait | mean JCT | p95 wait | mean bsld (10 s) | utilisation "
             "| jobs with an estimate | CPU s | wall s |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in (int(x) for x in a.processors.split(",")):
        for row in a.rows.split(","):
            r = run(jobs, p, row, a.age_max)
            label = row + (" (oracle bound: true run times)" if row == "sjf-oracle" else "")
            line = (f"| {p} | {label} | {fmt_duration(r['wait'])} ({r['wait']:,.0f} s) | {r['jct']:,.0f} s "
                    f"| {r['p95']:,.0f} s | {r['bsld']:,.1f} | {r['util']:.1%} | {r['stamped']:,} of {r['jobs']:,} "
                    f"| {r['cpu']:.1f} | {r['wall']:.1f} |")
            print(line, flush=True)
            lines.append(line)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines += ["", f"Peak RSS of the whole run {peak:,.0f} MB; written "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
              f"{open('/proc/loadavg').read().split()[0] if os.path.exists('/proc/loadavg') else '?'} at the end.", ""]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {os.path.relpath(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
