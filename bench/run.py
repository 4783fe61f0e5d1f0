"""Run every labq benchmark; bench/RESULTS.md, the current table, gets the rows (current.py): `make bench`.

Each figure stands beside its DESIGN §11 target and, where a peer does the same work, beside the
peer's figure from the same run (task-spooler, single-node SLURM) and the ratio. Nothing is
hard-coded: what cannot run (no redis-server, a peer not installed, py-spy absent) gets a
"skipped: <reason>" cell instead of a number. Where a target is missed the report says by how much,
why (from figures taken in the run), and shows the top of a py-spy profile of the hot path.

Groups, in the order they run (`--only NAME`, repeatable or comma-separated):
  plan    plan() over 1k/10k/100k pending × 10/50/1,000 nodes, and how its cost grows
  live    a private labq stack: submit → start, throughput, API submission, arrays, CLI walls
  drain   only the live group's drains (1, 20, 100 client processes) and their fit, on a stack of their own:
          the rows without peers, remeasured without blanking the peer cells of the others (`--only drain`;
          not run without --only, as the live group measures them)
  memory  scheduler RSS and Redis bytes per job with 100,000 pending (a second private stack)
  tsp     task-spooler doing the same work (its own server; skipped when `tsp` is missing)
  slurm   single-node SLURM doing the same work (munged + slurmctld + slurmd on loopback, as root)
  runner  runner CPU overhead per running job: bench/watch_bench.py, when it exists
  kth     the KTH SP2 trace replay: bench/kth_replay.py writes bench/results/kth.md, when it exists
  replay  issue 41's grid: `labq simulate` of bench/gpu_trace.py's 20,000 jobs at offered load 9 on 64
          GPUs, every policy on 512, 64 and 32 GPUs ($BENCH_REPLAY_GPUS, $BENCH_REPLAY_POLICIES;
          $BENCH_REPLAY_JOBS=200000 for the long trace), CPU seconds and peak RSS

Contracts with the two benchmarks other people own: bench/watch_bench.py provides
`measure(window=SECONDS)` returning {name, value (% of a core), unit, target, note} (or `run(quick)`
/ `run(bs, quick)` returning rows.Row, bs a stackutil.BenchStack); bench/kth_replay.py runs as `python bench/kth_replay.py` (with --quick under --quick, when its
source mentions that flag) within KTH_TIMEOUT_S and writes bench/results/kth.md, which is copied
into the report.

Every run (--only included) replaces, in bench/results/current.json and so in bench/RESULTS.md, the
rows it measured, each stamped with the run's date, commit and load average; the rows it did not
measure stay. A --quick run writes its copy of the table to bench/out/ instead. The detailed report
(misses explained, profiles, run log) goes to bench/out/REPORT.md (--out). The live group measures on
the live path only: real processes, real clients, the queue changing meanwhile (live_bench.py);
plan() rows are the pure function on generated snapshots (plan_bench.py; DESIGN §11's plan figure).
"""
import argparse
import datetime
import importlib.util
import inspect
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

from rows import Fig, Row, fmt  # noqa: E402

GROUPS = ("plan", "live", "drain", "memory", "tsp", "slurm", "runner", "kth", "replay")
OPT_IN = ("drain",)         # run only when named: their rows are another group's too
QUICK_PLAN_BUDGET_S = 60
KTH_TIMEOUT_S = 240
KTH_MD = os.path.join(HERE, "results", "kth.md")


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


def _cpu_busy(seconds: float = 1.0) -> float:
    """% of all CPUs busy (every process, ours included) over the next `seconds`, from /proc/stat."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]          # total, idle + iowait
    try:
        t0, i0 = snap()
        time.sleep(seconds)
        t1, i1 = snap()
        return 100 * (1 - (i1 - i0) / max(1, t1 - t0))
    except OSError:
        return float("nan")


def _busy_seconds() -> float:
    """CPU seconds all processes have used (every CPU together), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU seconds this process and its waited-for descendants have used (the stacks, peers and
    py-spy are our children and are reaped at the end of each group)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Others:
    """CPU used by processes that are not the benchmark's, over an interval, in % of the machine."""
    def __init__(self):
        self.busy, self.own, self.wall = _busy_seconds(), _own_seconds(), time.monotonic()

    def percent(self) -> float:
        wall = max(1e-6, time.monotonic() - self.wall)
        other = (_busy_seconds() - self.busy) - (_own_seconds() - self.own)
        return max(0.0, 100 * other / (wall * len(os.sched_getaffinity(0))))


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> list[tuple[str, str]]:
    redis = _cmd(["redis-server", "--version"]) or "not installed"
    commit = _cmd(["git", "rev-parse", "--short", "HEAD"])
    dirty = " (with uncommitted changes)" if _cmd(["git", "status", "--porcelain", "--untracked-files=no"]) else ""
    cores = _cmd(["sh", "-c", "lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l"])
    return [
        ("CPUs", f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()} logical"
                 + (f", {cores} physical cores" if cores and cores != "0" else "")),
        ("CPU model", _cpu_model()),
        ("memory", _mem()),
        ("kernel", f"{platform.system()} {platform.release()} {platform.version()}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()} ({os.path.relpath(sys.executable, ROOT)})"),
        ("redis-server", redis.replace("Redis server ", "")),
        ("labq", f"{commit}{dirty}" if commit else "unknown"),
        ("load average (1, 5, 15 min) at start", _load()),
        ("CPU busy in the second before the run", f"{_cpu_busy():.0f} % (all processes; the machine is shared)"),
    ]


# -- plan() ------------------------------------------------------------------------------------
def plan_rows(quick: bool, medians: dict) -> list[Row]:
    import plan_bench
    rows = []
    for p, n in plan_bench.GRID:
        key = f"plan.{p}x{n}"
        # A cold pass (every job new to it) carries no target: DESIGN §11 asks plan() to cost
        # O(request classes + changed jobs), which the changing queue's rows below measure.
        target = None
        if (p, n) == (100_000, 1000) and quick:
            base = medians.get((10_000, 1000))
            projected = base * 10 if base is not None else None
            if projected is None or projected > QUICK_PLAN_BUDGET_S:
                why = (f"not run with --quick: projected ≈ {projected:.0f} s (10 × the 10,000 × 1,000 median) "
                       f"is over {QUICK_PLAN_BUDGET_S} s; run without --quick" if projected is not None
                       else "not run with --quick")
                rows.append(Row(f"plan() {p:,} pending × {n:,} nodes", unit="ms", target=target, skipped=why, key=key))
                print(_line(rows[-1]), flush=True)
                continue
        r = plan_bench.time_plan(p, n, plan_bench.runs_for(p, n, quick))
        medians[(p, n)] = r["median_s"]
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(r["reasons"].items(), key=lambda kv: -kv[1]))
        rows.append(Row(f"plan() {p:,} pending × {n:,} nodes", r["median_s"] * 1000, "ms", target, key=key,
                        note=f"a cold pass: in-process plan() on a generated snapshot, every job new to it (the target is the changing queue's row); CPU median of {r['runs']} (min {r['min_s'] * 1000:.0f}, max {r['max_s'] * 1000:.0f} ms); "
                             f"placed {r['placed']}, pending {r['still_pending']:,} ({reasons})",
                        data={"pending": p, "nodes": n}))
        print(_line(rows[-1]), flush=True)
    for (p, n), (passes, changes) in plan_bench.CHANGING.items():
        if quick and p * n >= 10 ** 8:
            continue
        r = plan_bench.changing_case(p, n, passes, changes)
        rows.append(Row(f"plan() {p:,} pending × {n:,} nodes, changing queue", r["median_s"] * 1000, "ms",
                        _ms(plan_bench.TARGETS.get((p, n))), key=f"plan.changing.{p}x{n}",
                        note=f"CPU median over {passes} passes, each after {changes} ends, {changes} cancels and "
                             f"{changes} submits, each pass's plan applied, with what the daemon keeps from pass to "
                             f"pass (policy/kept.py); min {r['min_s'] * 1000:.0f}, max "
                             f"{r['max_s'] * 1000:.0f} ms; {r['placed']} started; backfill on (depth 1)",
                        data={"pending": p, "nodes": n}))
        print(_line(rows[-1]), flush=True)
    return rows


REPLAY_POLICIES = ("fifo", "priority", "fairshare", "backfill", "learned", "sjf-oracle")
REPLAY_TIMEOUT_S = 150


def replay_rows(quick: bool) -> list[Row]:
    """Each policy replaying the 20,000-job trace at offered load 9 on 64 GPUs (`bench/gpu_trace.py
    --jobs 20000 --load 9`), each replay its own process under built-in defaults (sim_bench.run):
    CPU seconds (user + sys of the replay) and its peak RSS, against issue 41's 30 s (5 min at 200,000)."""
    import tempfile

    import gpu_trace
    import sim_bench
    gpus = [int(g) for g in os.environ.get("BENCH_REPLAY_GPUS", "64" if quick else "512,64,32").split(",")]
    policies = os.environ.get("BENCH_REPLAY_POLICIES", ",".join(REPLAY_POLICIES)).split(",")
    # $BENCH_REPLAY_JOBS=200000: the same trace ten times longer at the same load (target 5 min)
    n = int(os.environ.get("BENCH_REPLAY_JOBS", "20000"))
    target, timeout = (30.0, REPLAY_TIMEOUT_S) if n <= 20000 else (300.0, 2 * 300)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = gpu_trace.write(os.path.join(tmp, "t9.csv"), n, 1, gpu_trace.days_for_load(n, 1, 9.0, 64))
        for g in gpus:
            for policy in policies:
                name = f"`labq simulate` {n:,} jobs (load 9 on 64 GPUs) on {g} GPUs, {policy}"
                r = sim_bench.run(path, f"{g // 8}x8:64:512G", policy, timeout, None)
                key = f"replay.t9.{g}.{policy}" if n == 20000 else f"replay.t9.{n}.{g}.{policy}"
                if "cpu_s" not in r:
                    rows.append(Row(name, unit="s", target=target, key=key, failed=sim_bench.cell(r)))
                else:
                    rows.append(Row(name, r["cpu_s"], "s", target, key=key,
                                    note=f"CPU of the replay's own process; peak RSS {r['peak_mb']} MB; wall {r['wall_s']} s; "
                                         f"mean wait {r['mean_wait']:,.0f} s; {r['passes']:,} plan() calls",
                                    data={"pending": 20000, "nodes": g // 8}))
                print(_line(rows[-1]), flush=True)
    return rows


def plan_profiles(rows: list[Row], quick: bool, profiles: list) -> None:
    import profile_bench
    for r in rows:
        if r.key.startswith("plan.") and r.verdict == "miss":
            p, n = r.data["pending"], r.data["nodes"]
            profiles.append(_profile(lambda: profile_bench.plan_profile(p, n, 3 if quick else 6),
                                     f"plan:{p}x{n}", f"plan(), {p:,} pending × {n:,} nodes"))


def _ms(seconds):
    return None if seconds is None else seconds * 1000


# -- the live labq stack -----------------------------------------------------------------------
LIVE_NAMES = ("submit → start (API, CLI)", "trivial jobs end to end", "requests drained (client processes)",
              "`labq stat` / `labq sub` / `--help` CPU and wall", "rare commands' CPU against `labq sub`'s")


def live_rows(quick: bool, profiles: list, profile: bool) -> list[Row]:
    import latency_bench
    import live_bench
    import rare_bench
    import throughput_bench
    from stackutil import BenchStack, Unusable
    rows = []
    try:
        bs = BenchStack(slots=4, max_pending=200_000).__enter__()
    except Unusable as e:
        return rows + [Row(name, skipped=f"labq stack not usable ({e})") for name in LIVE_NAMES]
    try:
        rows += _guard("submit → start latency", lambda: latency_bench.run(bs, quick))
        rows += _guard("trivial jobs end to end", lambda: throughput_bench.run(bs, quick))
        rows += _guard("drain from client processes, the commands", lambda: live_bench.run(bs, quick))
        rows += _guard("rare commands against `labq sub`", lambda: rare_bench.rows(bs, quick))
        if profile:
            try:
                live_profiles(bs, {r.key for r in rows if r.verdict == "miss"}, quick, profiles)
            except Exception as e:     # the measured rows stand; the report says which profiles are missing
                import profile_bench
                profiles.append(profile_bench.Profile("live", "the live stack's hot paths", "",
                                                      skipped=f"{type(e).__name__}: {str(e)[:300]}"))
    finally:
        t0 = time.monotonic()
        bs.close()
        print(f"  (stopping the stack: {time.monotonic() - t0:.0f} s)", flush=True)
    return rows


def drain_rows(quick: bool) -> list[Row]:
    """The live group's drain rows alone, on a private stack of their own."""
    import live_bench
    from stackutil import BenchStack, Unusable
    try:
        bs = BenchStack(slots=4, max_pending=200_000).__enter__()
    except Unusable as e:
        return [Row(LIVE_NAMES[2], skipped=f"labq stack not usable ({e})")]
    try:
        live_bench.compiled()
        return _guard("drain from client processes", lambda: live_bench.drain_rows(bs, quick))
    finally:
        bs.close()


def live_profiles(bs, missed: set, quick: bool, profiles: list) -> None:
    """Profiles of the hot paths behind the live rows that missed (untimed, after the timed runs)."""
    import profile_bench
    import submit_bench

    from labq.scheduler.jobs import states
    if "stat.wall" in missed:
        profiles.append(_profile(lambda: profile_bench.stat_profile(bs), "stat", "`labq stat`"))
    if missed & {"lat.cli.p50", "lat.cli.p99", "sub.wall", "subtest.wall"}:
        profiles.append(_profile(lambda: profile_bench.cli_profile(bs), "cli", "`labq sub` start-up: imports"))
    # From here on the profiles want the submission benchmark's empty queue back.
    pending = [j.display_id for j in bs.client.read.active() if j.state == states.PENDING]
    submit_bench._cancel(bs, pending)
    if missed & {"sub.api", "sub.api4"}:
        n = 200 if quick else 500
        body = bs.body(["true"], account="parked")
        ids: list = []

        def loop():
            for _ in range(n):
                ids.append(bs.client.submit(dict(body))["job_id"])
        profiles.append(_profile(lambda: profile_bench.scheduler_profile(bs, loop, f"{n} sequential API submits"),
                                 "scheduler", "the scheduler during API submits"))
        submit_bench._cancel(bs, ids)
    if "array10k" in missed:
        got: list = []

        def array():
            got.append(bs.client.submit(bs.body(["true"], account="parked", array="1-10000"), timeout=120)["job_id"])
        profiles.append(_profile(lambda: profile_bench.scheduler_profile(bs, array, "a 10,000-task array submit", "array"),
                                 "array", "the scheduler during a 10,000-task array submit"))
        submit_bench._cancel(bs, got)
    if missed & {"lat.api.p50", "lat.api.p99", "tput"}:
        m = 100 if quick else 200

        def tput():
            reply = bs.client.submit(bs.body(["true"], output="prof-%j.out", array=f"1-{m}"))
            bs.wait_terminal(range(reply["job_id"], reply["last_job_id"] + 1), 300, interval=0.05)
        profiles += _profiles(lambda: profile_bench.node_profiles(bs, tput, f"{m} trivial jobs"),
                              "worker", "the worker and the scheduler during trivial jobs")


def _profile(fn, key: str, title: str):
    return _profiles(lambda: [fn()], key, title)[0]


def _profiles(fn, key: str, title: str) -> list:
    """fn() -> [Profile]; or one skipped Profile saying why not."""
    import profile_bench
    t0 = time.monotonic()
    why = profile_bench.unavailable()
    try:
        got = [profile_bench.Profile(key, title, "", skipped=why)] if why else fn()
    except Exception as e:
        got = [profile_bench.Profile(key, title, "", skipped=f"{type(e).__name__}: {str(e)[:300]}")]
    for p in got:
        print(f"profile: {p.title}" + (f" — skipped: {p.skipped}" if p.skipped else
                                       f" ({p.samples:,} samples)" if p.samples else "")
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
    return got


def memory_rows(quick: bool) -> list[Row]:
    import memory_bench
    return _guard("scheduler and Redis memory, 100,000 pending", lambda: memory_bench.run(quick))


# -- the peers ---------------------------------------------------------------------------------
def peer_group(name: str, quick: bool, peers: dict) -> None:
    import peer_bench
    t0 = time.monotonic()
    figs, how = peer_bench.run(name, quick)
    peers[name] = (figs, how)
    print(f"{name}: {how} ({time.monotonic() - t0:.0f} s)", flush=True)
    for key, f in figs.items():
        shown = fmt(f.value, peer_bench.UNITS.get(key, "ms")) if f.value is not None else f.skipped
        print(f"  {key:<14} {shown}", flush=True)


def attach_peers(rows: list[Row], peers: dict) -> None:
    import peer_bench
    by_key = {r.key: r for r in rows if r.key}
    for name, (figs, how) in peers.items():
        if not figs:             # the peer did not run at all: its cells say so, the Peers section says why
            for key in peer_bench.COMPARED:
                if key in by_key:
                    by_key[key].peers[name] = Fig(skipped="skipped (see Peers)")
            continue
        for key, f in figs.items():
            row = by_key.get(key)
            if row is None:
                if f.value is None:
                    continue
                label, unit, better = peer_bench.LABELS[key]
                row = by_key[key] = Row(label, unit=unit, better=better, key=key,
                                        skipped="labq not measured in this run (--only)")
                rows.append(row)
            row.peers[name] = f


# -- the benchmarks others own -----------------------------------------------------------------
def _load_module(name: str):
    path = os.path.join(HERE, f"{name}.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RUNNER_ROW = ("runner CPU overhead per running job (1 Hz sampling)", "%", 1.0)


def runner_rows(quick: bool) -> list[Row]:
    name, unit, target = RUNNER_ROW
    if not os.path.exists(os.path.join(HERE, "watch_bench.py")):
        return [Row(name, unit=unit, target=target, key="runner",
                    skipped="not measured yet: bench/watch_bench.py (runner overhead, issue 5) is not in this checkout")]

    def run():
        mod = _load_module("watch_bench")
        if hasattr(mod, "measure"):          # measure(window=…) -> {name, value, unit, target, note}
            d = mod.measure(window=10.0 if quick else 32.0)
            return [Row(d.get("name", name), d["value"], unit, d.get("target", target), note=d.get("note", ""),
                        key="runner")]
        fn = getattr(mod, "run", None)
        if fn is None:
            raise RuntimeError("bench/watch_bench.py has neither measure() nor run(quick) / run(bs, quick)")
        params = list(inspect.signature(fn).parameters)
        if params and params[0] == "bs":
            from stackutil import BenchStack
            with BenchStack(slots=4) as bs:
                got = fn(bs, quick)
        else:
            got = fn(quick) if params else fn()
        got = [got] if isinstance(got, Row) else list(got)
        for r in got:
            r.key = r.key or "runner"
        return got
    rows = _guard(name, run)
    for r in rows:
        if r.skipped and not r.key:
            r.key, r.unit, r.target = "runner", unit, target
    return rows


def kth_section(quick: bool, started: float) -> tuple[list[str], str]:
    """(the report's lines for the KTH replay, a one-line status for the run log)."""
    script = os.path.join(HERE, "kth_replay.py")
    if not os.path.exists(script):
        return ["Not measured yet: bench/kth_replay.py (the KTH SP2 replay) is not in this checkout."], "absent"
    with open(script) as f:
        argv = [sys.executable, script] + (["--quick"] if quick and "--quick" in f.read() else [])
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=KTH_TIMEOUT_S)
        status = (f"`{' '.join(['python', 'bench/kth_replay.py'] + argv[2:])}` exited {p.returncode} "
                  f"after {time.monotonic() - t0:.0f} s")
        said = (p.stdout or "").strip().splitlines()
        if p.returncode != 0:
            status += f": {(p.stderr or p.stdout).strip()[-300:]}"
        elif said and said[-1].startswith("skipped"):
            status += f": {said[-1]}"
    except subprocess.TimeoutExpired:
        status = f"bench/kth_replay.py did not finish within {KTH_TIMEOUT_S} s and was stopped"
    print(f"kth: {status}", flush=True)
    if not os.path.exists(KTH_MD):
        return [f"No bench/results/kth.md ({status})."], status
    fresh = os.path.getmtime(KTH_MD) >= started
    when = datetime.datetime.fromtimestamp(os.path.getmtime(KTH_MD)).astimezone()
    out = ["From `bench/results/kth.md`, " + ("written in this run" if fresh else
           f"written {when:%Y-%m-%d %H:%M %Z}, not in this run") + f" ({status}):", ""]
    with open(KTH_MD) as f:
        for line in f.read().splitlines():
            if len(out) == 2 and (line.startswith("## ") or not line.strip()):
                continue                       # the file's own title (this section has one) and blank lines
            out.append("#" + line if line.startswith("#") else line)
    return out, status


# -- reporting helpers -------------------------------------------------------------------------
def _guard(name, fn) -> list[Row]:
    """A benchmark that fails becomes one skipped row with the reason, and the run goes on."""
    t0 = time.monotonic()
    try:
        rows = fn()
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        rows = [Row(name, skipped=f"{type(e).__name__}: {str(e)[:300]} "
                                  f"({os.path.basename(where.filename)}:{where.lineno})")]
    for r in rows:
        print(_line(r), flush=True)
    print(f"  ({name}: {time.monotonic() - t0:.0f} s)", flush=True)
    return rows


def _line(r: Row) -> str:
    return f"{r.name:<62} {r.measured():>16}  {r.target_text():>14}  {r.result()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0],
                                 epilog="groups: " + ", ".join(GROUPS))
    ap.add_argument("--quick", action="store_true", help="fewer samples and runs, shorter windows, no 100,000-task "
                                                           "probe at the default tick (about 4 minutes)")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="run only these groups (repeat, or comma-separate): " + ", ".join(GROUPS))
    ap.add_argument("--no-profile", action="store_true", help="do not profile the hot paths of missed targets")
    ap.add_argument("--out", help="where to write the detailed report (misses explained, profiles, run log; "
                                  "default bench/out/REPORT.md)")
    a = ap.parse_args(argv)
    only = [g.strip() for x in (a.only or []) for g in x.split(",") if g.strip()]
    bad = [g for g in only if g not in GROUPS]
    if bad:
        ap.error(f"unknown group {', '.join(bad)} (expected {', '.join(GROUPS)})")
    groups = [g for g in GROUPS if g in only or not only and g not in OPT_IN]
    out = a.out or os.path.join(HERE, "out", "REPORT.md")
    args = argv if argv is not None else sys.argv[1:]
    command = f"{os.path.relpath(sys.executable, ROOT)} bench/run.py" + "".join(f" {shlex.quote(x)}" for x in args)

    mach = machine()
    for k, v in mach:
        print(f"{k}: {v}")
    started, t0 = time.time(), time.monotonic()
    rows, profiles, peers, log, medians = [], [], {}, [], {}
    kth_lines = ["Not run (`--only`)."]
    profile = not a.no_profile
    whole = Others()
    loads = {}
    for g in groups:
        first = len(rows)
        busy = _cpu_busy(0.5)
        g0, load, others = time.monotonic(), _load(), Others()
        print(f"\n== {g} (load {load}, CPU {busy:.0f} % busy)", flush=True)
        status = ""
        if g == "plan":
            got = plan_rows(a.quick, medians)
            rows += got
            if profile:
                plan_profiles(got, a.quick, profiles)
        elif g == "live":
            rows += live_rows(a.quick, profiles, profile)
        elif g == "drain":
            rows += drain_rows(a.quick)
        elif g == "memory":
            rows += memory_rows(a.quick)
        elif g in ("tsp", "slurm"):
            name = "task-spooler" if g == "tsp" else "SLURM"
            peer_group(name, a.quick, peers)
            status = peers[name][1]
        elif g == "runner":
            rows += runner_rows(a.quick)
        elif g == "kth":
            kth_lines, status = kth_section(a.quick, started)
        elif g == "replay":
            rows += replay_rows(a.quick)
        loads.update({(r.key or r.name): load for r in rows[first:]})
        log.append((g, load, busy, others.percent(), time.monotonic() - g0, status))
        print(f"  (other processes used {log[-1][3]:.0f} % of the CPUs during {g})", flush=True)
    attach_peers(rows, peers)
    elapsed = time.monotonic() - t0
    mach.append(("load average at the end", _load()))
    mach.append(("CPU used by other processes during the run",
                 f"{whole.percent():.0f} % of the machine on average (per group: Run log)"))

    import report
    text = report.markdown(rows=rows, mach=mach, command=command, elapsed=elapsed, quick=a.quick, only=only,
                           medians=medians, peers=peers, profiles=profiles, kth=kth_lines, log=log)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    table(rows, loads, mach, a.quick)
    misses = [r.name for r in rows if r.verdict == "miss"]
    print(f"\n{len(rows)} rows, {len(misses)} miss, {sum(r.verdict == 'skipped' for r in rows)} skipped, "
          f"{elapsed:.0f} s; wrote {os.path.relpath(out)}")
    return 0


def table(rows: list[Row], loads: dict, mach: list, quick: bool) -> None:
    """The rows into the current table: bench/RESULTS.md (bench/results/current.json) for a full
    or --only run; a --quick run's fewer samples go to bench/out/ (a copy of the table with them in)."""
    import shutil

    import current
    store, results = current.STORE, current.RESULTS
    if quick:
        store, results = os.path.join(HERE, "out", "current.json"), os.path.join(HERE, "out", "RESULTS.md")
        if os.path.exists(current.STORE):
            shutil.copyfile(current.STORE, store)
    commit = dict(mach).get("labq", "unknown")
    data = current.merge([r for r in rows if r.verdict != "skipped" or r.key], loads, commit, store)
    current.write(data, mach, results)
    print(f"the table: {os.path.relpath(results)} ({os.path.relpath(store)})")


if __name__ == "__main__":
    sys.exit(main())
