"""Run every labq benchmark and write bench/RESULTS.md: `python bench/run.py [--quick]`.

Each figure is printed beside its DESIGN §11 target with pass/miss. Nothing is hard-coded: a
benchmark that cannot run (no redis-server, the worker does not start) gets a "skipped: <reason>"
row instead of a number. The live benchmarks start their own private Redis, scheduler and worker.
"""
import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from rows import Row  # noqa: E402

QUICK_PLAN_BUDGET_S = 60


# -- the machine -------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _cmd(argv) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> list[tuple[str, str]]:
    redis = _cmd(["redis-server", "--version"]) or "not installed"
    commit = _cmd(["git", "rev-parse", "--short", "HEAD"])
    dirty = " (with uncommitted changes)" if _cmd(["git", "status", "--porcelain", "--untracked-files=no"]) else ""
    return [
        ("CPUs (nproc)", f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()}"),
        ("CPU model", _cpu_model()),
        ("memory", _mem()),
        ("load average at start", " ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"),
        ("redis-server", redis.replace("Redis server ", "")),
        ("labq", f"{commit}{dirty}" if commit else "unknown"),
    ]


# -- the benchmarks ----------------------------------------------------------------------------
def plan_rows(quick: bool) -> list[Row]:
    import plan_bench
    rows, measured = [], {}
    for p, n in plan_bench.GRID:
        if (p, n) == (100_000, 1000) and quick:
            # About 40 s on a 2-core machine: run once if the smaller case says it will fit.
            base = measured.get((10_000, 1000))
            projected = base * 10 if base is not None else None
            if projected is None or projected > QUICK_PLAN_BUDGET_S:
                why = (f"not run with --quick: projected ≈ {projected:.0f} s (10 × the 10,000 × 1,000 median) "
                       f"is over {QUICK_PLAN_BUDGET_S} s; run without --quick" if projected is not None
                       else "not run with --quick")
                rows.append(Row(f"plan() {p:,} pending × {n:,} nodes", unit="ms",
                                target=_ms(plan_bench.TARGETS.get((p, n))), skipped=why))
                print(_line(rows[-1]), flush=True)
                continue
        r = plan_bench.time_plan(p, n, plan_bench.runs_for(p, n, quick))
        measured[(p, n)] = r["median_s"]
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(r["reasons"].items(), key=lambda kv: -kv[1]))
        rows.append(Row(f"plan() {p:,} pending × {n:,} nodes", r["median_s"] * 1000, "ms", _ms(plan_bench.TARGETS.get((p, n))),
                        note=f"median of {r['runs']} (min {r['min_s'] * 1000:.0f}, max {r['max_s'] * 1000:.0f} ms); "
                             f"placed {r['placed']}, pending {r['still_pending']:,} ({reasons})"))
        print(_line(rows[-1]), flush=True)
    return rows


def _ms(seconds):
    return None if seconds is None else seconds * 1000


def live_rows(quick: bool) -> list[Row]:
    import cli_bench
    import latency_bench
    import submit_bench
    import throughput_bench
    from stackutil import BenchStack, Unusable
    rows = []
    rows += _guard("`labq --help`", lambda: cli_bench.run_help(quick, ROOT))
    try:
        bs = BenchStack(slots=4).__enter__()
    except Unusable as e:
        reason = f"labq stack not usable ({e})"
        return rows + [Row(name, skipped=reason) for name in (
            "submit → start (API, CLI)", "trivial jobs end to end", "API submission", "10,000-task array",
            "`labq sub` / `labq stat` wall")]
    try:
        rows += _guard("submit → start latency", lambda: latency_bench.run(bs, quick))
        rows += _guard("trivial jobs end to end", lambda: throughput_bench.run(bs, quick))
        rows += _guard("API submission", lambda: submit_bench.run(bs, quick))
        rows += _guard("`labq sub` / `labq stat` wall", lambda: cli_bench.run_with_stack(bs, quick))
    finally:
        bs.close()
    return rows


def _guard(name, fn) -> list[Row]:
    """A benchmark that fails becomes one skipped row with the reason, and the run goes on."""
    try:
        rows = fn()
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        rows = [Row(name, skipped=f"{type(e).__name__}: {str(e)[:300]} "
                                  f"({os.path.basename(where.filename)}:{where.lineno})")]
    for r in rows:
        print(_line(r), flush=True)
    return rows


def _line(r: Row) -> str:
    return f"{r.name:<62} {r.measured():>16}  {r.target_text():>14}  {r.verdict}"


# -- the report --------------------------------------------------------------------------------
def markdown(rows, mach, command: str, elapsed: float, quick: bool) -> str:
    out = ["# labq benchmark results", "",
           f"Written by `bench/run.py` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} "
           f"in {elapsed:.0f} s. Targets are DESIGN §11's; \"miss\" means the figure does not meet it.",
           "", f"Command: `{command}`" + (" (quick: fewer samples and runs)" if quick else ""), "",
           "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in mach]
    out += ["", "## Results", "", "| benchmark | measured | target | result | notes |", "|---|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r.name} | {r.measured()} | {r.target_text()} | {r.verdict} | {r.note} |")
    out += ["", "## How each figure is measured", ""]
    for mod in ("plan_bench", "latency_bench", "throughput_bench", "submit_bench", "cli_bench"):
        doc = (__import__(mod).__doc__ or "").strip()
        out += [f"- **bench/{mod}.py**: " + " ".join(doc.split()), ""]
    out.append("Peers (task-spooler, SLURM) are not measured yet.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples and runs (about 2 minutes on 2 cores)")
    ap.add_argument("--only", choices=("plan", "live"), help="run one group only")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="where to write the report")
    a = ap.parse_args(argv)
    command = "python bench/run.py" + "".join(f" {shlex.quote(x)}" for x in (argv if argv is not None else sys.argv[1:]))
    mach = machine()
    for k, v in mach:
        print(f"{k}: {v}")
    t0 = time.monotonic()
    rows = []
    if a.only in (None, "plan"):
        rows += plan_rows(a.quick)
    if a.only in (None, "live"):
        rows += live_rows(a.quick)
    elapsed = time.monotonic() - t0
    with open(a.out, "w") as f:
        f.write(markdown(rows, mach, command, elapsed, a.quick))
    misses = [r.name for r in rows if r.verdict == "miss"]
    print(f"\n{len(rows)} rows, {len(misses)} miss, {sum(r.verdict == 'skipped' for r in rows)} skipped, "
          f"{elapsed:.0f} s; wrote {os.path.relpath(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
