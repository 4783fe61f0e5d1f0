"""Runs the peers' side of each comparison (see peers.py for how each peer is set up).

Which labq row each figure stands beside, by key: `lat.cli.p50/p99` (submit → start through the
command line), `tput` (trivial jobs through one 4-slot node), `array10k` (one 10,000-task array
request; SLURM only, tsp has no arrays), `subtest.wall` (`sbatch --test-only`), `sub.wall` (one submit
command's wall), `stat.wall` (`squeue` with the 10,000-task array pending). The API rows have no peer:
neither has a client library (tsp is only its command; SLURM's REST daemon is not set up here).
"""
import statistics

from latency_bench import SAMPLES, SAMPLES_QUICK, percentile
from peers import PeerUnusable, Slurm, TaskSpooler
from rows import Fig

NO_API = "no API (command line only)"


def _lat(figs, lat, n):
    note = f"{n} sequential samples, min {min(lat):.1f} ms, max {max(lat):.1f} ms"
    figs["lat.cli.p50"] = Fig(percentile(lat, 50), note)
    figs["lat.cli.p99"] = Fig(percentile(lat, 99), note)


def _median(figs, key, ts, extra=""):
    figs[key] = Fig(statistics.median(ts), f"median of {len(ts)}, min {min(ts):.0f} ms" + extra)


def tsp(quick: bool) -> tuple[dict, str]:
    figs = {k: Fig(skipped=NO_API) for k in ("lat.api.p50", "lat.api.p99", "sub.api", "sub.api4")}
    figs["array10k"] = Fig(skipped="no arrays")
    figs["subtest.wall"] = Fig(skipped="no --test-only")
    figs["stat.wall"] = Fig(skipped="not run: each queued tsp job is a live client process "
                                    "(TS_MAXCONN, 1,000 by default)")
    with TaskSpooler(slots=4) as ts:
        n = SAMPLES_QUICK if quick else SAMPLES
        _lat(figs, ts.latency(n), n)
        v, note = ts.throughput(100 if quick else 300)
        figs["tput"] = Fig(v, note)
        _median(figs, "sub.wall", ts.submit_wall(5 if quick else 11), "; `tsp true` (the job runs)")
        return figs, ts.describe()


def slurm(quick: bool) -> tuple[dict, str]:
    figs = {k: Fig(skipped=NO_API) for k in ("lat.api.p50", "lat.api.p99", "sub.api", "sub.api4")}
    with Slurm(cpus=4, gpus=4) as s:
        n = 5 if quick else 12
        _lat(figs, s.latency(n), n)
        v, note = s.throughput(24 if quick else 60)
        figs["tput"] = Fig(v, note)
        runs = 1 if quick else 3
        times, _ = s.array_submit(10_000, runs)
        figs["array10k"] = Fig(min(times), f"`sbatch -H --array=1-10000`, best of {runs} "
                                           f"({', '.join(f'{t:.0f}' for t in times)} ms); SLURM keeps a pending "
                                           f"array as one job record until its tasks start")
        k = 5 if quick else 11
        walls = s.submit_walls(k)
        _median(figs, "subtest.wall", walls["subtest.wall"], "; `sbatch --test-only --wrap true`")
        _median(figs, "sub.wall", walls["sub.wall"], "; `sbatch -H --wrap true` (held, stays pending)")
        ts, queued = s.stat_wall(k)
        _median(figs, "stat.wall", ts, f"; `squeue`, {queued:,} queued (pending array tasks shown as one line)")
        return figs, s.describe()


RUNNERS = {"task-spooler": tsp, "SLURM": slurm}


def run(name: str, quick: bool) -> tuple[dict, str]:
    """({row key: Fig}, how the peer was set up); a peer that cannot run gives ({}, why)."""
    try:
        return RUNNERS[name](quick)
    except PeerUnusable as e:
        return {}, f"skipped: {e}"


# The labq rows the peers are compared on: (label, unit, better), for a row labq did not measure in
# this run (--only) — and every key here gets a peer cell, "skipped (see Peers)" when a peer did not run.
LABELS = {
    "lat.api.p50": ("submit → start p50, Python API (Client.submit)", "ms", "lower"),
    "lat.api.p99": ("submit → start p99, Python API (Client.submit)", "ms", "lower"),
    "lat.cli.p50": ("submit → start p50, CLI (`labq sub` subprocess)", "ms", "lower"),
    "lat.cli.p99": ("submit → start p99, CLI (`labq sub` subprocess)", "ms", "lower"),
    "tput": ("trivial jobs end to end, one 4-slot node", "jobs/s", "higher"),
    "sub.api": ("API submission, Client.submit in a loop", "jobs/s", "higher"),
    "sub.api4": ("API submission, 4 concurrent clients", "jobs/s", "higher"),
    "array10k": ("10,000-task array submit (one request)", "ms", "lower"),
    "subtest.wall": ("`labq sub --test-only -- true` wall", "ms", "lower"),
    "sub.wall": ("`labq sub -- true` wall", "ms", "lower"),
    "stat.wall": ("`labq stat` wall, 10,000 queued", "ms", "lower"),
}
COMPARED = tuple(LABELS)
UNITS = {k: v[1] for k, v in LABELS.items()}
