"""The §11 figures of the command line and of the scheduler's intake, on the live path only: a private
stack (redis-server, `labq scheduler`, `labq worker`, as `labq up` starts them), real client
processes, and a queue that changes while it is measured.

- drain: N client processes (bench/drainclient.py: the thin client `labq sub` uses, one request at a
  time each, like N users' shells) submit held jobs together; requests answered per second, from the
  first request sent to the last answered, and the scheduler's own CPU (/proc/PID/stat) per request.
  Three runs (1, 20 and 100 clients) give the scheduler's CPU split into a cost per request and a
  fixed cost per batch (a batch is one MULTI/EXEC: Redis' own count of EXEC calls), by a least-squares
  fit of cpu = a·requests + b·batches. The clients' CPU and Redis' are given too: on 2 cores the three
  share the machine, so the drain's rate is bound by their sum. The drains leave 10,000 single held jobs pending.
- the commands, with those 10,000 singles pending and a churn client (drainclient.py --churn)
  submitting and cancelling a job ~10 times a second meanwhile: `labq stat`, `labq sub -H`,
  `labq sub -H -a 1-10000` (the array, then `labq del` of it), `labq --help` and rare commands'
  `--help`. Each is a whole `labq` process; wall and the process's own CPU (getrusage of the reaped
  child, user + system), min and median of several runs.

    .venv/bin/python bench/live_bench.py [--quick]     # prints the rows (bench/run.py puts them in RESULTS.md)
    .venv/bin/python bench/live_bench.py --drains 3    # the three drains only, 3 times on one stack, and each fit
    .venv/bin/python bench/live_bench.py --drains 3 --begin   # the same with jobs not held (plan() sees them)
    .venv/bin/python bench/live_bench.py --drains 3 --clients-of /work/bench/base   # and 100 of that tree's clients
    .venv/bin/python bench/live_bench.py --alternate 4 /work/bench/base   # 100 of its clients and of ours, ABBA, 4 pairs
    ... --fsync everysec      # Redis' appendfsync for the run (`labq up`: always; each fsync ~4-5 ms here, loaded)
(A change to the scheduler: bench/live_vs.py N TREE runs both checkouts' whole stacks, ABBA.)
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rows import Row  # noqa: E402
from stackutil import BenchStack, labq_command  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SINGLES = 10_000
RARE = (("sub", "--help"), ("acct", "--help"), ("nodes", "--help"), ("budget", "--help"), ("report", "--help"))


def sched_cpu(pid: int) -> float:
    """The scheduler process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wait(pid: int) -> float:
    """Seconds the process's main thread has waited runnable for a CPU (/proc/PID/schedstat's second
    field; 0 where the kernel keeps no schedstats): Redis and the scheduler waiting their turn among
    the clients is time the drain's batches lose (issue 39)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def execs(r) -> int:
    """MULTI/EXEC transactions Redis has run: the scheduler's batches (clients never use MULTI)."""
    return int(commands(r).get("exec", 0))


def commands(r) -> dict[str, int]:
    """Redis' count of each command it has run (INFO commandstats): a drain's share per request is
    what clients and scheduler ask of Redis (its CPU), command by command."""
    return {k.removeprefix("cmdstat_"): int(v.get("calls", 0)) for k, v in r.info("commandstats").items()}


def per_request(before: dict, after: dict, n: int) -> str:
    """The commands a drain of n requests added, per request, most first ("lpush 2.00, ...")."""
    got = sorted(((after[k] - before.get(k, 0)) / n, k) for k in after if after[k] - before.get(k, 0) >= n / 100)
    return ", ".join(f"{k} {x:.2f}" for x, k in reversed(got))


def user_env(bs) -> dict:
    """The stack's environment with a cache directory of its own: a client keeps its parsed config in
    $XDG_CACHE_HOME (clientconf.py), one file per user; on this machine every engineer's labq runs as
    the same user, and their configs would evict ours (a TOML parse, ~15 ms, in each command)."""
    return dict(bs.stack.env(), XDG_CACHE_HOME=os.path.join(bs.dir, "cache"))


def clients(bs, n: int, per: int, begin: bool = False, tree: str | None = None) -> list[subprocess.Popen]:
    """n drain clients; `tree`: another checkout's (its venv, its drainclient.py and its code: the
    stack's environment puts this tree first on PYTHONPATH, which would run this tree's code in them)."""
    argv = [sys.executable, os.path.join(HERE, "drainclient.py"), bs.cfg_path]
    env = user_env(bs)
    if tree:
        argv[:2] = [os.path.join(tree, ".venv", "bin", "python"), os.path.join(tree, "bench", "drainclient.py")]
        env["PYTHONPATH"] = tree
    ps = [subprocess.Popen(argv + [str(per)] + (["--begin"] if begin else []), env=env, cwd=bs.work, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in ps:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a drain client did not start (exit {p.wait()})")
    return ps


def drain(bs, n: int, per: int, begin: bool = False, tree: str | None = None) -> dict:
    """n client processes × per held submits (`begin`: not held, pending until an hour from now, which
    every plan pass sees; `tree`: another checkout's clients), all released at once; the figures of that drain."""
    ps = clients(bs, n, per, begin, tree)
    pid, r = bs.stack.procs["scheduler"].pid, bs.client.store.r
    rpid = bs.stack.procs["redis"].pid      # Redis' CPU: on 2 cores it takes from both the others
    cpu0, cmd0, rcpu0 = sched_cpu(pid), commands(r), sched_cpu(rpid)
    wait0, rwait0 = run_wait(pid), run_wait(rpid)
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    got = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in ps]
    cpu1, cmd1, rcpu1 = sched_cpu(pid), commands(r), sched_cpu(rpid)
    wait1, rwait1 = run_wait(pid), run_wait(rpid)
    ex0, ex1 = cmd0.get("exec", 0), cmd1.get("exec", 0)
    failed = sum(g["failed"] for g in got)
    if failed:
        errs = [e for g in got for e in g["errors"]]
        raise RuntimeError(f"{failed} of {n * per} submits failed: {errs[:2]}")
    span = max(g["t1"] for g in got) - min(g["t0"] for g in got)
    lat = sorted(x for g in got for x in g["lat_ms"])
    total = n * per
    return {"clients": n, "requests": total, "span": span, "rate": total / span, "cpu": cpu1 - cpu0,
            "batches": ex1 - ex0, "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)],
            "client_cpu": sum(g.get("cpu", 0.0) for g in got), "client_sys": sum(g.get("sys", 0.0) for g in got),
            "redis_cpu": rcpu1 - rcpu0, "run_wait": wait1 - wait0, "redis_run_wait": rwait1 - rwait0,
            "waits": sum(g.get("waits", 0) for g in got) / total,
            "commands": per_request(cmd0, cmd1, total)}


def split(drains: list) -> tuple[float, float] | None:
    """(CPU s per request, CPU s per batch): the least-squares fit of cpu = x·requests + y·batches
    over the drains; None where they do not separate the two (or a cost comes out negative)."""
    rr = sum(d["requests"] ** 2 for d in drains)
    bb = sum(d["batches"] ** 2 for d in drains)
    rb = sum(d["requests"] * d["batches"] for d in drains)
    rc = sum(d["requests"] * d["cpu"] for d in drains)
    bc = sum(d["batches"] * d["cpu"] for d in drains)
    det = rr * bb - rb * rb
    if abs(det) < 1e-9 * max(1, rr * bb):
        return None
    x, y = (rc * bb - bc * rb) / det, (rr * bc - rb * rc) / det
    return (x, y) if x > 0 and y > 0 else None


def drain_rows(bs, quick: bool) -> list[Row]:
    big_per = (2_000 if quick else SINGLES - 600) // 100
    # One client: about a batch per request (the fixed cost shows); 20 and 100: requests share batches.
    drains = [drain(bs, 1, 100), drain(bs, 20, 25), drain(bs, 100, big_per)]
    rows = []
    for d, key in ((drains[2], "drain.100"), (drains[1], "drain.20"), (drains[0], "drain.1")):
        rows.append(Row(f"requests drained, {d['clients']} client process{'es' if d['clients'] > 1 else ''}",
                        d["rate"], "jobs/s", 5000 if d["clients"] >= 100 else None, "higher", key=key,
                        note=f"{d['requests']:,} held submits in {d['span']:.2f} s (first sent → last answered), "
                             f"onto a queue of held jobs growing with them; round trip p50 {d['p50']:.1f} ms, "
                             f"p99 {d['p99']:.1f} ms; scheduler CPU {d['cpu']:.2f} s = "
                             f"{d['cpu'] * 1e6 / d['requests']:.0f} µs per request, {d['batches']:,} batches "
                             f"({d['requests'] / max(1, d['batches']):.1f} requests each); the clients' own CPU "
                             f"{d['client_cpu'] * 1e6 / d['requests']:.0f} µs per request ({d['waits']:.2f} waits for "
                             f"Redis each), Redis' {d['redis_cpu'] * 1e6 / d['requests']:.0f} µs; Redis commands "
                             f"per request: {d['commands']}"))
    both = split(drains)
    if both is None:
        why = "the drains' batch counts do not separate the two costs (see their notes)"
        rows += [Row("scheduler CPU per request (intake, handler, commit), live", unit="µs", key="drain.percall",
                     skipped=why),
                 Row("scheduler CPU fixed per batch, live", unit="ms", key="drain.perbatch", skipped=why)]
    else:
        x, y = both
        how = ("least-squares fit over the three drains (1, 20 and 100 clients): scheduler CPU = a·requests + "
               "b·batches; all of the scheduler's CPU meanwhile (its ticks and plan passes included)")
        rows += [Row("scheduler CPU per request (intake, handler, commit), live", x * 1e6, "µs", 100, key="drain.percall",
                     note=how),
                 Row("scheduler CPU fixed per batch, live", y * 1e3, "ms", 1, key="drain.perbatch", note=how)]
    return rows


def timed(argv, env, cwd, n: int, ok=(0,)) -> tuple[list[float], list[float]]:
    """Wall ms and the process's own CPU ms (user + system of the reaped child) of n runs."""
    walls, cpus = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        walls.append((time.perf_counter() - t0) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        if p.returncode not in ok:
            raise RuntimeError(f"{' '.join(argv[-4:])} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return walls, cpus


def _mm(xs) -> str:
    return f"min {min(xs):.0f}, median {statistics.median(xs):.0f} ms"


def command_rows(bs, quick: bool) -> list[Row]:
    n = 5 if quick else 11
    env, cwd = user_env(bs), bs.work
    timed(bs.labq_argv("stat"), env, cwd, 1)       # the settings cache filled, as after a user's first command
    pending = bs.client.store.r.hlen(bs.client.k.stat_rows) if hasattr(bs.client.k, "stat_rows") else len(bs.client.read.active())
    rows = []
    w, c = timed(bs.labq_argv("stat"), env, cwd, n)
    what = f"{pending:,} single held jobs pending, a churn client changing the queue; median of {n}"
    rows.append(Row(f"`labq stat` wall, {pending:,} single jobs", statistics.median(w), "ms", 100, key="stat.wall",
                    note=f"{what}; wall {_mm(w)}"))
    rows.append(Row(f"`labq stat` client CPU, {pending:,} single jobs", min(c), "ms", 40, key="stat.cpu",
                    note=f"min of {n} (CPU {_mm(c)}); {what}"))
    w, c = timed(bs.labq_argv("sub", "-A", "parked", "-H", "--", "true"), env, cwd, n)
    rows.append(Row("`labq sub -H -- true` wall", statistics.median(w), "ms", 60, key="sub.wall",
                    note=f"median of {n} ({_mm(w)}), {pending:,} pending, the queue churning"))
    rows.append(Row("`labq sub -H -- true` client CPU", min(c), "ms", key="sub.cpu",
                    note=f"min of {n} (CPU {_mm(c)}); the reference for rare commands (§11: cost what `sub` costs)"))
    sub_cpu = min(c)
    w, c = timed(bs.labq_argv("sub", "--test-only", "-A", "parked", "--", "true"), env, cwd, n)
    rows.append(Row("`labq sub --test-only -- true` wall", statistics.median(w), "ms", key="subtest.wall",
                    note=f"median of {n} ({_mm(w)}; CPU {_mm(c)}): the scheduler's verdict, nothing queued"))
    # As a user types them: no --config (a global option before the command is click's to parse).
    w, c = timed(labq_command() + ["--help"], env, cwd, n)
    rows.append(Row("`labq --help` CPU", min(c), "ms", 30, key="help.cpu", note=f"min of {n} (CPU {_mm(c)}; wall {_mm(w)})"))
    worst = None
    for args in RARE:
        w, c = timed(labq_command() + list(args), env, cwd, n)
        if worst is None or min(c) > worst[1]:
            worst = (args, min(c), c)
    args, v, c = worst
    rows.append(Row("rare commands' CPU (the costliest of " + ", ".join(f"`{' '.join(a)}`" for a in RARE) + ")",
                    v, "ms", 30, key="rare.cpu",
                    note=f"`labq {' '.join(args)}`: min of {n} (CPU {_mm(c)}); `labq sub` costs {sub_cpu:.0f} ms"))
    runs = 2 if quick else 3
    walls, cpus = [], []
    for _ in range(runs):
        w, c = timed(bs.labq_argv("sub", "-A", "parked", "-H", "-a", "1-10000", "--", "true"), env, cwd, 1)
        walls += w
        cpus += c
        out = bs.run_labq("stat", "-u", bs.client.user).stdout
        ids = [line.split()[0].split("_")[0] for line in out.splitlines()[1:] if "_[" in line]
        if ids:
            bs.run_labq("del", ids[-1], timeout=300)
    rows.append(Row("10,000-task array submit, `labq sub -H -a 1-10000` wall", min(walls), "ms", 100,
                    key="array10k", note=f"min of {runs} ({', '.join(f'{x:.0f}' for x in walls)} ms; client CPU "
                                             f"{', '.join(f'{x:.0f}' for x in cpus)} ms), {pending:,} pending, "
                                             f"then cancelled with `labq del`"))
    return rows


def compiled() -> None:
    """Bytecode for the checkout, as an installed labq has it (pip compiles a wheel's modules): where
    PYTHONDONTWRITEBYTECODE is set, as on the shared machines, every command would compile them again."""
    root = os.path.dirname(HERE)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j0", *(os.path.join(root, d) for d in
                    ("labq", "scheduler", "worker", "cli"))], stdout=subprocess.DEVNULL, check=False)


def run(bs, quick: bool) -> list[Row]:
    compiled()
    rows = drain_rows(bs, quick)
    churn = subprocess.Popen([sys.executable, os.path.join(HERE, "drainclient.py"), bs.cfg_path, "--churn"],
                             env=user_env(bs), cwd=bs.work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        churn.stdout.readline()
        rows += command_rows(bs, quick)
    finally:
        out, _ = churn.communicate("", timeout=120)
    n = json.loads(out.strip().splitlines()[-1])["churned"] if out.strip() else 0
    for r in rows[-8:]:
        r.note += f" (churn: {n} jobs submitted and cancelled during these runs)" if r.key == "stat.cpu" else ""
    return rows


def drains_only(bs, reps: int, begin: bool = False, other: str | None = None) -> None:
    """The three drains `reps` times on one stack (the queue grows by 10,000 held jobs each time; with
    `begin`, jobs not held that plan() sees pending), each fit printed, then the least of each cost:
    where a change to the intake is compared before and after. `other`: a checkout whose clients
    drain 100 more right after each run, on this stack: the clients' side A/B, same minutes."""
    fits = []
    for rep in range(reps):
        ds = [drain(bs, 1, 100, begin), drain(bs, 20, 25, begin), drain(bs, 100, (SINGLES - 600) // 100, begin)]
        print(f"run {rep + 1}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        for d in ds:
            print(f"  {d['clients']:>3} clients: {d['rate']:,.0f} requests/s, scheduler CPU {d['cpu']:.2f} s = "
                  f"{d['cpu'] * 1e6 / d['requests']:.0f} µs a request, {d['batches']} batches; clients' CPU "
                  f"{d['client_cpu'] * 1e6 / d['requests']:.0f} µs a request ({d['client_sys'] * 1e6 / d['requests']:.0f} "
                  f"system; {d['waits']:.2f} waits), Redis' {d['redis_cpu'] * 1e6 / d['requests']:.0f} µs", flush=True)
        print(f"  Redis commands per request (100 clients): {ds[-1]['commands']}", flush=True)
        if other:
            d = drain(bs, 100, (SINGLES - 600) // 100, begin, other)
            print(f"  100 clients of {other}: {d['rate']:,.0f} requests/s; clients' CPU "
                  f"{d['client_cpu'] * 1e6 / d['requests']:.0f} µs a request, Redis' "
                  f"{d['redis_cpu'] * 1e6 / d['requests']:.0f} µs, scheduler's {d['cpu'] * 1e6 / d['requests']:.0f} µs",
                  flush=True)
        fit = split(ds)
        if fit is not None:
            fits.append(fit)
            print(f"  fit: {fit[0] * 1e6:.0f} µs per request, {fit[1] * 1e3:.2f} ms per batch", flush=True)
    if fits:
        print(f"min of {len(fits)}: {min(f[0] for f in fits) * 1e6:.0f} µs per request, "
              f"{min(f[1] for f in fits) * 1e3:.2f} ms per batch")


def alternate(bs, reps: int, other: str) -> None:
    """100-client drains on one stack, `other`'s clients and this tree's, `reps` times each, in the
    order ABBA ABBA (each drain leaves 9,400 more held jobs, and the scheduler's cost grows with them):
    the clients' side A/B, interleaved (the scheduler is this tree's in both)."""
    for rep in range(reps):
        for tree in ((other, None) if rep % 2 == 0 else (None, other)):
            d = drain(bs, 100, (SINGLES - 600) // 100, tree=tree)
            n = d["requests"]
            print(f"{rep + 1} {tree or 'this tree'}: {d['rate']:,.0f} requests/s; per request: clients' CPU "
                  f"{d['client_cpu'] * 1e6 / n:.0f} µs ({d['client_sys'] * 1e6 / n:.0f} system, {d['waits']:.2f} waits), "
                  f"Redis' {d['redis_cpu'] * 1e6 / n:.0f} µs, scheduler's {d['cpu'] * 1e6 / n:.0f} µs; p50 "
                  f"{d['p50']:.1f} ms, p99 {d['p99']:.1f} ms; {d['batches']} batches; load {os.getloadavg()[0]:.2f}\n"
                  f"    Redis commands per request: {d['commands']}", flush=True)


def main() -> int:
    quick = "--quick" in sys.argv
    with BenchStack(slots=4, max_pending=200_000) as bs:
        if "--fsync" in sys.argv:       # how much of a drain is waits for fsync (appendfsync always)
            bs.client.store.r.config_set("appendfsync", sys.argv[sys.argv.index("--fsync") + 1])
        if "--alternate" in sys.argv:     # --alternate N TREE
            i = sys.argv.index("--alternate")
            compiled()
            alternate(bs, int(sys.argv[i + 1]), sys.argv[i + 2])
            return 0
        if "--drains" in sys.argv:
            compiled()
            other = sys.argv[sys.argv.index("--clients-of") + 1] if "--clients-of" in sys.argv else None
            drains_only(bs, int(sys.argv[sys.argv.index("--drains") + 1]), "--begin" in sys.argv, other)
            return 0
        for r in run(bs, quick):
            print(f"{r.name:<70} {r.measured():>14}  {r.target_text():>10}  {r.result()}\n    {r.note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
