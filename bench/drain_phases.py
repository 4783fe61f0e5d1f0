"""Where a live drain's wall time goes, core by core: the 100-client drain of bench/live_bench.py
(this tree's stack: redis-server, `labq scheduler`, real client processes) under `perf record -a`,
each millisecond of each core named by the party that ran most in it (the scheduler, Redis, the
clients, something else, or nothing: idle). A drain whose parties ran one after another shows as
wall time with a core idle: the share that no CPU saving on the idle side can buy back.

Why (issue 39 item 3): at 3,850 requests/s a quiet drain used ~62 % of both cores. The split says
which serial step holds the rest: a batch's handling (the scheduler alone), its commit and the
replies (Redis alone), or the clients' own work (both cores, nothing idle).

    .venv/bin/python bench/drain_phases.py [--clients 100] [--per 94] [--drains 2] [--timeline]

Needs perf (linux-perf) and permission to record every CPU (root, or perf_event_paranoid <= 0).
--timeline prints the drain's 2 ms slots, one letter a core (S scheduler, R Redis, c client,
x other, . idle) for the eye.
"""
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import live_bench  # noqa: E402
from stackutil import BenchStack  # noqa: E402

SLOT_S = 0.001
LETTER = {"scheduler": "S", "redis": "R", "clients": "c", "other": "x", "idle": "."}


def _arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def samples(data: str) -> list[tuple[float, int, int]]:
    """(time s, cpu, pid) of each sample of `perf record -a`'s file."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,cpu,time"], capture_output=True, text=True,
                         check=True).stdout
    got = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            got.append((float(parts[-1].rstrip(":")), int(parts[-2].strip("[]")), int(parts[-3])))
        except ValueError:
            continue
    return got


def slots(got: list[tuple[float, int, int]], who: dict[int, str], t0: float, t1: float,
          slot: float = SLOT_S) -> list[tuple[str, ...]]:
    """Each `slot` of [t0, t1): per core (in cpu order), the party with most samples there ("idle"
    where pid 0 ran or nothing was sampled)."""
    cpus = sorted({c for _, c, _ in got})
    n = max(0, int((t1 - t0) / slot))
    counts: dict[tuple[int, int], collections.Counter] = collections.defaultdict(collections.Counter)
    for t, cpu, pid in got:
        i = int((t - t0) / slot)
        if 0 <= i < n:
            counts[(i, cpu)][who.get(pid, "idle" if pid == 0 else "other")] += 1
    return [tuple((counts[(i, c)].most_common(1)[0][0] if counts[(i, c)] else "idle") for c in cpus)
            for i in range(n)]


OURS = ("scheduler", "redis", "clients")


def shares(rows: list[tuple[str, ...]]) -> dict[str, float]:
    """The share of slots by what of the drain ran in them: one of its parties on one core only, the
    other cores left idle or to other work ("scheduler only"; a serial step), its parties on every core
    ("every core"), on some ("some cores"), or none of them ("none")."""
    tally: collections.Counter = collections.Counter()
    for row in rows:
        ours = [p for p in row if p in OURS]
        if not ours:
            tally["none"] += 1
        elif len(ours) == len(row):
            tally["every core"] += 1
        elif len(ours) == 1:
            tally[f"{ours[0]} only"] += 1
        else:
            tally["some cores"] += 1
    total = max(1, len(rows))
    return {k: v / total for k, v in tally.most_common()}


def one_drain(bs, n: int, per: int, show: bool) -> None:
    ps = live_bench.clients(bs, n, per)
    who = {bs.stack.procs["scheduler"].pid: "scheduler", bs.stack.procs["redis"].pid: "redis"}
    who.update({p.pid: "clients" for p in ps})
    data = os.path.join(tempfile.mkdtemp(prefix="labq-phases-"), "perf.data")
    perf = subprocess.Popen(["perf", "record", "-a", "-k", "CLOCK_MONOTONIC", "-F", "4000", "-o", data, "--", "sleep", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)        # recording before the first request goes
    # perf's samples stamped with CLOCK_MONOTONIC (-k), the clock read here
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in ps:
        p.communicate(timeout=600)
    t1 = time.clock_gettime(time.CLOCK_MONOTONIC)
    perf.send_signal(2)
    perf.wait(60)
    try:
        rows = slots(samples(data), who, t0, t1)
    finally:
        shutil.rmtree(os.path.dirname(data), ignore_errors=True)
    got = shares(rows)
    print(f"{n * per:,} requests in {t1 - t0:.2f} s ({n * per / (t1 - t0):,.0f}/s), load "
          f"{os.getloadavg()[0]:.2f}; wall by {SLOT_S * 1e3:.0f} ms slots: "
          + ", ".join(f"{k} {v:.0%}" for k, v in got.items()), flush=True)
    if show:
        print(" ".join("".join(LETTER[p] for p in row) for row in rows[::2]), flush=True)


def main() -> int:
    if not shutil.which("perf"):
        raise SystemExit("perf is not installed (linux-perf)")
    n, per, drains = int(_arg("--clients", "100")), int(_arg("--per", "94")), int(_arg("--drains", "2"))
    live_bench.compiled()
    with BenchStack(slots=4, max_pending=200_000) as bs:
        live_bench.drain(bs, n, 20)       # warm: connections, the scheduler's first batches
        for _ in range(drains):
            one_drain(bs, n, per, "--timeline" in sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
