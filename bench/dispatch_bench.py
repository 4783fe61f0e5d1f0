"""Dispatch speed (issue 12): submit → start latency, trivial-job throughput through one 4-slot node
and the CPU each trivial job costs, split by process, for this tree and an earlier commit in the
same run, beside task-spooler.

    .venv/bin/python bench/dispatch_bench.py [--before 793d930] [--jobs 300] [--samples 40] [--write]

Each side runs in its own interpreter with that tree first on sys.path, so its private stack
(redis-server, `labq scheduler`, `labq worker`, as `labq up` starts them) runs that tree's code.
CPU is read from /proc/<pid>/stat (user+sys, own and reaped children) of each labq process tree
before and after the throughput run: scheduler; node agent; slot runners; what the slot runners
forked and reaped (attempt runners and the jobs themselves, `true`, whose own CPU the runners
report and is given apart); redis-server apart. CPU per job is less sensitive to the machine's
load than walls are; the load average is printed beside each side. `--write` replaces the section
between the dispatch markers of bench/HISTORY.md (the earlier reports).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HZ = os.sysconf("SC_CLK_TCK")
JOBS_OWN = "jobs' own (reported)"
# Both trees run this one config (side() sets it into each tree's own stackutil): the "before"
# tree's stackutil has a different one, and a difference in config would be measured as speed.
CONFIG = """
[scheduler]
tick = "{tick}"
kill_wait = "5s"
max_pending = {max_pending}
max_pending_per_user = {max_pending}
[accounts.bench]
users = ["{user}"]
[worker]
name = "bench-node"
gpus = 0
cpus = 4
mem = "8G"
slots = {slots}
spool = "{spool}"
run_as = "self"
"""


# -- CPU of process trees, from /proc ----------------------------------------------------------
def _stat(pid: int) -> tuple[float, float]:
    """(own user+sys, reaped children's user+sys) seconds of `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ, (int(v[13]) + int(v[14])) / HZ


def _kids(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> float:
    """CPU seconds of `pid` and everything below it, dead or alive (a dead process's time is in
    its reaper's children times, a live one's in its own)."""
    try:
        own, kids = _stat(pid)
    except OSError:
        return 0.0
    return own + kids + sum(_tree(k) for k in _kids(pid))


def cpu_split(procs: dict) -> dict:
    sched, agent, redis = procs["scheduler"].pid, procs["worker"].pid, procs["redis"].pid
    slots = _kids(agent)
    a_own, _ = _stat(agent)
    out = {"scheduler": _tree(sched), "agent": a_own, "redis": _stat(redis)[0],
           "slot runners": sum(_stat(s)[0] for s in slots),
           "attempt runners + jobs": sum(_stat(s)[1] + sum(_tree(k) for k in _kids(s)) for s in slots)}
    return out


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# -- one side: runs inside the tree being measured ---------------------------------------------
def side(jobs: int, samples: int) -> dict:
    import latency_bench
    import stackutil

    from labq.scheduler.jobs import states
    stackutil.CONFIG = CONFIG
    out = {"load_start": loadavg()}
    with stackutil.BenchStack(slots=4) as bs:
        lat, split = latency_bench.measure(bs, "api", samples)
        out["lat"] = lat
        out["split"] = {k: latency_bench.percentile(v, 50) for k, v in split.items() if v}
        body = bs.body(["true"], output="tput-%j.out", array=f"1-{jobs}")
        c0, t0 = cpu_split(bs.stack.procs), time.time()
        reply = bs.client.submit(body)
        done = bs.wait_terminal(range(reply["job_id"], reply["last_job_id"] + 1), 600, interval=0.05)
        wall = time.time() - t0
        c1 = cpu_split(bs.stack.procs)
        out["ok"] = sum(1 for j in done if j.state == states.COMPLETED)
        out["tput"], out["wall"] = jobs / wall, wall
        cpu = {k: (c1[k] - c0[k]) * 1000 / jobs for k in c0}
        job_cpu = sum((a.usage or {}).get("cpu_s", 0) for j in done for a in j.attempts) * 1000 / jobs
        cpu[JOBS_OWN] = job_cpu
        out["cpu"] = cpu
    out["load_end"] = loadavg()
    return out


def run_side(root: str, jobs: int, samples: int) -> dict:
    code = (f"import sys, json; sys.path[:0] = [{root!r}, {HERE!r}]\n"
            f"import dispatch_bench\n"
            f"print('RESULT ' + json.dumps(dispatch_bench.side({jobs}, {samples})))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"side {root} failed: {(p.stderr or p.stdout)[-1500:]}")


def tsp_side(jobs: int, samples: int) -> dict:
    from peers import PeerUnusable, TaskSpooler
    try:
        with TaskSpooler(slots=4) as ts:
            busy0, t0 = _busy(), time.time()
            v, note = ts.throughput(jobs)
            busy = (_busy() - busy0) * 1000 / jobs
            lat = ts.latency(samples)
            return {"tput": v, "note": note, "lat": lat, "busy_ms": busy, "version": ts.describe(),
                    "wall": time.time() - t0}
    except PeerUnusable as e:
        return {"skipped": str(e)}


def _busy() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / HZ


# -- the report --------------------------------------------------------------------------------
def _p(xs, q):
    from latency_bench import percentile
    return percentile(xs, q)


def report(sides: dict, tsp: dict, argv: str) -> list[str]:
    names = list(sides)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = ["<!-- dispatch:begin -->", "## Dispatch speed (issue 12: bench/dispatch_bench.py)", "",
             f"Run {when} on {len(os.sched_getaffinity(0))} cores shared with other sessions; `{argv}`. "
             "Each side is a private stack (redis-server with appendfsync always, scheduler, one 4-slot "
             "worker) running that tree's code; load average (1, 5, 15 min) at each side's start → end: "
             + "; ".join(f"{n}: {sides[n]['load_start']} → {sides[n]['load_end']}" for n in names) + ".", "",
             "| figure | target | " + " | ".join(names) + " | task-spooler |", "|---|---|" + "---:|" * (len(names) + 1)]
    t_lat = tsp.get("lat")

    def row(label, target, vals, peer=""):
        lines.append(f"| {label} | {target} | " + " | ".join(vals) + f" | {peer} |")
    row("API submit → start p50", "≤ 20 ms", [f"{_p(sides[n]['lat'], 50):.1f} ms" for n in names],
        f"{_p(t_lat, 50):.1f} ms (CLI)" if t_lat else tsp.get("skipped", ""))
    row("API submit → start p99", "≤ 100 ms", [f"{_p(sides[n]['lat'], 99):.1f} ms" for n in names],
        f"{_p(t_lat, 99):.1f} ms (CLI)" if t_lat else "")
    for stage in ("scheduler", "dispatch", "runner", "spawn"):
        row(f"— p50 stage: {stage}", "", [f"{sides[n]['split'].get(stage, float('nan')):.1f} ms" for n in names])
    row("trivial jobs, one 4-slot node", "≥ 100 jobs/s",
        [f"{sides[n]['tput']:.1f} jobs/s ({sides[n]['ok']} ok)" for n in names],
        f"{tsp['tput']:.0f} jobs/s" if "tput" in tsp else "")
    if "tput" in tsp:
        row("— labq / task-spooler throughput", "", [f"{sides[n]['tput'] / tsp['tput']:.2f}" for n in names])
    total = {n: sum(v for k, v in sides[n]["cpu"].items() if k not in ("redis", "jobs' own (reported)"))
             for n in names}
    row("CPU per trivial job, labq processes (user+sys)", "≤ 10 ms", [f"{total[n]:.1f} ms" for n in names],
        f"{tsp['busy_ms']:.1f} ms (whole machine)" if "busy_ms" in tsp else "")
    row("— less the jobs' own CPU (what labq itself spends)", "", [
        f"{total[n] - sides[n]['cpu'][JOBS_OWN]:.1f} ms" for n in names])
    for k in ("scheduler", "agent", "slot runners", "attempt runners + jobs", "jobs' own (reported)", "redis"):
        row(f"— {k}", "", [f"{sides[n]['cpu'][k]:.2f} ms" for n in names])
    lines += [""]
    if "version" in tsp:
        lines.append(f"task-spooler: {tsp['version']}; {tsp['note']}; its latency is `tsp date +%s.%N` → "
                     "the time printed (a CLI client start included; labq's is the Python API). Its CPU "
                     "is the whole machine's busy time during its run divided by the jobs (its server "
                     "detaches), so other sessions' load inflates it.")
    lines += ["", "<!-- dispatch:end -->"]
    return lines


def write(lines: list[str]) -> None:
    path = os.path.join(HERE, "HISTORY.md")
    with open(path) as f:
        text = f.read()
    block = "\n".join(lines)
    if "<!-- dispatch:begin -->" in text:
        head, _, rest = text.partition("<!-- dispatch:begin -->")
        _, _, tail = rest.partition("<!-- dispatch:end -->")
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="a commit to measure beside this tree (e.g. 793d930)")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--no-tsp", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    tmp = tempfile.mkdtemp(prefix="labq-dispatch-bench-")
    sides = {}
    try:
        if args.before:
            d = os.path.join(tmp, "before")
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", d, args.before], check=True,
                           capture_output=True)
            if os.path.exists(os.path.join(d, "worker", "_clone.c")):    # its native part, as make install builds it
                # From a directory without its pyproject.toml (an older setuptools refuses its ext-modules).
                w = os.path.join(d, "worker")
                build = (f"from setuptools import setup, Extension; setup(ext_modules=[Extension('_clone', "
                         f"[{os.path.join(w, '_clone.c')!r}])], script_args=['-q', 'build_ext', '--build-lib', {w!r}, "
                         f"'--build-temp', 'tmp'])")
                subprocess.run([sys.executable, "-c", build], cwd=tmp, capture_output=True)
            sides[f"before ({args.before})"] = run_side(d, args.jobs, args.samples)
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        sides[f"after ({head})"] = run_side(ROOT, args.jobs, args.samples)
        tsp = {"skipped": "not run (--no-tsp)"} if args.no_tsp else tsp_side(args.jobs, args.samples)
    finally:
        if args.before:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", os.path.join(tmp, "before")],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    if "skipped" in tsp:
        print(f"task-spooler skipped: {tsp['skipped']}")
    argv = "python bench/dispatch_bench.py " + " ".join(sys.argv[1:])
    lines = report(sides, tsp, argv)
    print("\n".join(lines))
    if args.write:
        write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
