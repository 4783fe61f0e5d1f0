"""CLI start-up: wall time of whole `labq` processes, as a user's shell sees them.

`labq --help` needs no Redis; `labq sub --test-only` and `labq sub` make one request to the
scheduler; `labq stat` reads the queue (run after the submission benchmark, with its parked jobs
pending). Median of several runs each.
"""
import os
import statistics
import subprocess
import time

from rows import Row
from stackutil import labq_command, labq_env


def _wall(argv, env, cwd, n: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        times.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[-4:])} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return statistics.median(times), times


def how() -> str:
    cmd = labq_command()
    return os.path.relpath(cmd[0]) if len(cmd) == 1 else "python -m labq.cli.main (no labq console script installed)"


def run_help(quick: bool, cwd: str) -> list[Row]:
    n = 5 if quick else 15
    med, ts = _wall(labq_command() + ["--help"], labq_env(), cwd, n)
    return [Row("`labq --help` wall", med, "ms", None, note=f"median of {n}, min {min(ts):.0f} ms; {how()}",
                key="help.wall")]


def run_with_stack(bs, quick: bool) -> list[Row]:
    n = 5 if quick else 11
    env = bs.stack.env()
    rows = []
    for key, label, args in (("subtest.wall", "`labq sub --test-only -- true` wall",
                              ("sub", "--test-only", "-A", "bench", "--", "true")),
                             ("sub.wall", "`labq sub -- true` wall", ("sub", "-A", "parked", "-H", "--", "true"))):
        med, ts = _wall(bs.labq_argv(*args), env, bs.work, n)
        rows.append(Row(label, med, "ms", 150, note=f"median of {n}, min {min(ts):.0f} ms", key=key))
    queued = len(bs.client.read.active())
    med, ts = _wall(bs.labq_argv("stat"), env, bs.work, n)
    rows.append(Row(f"`labq stat` wall, {queued:,} queued", med, "ms", 200 if queued >= 10_000 else None,
                    note=f"median of {n}, min {min(ts):.0f} ms", key="stat.wall"))
    return rows
