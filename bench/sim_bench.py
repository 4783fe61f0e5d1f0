"""Simulator speed at queue depth: each replay in its own process (so peak memory is its own), with
wall time, CPU time (user + sys, less sensitive to a loaded machine) and peak RSS, beside what it
scheduled (mean wait, mean JCT) so that two versions can be checked to agree; and the part of the
CPU time spent after the last submit with the simulated days it covered (`drain`: a spent budget's
backlog starts one job per end, for months).

    python bench/sim_bench.py [--cases kth,gpu20k] [--policies fifo,priority,backfill,fairshare]
                              [--timeout 300] [--out bench/results/sim.md] [--label after]
                              [--kth-processors 100,50,25] [--gpu20k-gpus 16,32,64,512,1024]
                              [--pythonpath DIR]   # replay another checkout's labq (a `before` column)
                              [--config FILE]      # a labq config every policy starts from (budgets)
    SIM_BENCH_PROGRESS=1 python bench/sim_bench.py ...     # each replay's pace on stderr, every 10 % of its jobs
    python bench/sim_bench.py --one TRACE NODES POLICY     # one replay in this process: its JSON line
    SIM_BENCH_THROUGH=1 (or --through): backfill on, every pass through plan() with the daemon's kept
                                        state (sim/through.py) instead of the replay's shortcuts
    SIM_BENCH_PROFILE=15 ... --one ...                     # and its cProfile top 15 (own time) on stderr

Traces: the KTH SP2 log from ../shared/traces/ (each job's requested time as its limit) squeezed onto
100, 50 and 25 processors; bench/gpu_trace.py's seeded 20,000-job GPU trace (generated into a temp
directory) onto 16, 32, 64, 512 and 1,024 GPUs (nodes of 8); `gpu200k`: 200,000 jobs over 300 days onto 512 GPUs.
A replay past --timeout is stopped and reported as such.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KTH = os.path.join(os.path.dirname(ROOT), "shared", "traces", "kth_sp2_1996.csv")
CASES = {
    "kth": [("kth", "1x0:100"), ("kth", "1x0:50"), ("kth", "1x0:25")],
    "gpu200k": [("gpu200k", "64x8:64:512G")],
    "gpu8k": [("gpu8k", "8x8:64:512G")],          # with --config of a budget: the budgeted replay
}


def one(trace: str, nodes: str, policy: str) -> dict:
    """In the child: one replay, measured."""
    from labq.cli.whatif import parse_nodes
    from labq.scheduler.settings import config as config_mod
    from labq.scheduler.sim import engine, metrics, policies, result, trace as simtrace
    kw = {"extra": trace.replace(".csv", "_extra.csv"), "time_column": "req_time_s"} if "kth" in trace else {}
    jobs = simtrace.load(trace, **kw)
    cluster = parse_nodes(nodes)
    base = os.environ.get("SIM_BENCH_CONFIG")                # --config: budgets etc. under every policy
    base_cfg = config_mod.loads(open(base).read()) if base else config_mod.Config()
    cfg, hooks = policies.resolve(base_cfg, policy)     # learned, sjf-oracle: their hooks too
    t0, c0 = time.perf_counter(), time.process_time()
    pace = _progress(t0, c0) if os.environ.get("SIM_BENCH_PROGRESS") else None
    submitted: list[float] = []        # CPU seconds when the last job had been submitted

    def progress(done: int, total: int) -> None:
        if done == total and not submitted:
            submitted.append(time.process_time() - c0)
        if pace:
            pace(done, total)
    # --through: backfill on, each pass through plan() with the daemon's kept state (sim/through.py)
    kw = {"through": True} if os.environ.get("SIM_BENCH_THROUGH") else {}
    prof = _profiler()
    res = engine.simulate(jobs, cluster, cfg, hooks=hooks, progress=progress, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if prof:
        prof.disable()
        import pstats
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(int(os.environ["SIM_BENCH_PROFILE"]))
    rep = metrics.report(res)
    # After the last submit the replay only drains the queue: with a spent budget, one job per end
    # for months of simulated time. Its share of the CPU and its simulated span, apart.
    last = result.EPOCH + max((j.submit for j in jobs), default=0)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "passes": res.plan_calls, "decided": getattr(res, "instants", res.plan_skipped) - res.plan_skipped, "refused": len(res.refused), "jobs": len(jobs), "mean_wait": rep["wait_s"]["mean"], "jct": rep["completion_time_s"]["mean"],
            "drain_cpu_s": round(cpu - (submitted[0] if submitted else cpu), 1),
            "drain_days": round(max(0.0, res.end_time - last) / 86400, 1)}


def _profiler():
    """SIM_BENCH_PROFILE=N: the replay under cProfile, its top N functions by own time on stderr
    (the CPU figure then includes the profiler's cost)."""
    if not os.environ.get("SIM_BENCH_PROFILE"):
        return None
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    return prof


def _progress(t0: float, c0: float):
    """Every 10 % of the jobs submitted: a line on stderr with wall and CPU so far (a long replay's pace)."""
    step = [0.0]

    def show(done: int, total: int) -> None:
        if total and done / total >= step[0]:
            step[0] += 0.1
            print(f"  {done:,}/{total:,} jobs: {time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU",
                  file=sys.stderr, flush=True)
    return show


def traces(tmp: str, cases, kth: str) -> dict:
    sys.path.insert(0, HERE)
    import gpu_trace
    out = {"kth": kth}
    if "gpu20k" in cases:
        out["gpu20k"] = gpu_trace.write(os.path.join(tmp, "gpu20k.csv"), 20000, seed=1, days=30)
    if "gpu8k" in cases:
        out["gpu8k"] = gpu_trace.write(os.path.join(tmp, "gpu8k.csv"), 8000, seed=1, days=12)
    if "gpu200k" in cases:
        out["gpu200k"] = gpu_trace.write(os.path.join(tmp, "gpu200k.csv"), 200000, seed=1, days=300)
    return out


def run(path: str, nodes: str, policy: str, timeout: int, pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, os.path.abspath(__file__), "--one", path, nodes, policy]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout, env=env, cwd="/",
                             stderr=None if env.get("SIM_BENCH_PROGRESS") else subprocess.PIPE)
    except subprocess.TimeoutExpired:
        return {"stopped": round(time.perf_counter() - t0)}
    if out.returncode:
        return {"error": ((out.stderr or "").strip().splitlines() or ["exit status %d" % out.returncode])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(r: dict) -> str:
    if "stopped" in r:
        return f"> {r['stopped']} s (stopped)"
    if "error" in r:
        return f"error: {r['error']}"
    return f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, {r['peak_mb']} MB"


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(*sys.argv[2:5])))
        return 0
    ap = argparse.ArgumentParser(prog="bench/sim_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="kth,gpu20k")
    ap.add_argument("--policies", default="fifo,priority,backfill,fairshare",
                    help="any of labq simulate's, learned and sjf-oracle included")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--kth-processors", default="100,50,25", help="the KTH cases' processor counts")
    ap.add_argument("--gpu20k-gpus", default="16,32,64,512,1024", help="the gpu20k cases' GPU counts (nodes of 8)")
    ap.add_argument("--kth", default=KTH, help="the KTH trace (default: ../shared/traces/ beside the checkout)")
    ap.add_argument("--pythonpath", help="replay the labq of another checkout (its root), not this one")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--config", help="a labq config (TOML) each policy starts from: e.g. a budget")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sim.json"))
    ap.add_argument("--through", action="store_true", help="backfill on: passes through plan() with the kept state")
    a = ap.parse_args(argv)
    if a.through:
        os.environ["SIM_BENCH_THROUGH"] = "1"
    if a.config:
        os.environ["SIM_BENCH_CONFIG"] = os.path.abspath(a.config)
    cases = a.cases.split(",")
    if "kth" in cases and not os.path.exists(a.kth):
        print(f"skipped kth: {a.kth} not found (--kth PATH)")
        cases.remove("kth")
    CASES["kth"] = [("kth", f"1x0:{p}") for p in a.kth_processors.split(",")]
    CASES["gpu20k"] = [("gpu20k", f"{int(g) // 8}x8:64:512G") for g in a.gpu20k_gpus.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = traces(tmp, cases, a.kth)
        for case in cases:
            for name, nodes in CASES[case]:
                for policy in a.policies.split(","):
                    load = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
                    r = run(paths[name], nodes, policy, a.timeout, a.pythonpath)
                    r.update(trace=name, nodes=nodes, policy=policy, load=load, label=a.label)
                    rows.append(r)
                    print(f"{name:<8}{nodes:<9}{policy:<10}{cell(r):<42} load {load}"
                          + (f"  wait {r['mean_wait']:,.0f} s, JCT {r['jct']:,.0f} s, refused {r['refused']:,}"
                             if "mean_wait" in r else "")
                          + (f", drain {r['drain_cpu_s']} s CPU over {r['drain_days']} days" if "drain_days" in r else "")
                          + (f", {r['decided']:,} passes decided" if r.get("decided") else ""),
                          flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {os.path.relpath(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
