"""The metrics dashboard from a real scrape: a private labq (Redis, scheduler with
`scheduler.metrics`, a worker with 4 fake GPUs) runs a stream of jobs from two accounts for a minute
while this script scrapes /metrics every 2 s and parses it with prometheus_client's parser; then it
draws the panels of docs/grafana-labq.json (same queries, evaluated on the scraped samples) into
docs/metrics-dashboard.png.

    .venv/bin/python bench/dashboard.py [--seconds 60] [--out docs/metrics-dashboard.png]

Needs the `plot` extra (matplotlib).
"""
import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from labq.cli.embedded import Stack  # noqa: E402
from labq.scheduler.client import current_user  # noqa: E402

CONFIG = """
[scheduler]
tick = 0.5
metrics = "127.0.0.1:{port}"
[rates]
gpu_hour = 36.0
[accounts.vision]
users = ["{user}"]
[accounts.nlp]
users = ["{user}"]
[[budgets]]
name = "vision"
account = "vision"
limit = 1.5
[[budgets]]
name = "nlp"
account = "nlp"
limit = 20.0
[worker]
name = "gpu01"
gpus = 4
slots = 8
spool = "{spool}"
run_as = "self"
allow_root = true
"""


def scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def series(samples, name, key):
    """{label value: [(t, value summed over the other labels)]} over the scrapes."""
    out: dict = {}
    for t, snap in samples:
        sums: dict = {}
        for labels, v in snap.get(name, []):
            sums[labels.get(key, "")] = sums.get(labels.get(key, ""), 0) + v
        for k, v in sums.items():
            out.setdefault(k, []).append((t, v))
    return out


def draw(samples, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    panels = [("Pending jobs by reason", "labq_jobs_pending", "reason"),
              ("Running jobs by account", "labq_jobs_running", "account"),
              ("GPUs allocated / total", None, None),
              ("Budget spent (USD)", "labq_budget_spent", "budget"),
              ("Budget available (USD)", "labq_budget_available", "budget"),
              ("plan() and tick, mean over 2 s (ms)", None, None)]
    for ax, (title, name, key) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if name:
            for label, pts in sorted(series(samples, name, key).items()):
                ax.plot(*zip(*pts), label=label or "-")
        elif title.startswith("GPUs"):
            for n, lab in (("labq_gpus", "total"), ("labq_gpus_allocated", "allocated")):
                for _, pts in series(samples, n, "node").items():
                    ax.plot(*zip(*pts), label=lab)
        else:
            for n, lab in (("labq_plan_seconds", "plan()"), ("labq_tick_seconds", "tick")):
                pts, prev = [], None
                for t, snap in samples:
                    s = sum(v for _, v in snap.get(n + "_sum", []))
                    c = sum(v for _, v in snap.get(n + "_count", []))
                    if prev and c > prev[1]:
                        pts.append((t, 1000 * (s - prev[0]) / (c - prev[1])))
                    prev = (s, c)
                if pts:
                    ax.plot(*zip(*pts), label=lab)
        ax.set_xlabel("seconds", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("labq metrics, scraped from a live scheduler (bench/dashboard.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--out", default="docs/metrics-dashboard.png")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp(prefix="labq-dash-", dir="/tmp")
    cfg = os.path.join(d, "labq.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(port=port, user=current_user(), spool=os.path.join(d, "spool")))
    log = open(os.path.join(d, "daemons.log"), "w")
    stack = Stack(d, cfg, log=log)
    stack.start_all()
    rng, samples, start = random.Random(7), [], time.monotonic()
    try:
        while time.monotonic() - start < a.seconds:
            t = time.monotonic() - start
            if t < a.seconds * 0.6:
                for acct in ("vision", "nlp"):
                    subprocess.run(stack.command("sub", "-A", acct, "-G", str(rng.choice([1, 1, 2])), "-t", "1m",
                                                 "--", "sleep", str(rng.randint(3, 15))),
                                   env=stack.env(), cwd=d, capture_output=True, timeout=60)
            try:
                samples.append((t, scrape(port)))
            except OSError:
                pass
            time.sleep(2)
    finally:
        stack.stop_all()
        log.close()
    draw(samples, a.out)
    print(f"{len(samples)} scrapes over {a.seconds:.0f} s -> {a.out}")


if __name__ == "__main__":
    main()
