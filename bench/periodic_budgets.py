"""A weekly budget that long jobs span: what the cluster does with it (issue 21).

Synthetic, deterministic: 64 GPUs (8 nodes × 8), $2 per GPU-hour, a weekly budget of $4,000; three
8-GPU jobs of 30 days submitted at the start, then 2,500 one- or two-GPU jobs of 1–8 hours arriving
evenly over six weeks. Prints utilisation, mean wait and each week's spending.

    .venv/bin/python bench/periodic_budgets.py

Run it on an older checkout (PYTHONPATH=that checkout) to compare the rule that charged a job to the
period it ended in and held its whole commitment in every period.
"""
import random
import statistics
import sys
import time

from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.metrics import report
from labq.scheduler.sim.trace import TraceJob

CFG = """
[rates]
gpu_hour = 2.0
[[budgets]]
name = "lab"
limit = 4000.0
period = "week"
"""
WEEK = 7 * 86400


def trace():
    rng, jobs = random.Random(21), []
    for i in range(3):
        jobs.append(TraceJob(name=f"long{i}", submit=0.0, duration=30 * 86400.0, time_limit=30 * 86400,
                                 gpus=8, cpus=8))
    for i in range(2500):
        d = rng.uniform(1, 8) * 3600
        jobs.append(TraceJob(name=f"s{i}", submit=60 + i * 6 * WEEK / 2500, duration=d,
                                 time_limit=int(d * 1.5), gpus=rng.choice([1, 1, 2]), cpus=1))
    return jobs


def main():
    cfg = config.loads(CFG)
    nodes = [Node(f"n{k}", 64, 512 << 30, 64, tuple(Gpu(f"G{k}-{g}", g, "fake", 80 << 30) for g in range(8)))
             for k in range(8)]
    t0 = time.monotonic()
    res = simulate(trace(), nodes, cfg, template={"budget": "lab"})
    rep = report(res)
    spent = res.spent if hasattr(res, "spent") else {}
    weeks = sorted((k.split("@")[1], v / 1e6) for k, v in spent.items() if "@" in k)
    print(f"utilisation {rep['utilisation']:.3f} of GPUs, makespan {rep['makespan_s'] / 86400:.1f} d, "
          f"wall {time.monotonic() - t0:.1f} s")
    print(f"refused {len(res.refused)}" + "".join(f"; {r.trace.name}: {r.message}" for r in res.refused[:3]))
    print("wait", {k: v for k, v in rep.get("wait_s", {}).items()} if isinstance(rep.get("wait_s"), dict) else rep.get("wait_s"))
    if weeks:
        print("weekly spend:", ", ".join(f"{w} ${v:,.0f}" for w, v in weeks))
        print(f"mean weekly spend ${statistics.mean(v for _, v in weeks):,.0f} of $4,000")


if __name__ == "__main__":
    sys.exit(main())
