"""A seeded synthetic GPU-cluster trace, shaped like the published Philly (Microsoft, 2017) DNN-training
workload: mostly 1-GPU jobs, some 2/4/8-GPU ones; heavy-tailed run times (log-normal body, a
Pareto tail: median about 20 min, a few run for days); users who submit in bursts (a sweep of
tens of jobs at the same second); a few accounts (virtual clusters) of very unequal size; time
limits that over-estimate the run like users do (run/limit about 0.4 at the median).

    python bench/gpu_trace.py OUT.csv [--jobs 20000] [--seed 1] [--days 30] [--load X [--capacity 64]]

--load X spreads the same jobs (same shapes, run times and bursts) over the span that offers load X
to --capacity GPUs (GPU-seconds asked / (span x GPUs)): a deep queue, like a production cluster's
≈ 9 on 64 GPUs, instead of the default 30 days' ≈ 1.7.

The same seed and arguments always give the same file (random.Random(seed), no wall clock).
Columns: the replay format of ../shared/traces/README.md plus time_limit_s.
"""
import argparse
import csv
import math
import random
import sys

ACCOUNTS = {"vc-vision": 0.45, "vc-speech": 0.25, "vc-nlp": 0.2, "vc-rl": 0.1}    # share of the jobs
USERS_PER_ACCOUNT = 6
GPUS = ((1, 0.72), (2, 0.1), (4, 0.1), (8, 0.08))


def _pick(rng, pairs):
    x, acc = rng.random(), 0.0
    for value, p in pairs:
        acc += p
        if x < acc:
            return value
    return pairs[-1][0]


def duration(rng) -> int:
    """Seconds: log-normal (median 20 min) with a Pareto tail for 5% of jobs, capped at 14 days."""
    if rng.random() < 0.05:
        d = 6 * 3600 * rng.paretovariate(1.3)
    else:
        d = rng.lognormvariate(math.log(1200), 1.6)
    return int(min(max(d, 10), 14 * 86400))


def jobs(n: int, seed: int = 1, days: float = 30.0):
    """[(job_id, submit_s, duration_s, gpus, cpus, mem_gib, user, account, status, time_limit_s)]."""
    rng = random.Random(seed)
    users = [(f"{acc}-u{k}", acc) for acc in ACCOUNTS for k in range(USERS_PER_ACCOUNT)]
    weights = [ACCOUNTS[acc] / USERS_PER_ACCOUNT * (1.0 / (k + 1)) for acc in ACCOUNTS for k in range(USERS_PER_ACCOUNT)]
    span = days * 86400
    out, t = [], 0.0
    mean_burst = 4.0
    gap = span / (n / mean_burst)          # mean seconds between bursts
    while len(out) < n:
        t += rng.expovariate(1 / gap)
        user, acc = rng.choices(users, weights)[0]
        size = 1 if rng.random() < 0.5 else min(n - len(out), 1 + int(rng.expovariate(1 / (2 * mean_burst))))
        gpus = _pick(rng, GPUS)            # a sweep asks for one shape
        base = duration(rng)
        for _ in range(max(1, size)):
            if len(out) >= n:
                break
            run = int(max(10, base * rng.lognormvariate(0, 0.5)))
            limit = int(min(30 * 86400, max(run + 60, run / min(1.0, rng.lognormvariate(math.log(0.4), 0.6)))))
            status = "completed" if rng.random() < 0.8 else "failed"
            out.append((len(out) + 1, int(t), run, gpus, 4 * gpus, 32 * gpus, user, acc, status, limit))
    return out


def days_for_load(n: int, seed: int, load: float, capacity: int) -> float:
    """The span in days over which the trace offers `load` to `capacity` GPUs. Submit times scale
    with the span (one draw per burst gap whatever its mean), run times and shapes do not."""
    gpu_s = sum(r[2] * r[3] for r in jobs(n, seed, 30.0))
    return gpu_s / (load * capacity * 86400)


def write(path: str, n: int, seed: int = 1, days: float = 30.0) -> str:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "submit_s", "duration_s", "gpus", "cpus", "mem_gib", "user", "group", "status",
                    "time_limit_s"])
        w.writerows(jobs(n, seed, days))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gpu_trace.py", description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--load", type=float, default=None, help="offered load on --capacity GPUs (sets the span)")
    ap.add_argument("--capacity", type=int, default=64, help="GPUs the --load is offered to (default 64)")
    a = ap.parse_args(argv)
    if a.load is not None:
        if not a.load > 0 or a.capacity <= 0:
            print("gpu_trace.py: --load and --capacity: expected positive numbers", file=sys.stderr)
            return 2
        a.days = days_for_load(a.jobs, a.seed, a.load, a.capacity)
    write(a.out, a.jobs, a.seed, a.days)
    rows = jobs(a.jobs, a.seed, a.days)
    gpu_s = sum(r[2] * r[3] for r in rows)
    print(f"wrote {a.out}: {len(rows):,} jobs over {a.days:g} days, {gpu_s / 3600:,.0f} GPU-hours "
          f"(offered load {gpu_s / (a.days * 86400 * a.capacity):.2f} on {a.capacity} GPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
