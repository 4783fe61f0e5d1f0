"""One `plan()` pass on a large, mostly full cluster: the expensive case, where nearly every pending
job is checked against every node and stays pending.

The cluster: 8-GPU nodes (half A100, half H100), 64 CPUs, 512 GiB, 16 slots. About 95 % of the
nodes are full (8 GPUs and 56 CPUs held by four running 2-GPU jobs); the rest have half their GPUs
free. Pending jobs ask 0–4 GPUs (0: 15 %, 1: 40 %, 2: 25 %, 4: 20 %), 20 % of them a GPU model,
4–16 CPUs and 16–128 GiB, across three accounts (two with caps), QoS normal/low; the jobs of two
of the accounts are charged to an account budget. Only the plan() call is timed, not building the
snapshot; the same snapshot is planned each run (plan() is pure).
"""
import math
import random
import statistics
import time

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Gpu, Job, Node, Snapshot
from labq.scheduler.policy import plan
from labq.scheduler.policy.queue import Queue
from labq.scheduler.settings import config
from labq.scheduler.store.commit import tune_gc

G = 1 << 30
NOW = 1_700_000_000.0
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
ACCOUNTS = ("eta", "phi", "chi")
USERS = {"eta": ("alice", "bob"), "phi": ("carol", "dave"), "chi": ("erin", "frank")}

CONFIG = """
[rates]
gpu_hour = 2.0
gpu_hour_by_model = { "NVIDIA H100 80GB HBM3" = 4.5, "NVIDIA A100-SXM4-80GB" = 3.0 }
cpu_hour = 0.01
[accounts.eta]
users = ["alice", "bob"]
[accounts.phi]
users = ["carol", "dave"]
max_gpus = 100000
[accounts.chi]
users = ["erin", "frank"]
max_running = 100000
[[budgets]]
name = "eta-q"
account = "eta"
limit = 1e9
reserve = 0.1
[[budgets]]
name = "phi-gpuh"
account = "phi"
unit = "gpu_hours"
limit = 1e8
"""


def snapshot(n_pending: int, n_nodes: int, seed: int = 1, arrays: int = 0) -> Snapshot:
    """The cluster and queue above; with `arrays`, the pending jobs are that many arrays (each one
    request shape, one user, one submit time) instead of independent random requests."""
    rng = random.Random(seed)
    nodes, jobs, jid = [], [], 1
    for i in range(n_nodes):
        name, model = f"gpu{i:04d}", MODELS[i % 2]
        gpus = tuple(Gpu(f"GPU-{name}-{g}", g, model, 80 * G) for g in range(8))
        nodes.append(Node(name, 64, 512 * G, 16, gpus, "up", NOW + 30, NOW))
        full = rng.random() < 0.95
        for k in range(4 if full else 2):         # each running job: 2 GPUs, 14 CPUs, 96 GiB
            acct = ACCOUNTS[jid % 3]
            held = tuple(g.uuid for g in gpus[2 * k:2 * k + 2])
            start = NOW - rng.uniform(60, 36000)
            jobs.append(Job(id=jid, user=USERS[acct][jid % 2], account=acct, argv=("python", "train.py"),
                            workdir="/tmp", gpus=2, cpus=14, mem=96 * G, time_limit=86400,
                            submit_time=start - 60, state=states.RUNNING, node=name, gpu_uuids=held,
                            start_time=start, attempts=(Attempt(1, name, held, start_time=start,
                                                                dispatch_time=start),)))
            jid += 1
    if arrays:
        return Snapshot(NOW, tuple(nodes), tuple(jobs) + _arrays(n_pending, arrays, jid, rng))
    for _ in range(n_pending):
        acct = ACCOUNTS[rng.randrange(3)]
        gpus = rng.choices((0, 1, 2, 4), weights=(15, 40, 25, 20))[0]
        jobs.append(Job(id=jid, user=rng.choice(USERS[acct]), account=acct, argv=("python", "train.py"),
                        workdir="/tmp", gpus=gpus, gpu_type=rng.choice(MODELS) if rng.random() < 0.2 else "",
                        cpus=rng.choice((4, 8, 12, 16)), mem=rng.choice((16, 32, 64, 128)) * G,
                        time_limit=rng.choice((3600, 4 * 3600, 86400)),
                        qos="low" if rng.random() < 0.3 else "normal", submit_time=NOW - rng.uniform(0, 86400)))
        jid += 1
    return Snapshot(NOW, tuple(nodes), tuple(jobs))


def _arrays(n_pending: int, n_arrays: int, jid: int, rng) -> tuple:
    out = []
    for a in range(n_arrays):
        acct = ACCOUNTS[a % 3]
        first, submit = jid, NOW - rng.uniform(0, 86400)
        for k in range(n_pending // n_arrays):
            out.append(Job(id=jid, user=USERS[acct][a % 2], account=acct, argv=("python", "train.py"),
                           workdir="/tmp", gpus=(0, 1, 2, 4)[a % 4], cpus=4 + 4 * (a % 3),
                           mem=(16 << 30) * (1 + a % 2), time_limit=3600, qos="low" if a % 5 == 0 else "normal",
                           submit_time=submit, array_id=first, array_index=k, array_count=n_pending // n_arrays))
            jid += 1
    return tuple(out)


def time_plan(n_pending: int, n_nodes: int, runs: int, cfg=None, arrays: int = 0) -> dict:
    """Median (and min, max) CPU seconds of plan() over `runs` passes on one snapshot (CPU, not wall:
    the machine is shared, and a wall would time the other processes too)."""
    cfg = cfg or config.loads(CONFIG)
    snap = snapshot(n_pending, n_nodes, arrays=arrays)
    tune_gc()          # the collector settings the scheduler runs plan() under
    times, result = [], None
    for _ in range(runs):
        t0 = time.process_time()
        result = plan(snap, cfg)
        times.append(time.process_time() - t0)
    reasons: dict = {}
    for p in result.pending:
        reasons[p.reason] = reasons.get(p.reason, 0) + 1
    return {"pending": n_pending, "nodes": n_nodes, "runs": runs, "median_s": statistics.median(times),
            "min_s": min(times), "max_s": max(times), "placed": len(result.places),
            "still_pending": len(result.pending), "reasons": reasons}


# (pending, nodes) -> DESIGN §11 target in seconds, where there is one
TARGETS = {(10_000, 50): 0.020, (100_000, 1000): 0.200}
GRID = [(p, n) for p in (1_000, 10_000, 100_000) for n in (10, 50, 1000)]


def runs_for(p: int, n: int, quick: bool) -> int:
    work = p * n
    if work >= 10**8:
        return 1 if quick else 2
    if work >= 10**7 or p >= 100_000:
        return 2 if quick else 3
    return 3 if quick else 7


# -- how the cost grows ------------------------------------------------------------------------
def _lstsq(xs: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares by the normal equations (tiny systems; no numpy needed)."""
    k = len(xs[0])
    a = [[sum(x[i] * x[j] for x in xs) for j in range(k)] + [sum(x[i] * y for x, y in zip(xs, ys))]
         for i in range(k)]
    for c in range(k):                       # Gauss-Jordan with partial pivoting
        p = max(range(c, k), key=lambda r: abs(a[r][c]))
        a[c], a[p] = a[p], a[c]
        for r in range(k):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [v - f * w for v, w in zip(a[r], a[c])]
    return [a[i][k] / a[i][i] for i in range(k)]


def exponent(points: list[tuple[float, float]]) -> float:
    """k in t ∝ x^k, fitted on log-log."""
    return _lstsq([[1.0, math.log(x)] for x, _ in points], [math.log(t) for _, t in points])[1]


def in_words(k: float) -> str:
    if k < 0.15:
        return "about flat"
    if k < 0.85:
        return "sub-linear"
    if k <= 1.15:
        return "about linear"
    if k < 1.85:
        return "between linear and quadratic"
    if k <= 2.15:
        return "about quadratic"
    return "worse than quadratic"


def growth(medians: dict) -> list[str]:
    """Sentences on how plan()'s median time grows with pending jobs and with nodes, from the grid."""
    out = []
    pend = sorted({p for p, _ in medians})
    nodes = sorted({n for _, n in medians})
    if len(medians) >= 3 and len(pend) >= 2 and len(nodes) >= 2:
        a, alpha, beta = _lstsq([[1.0, math.log(p), math.log(n)] for p, n in medians],
                                [math.log(t) for t in medians.values()])
        out.append(f"Over the whole grid, time ≈ {math.exp(a) * 1e6:.2f} µs × pending^{alpha:.2f} × nodes^{beta:.2f}: "
                   f"{in_words(alpha)} in pending jobs and {in_words(beta)} in nodes.")
    for n in nodes:
        pts = [(p, medians[(p, n)]) for p in pend if (p, n) in medians]
        if len(pts) >= 2:
            k = exponent(pts)
            out.append(f"At {n:,} nodes, from {pts[0][0]:,} to {pts[-1][0]:,} pending: exponent {k:.2f} ({in_words(k)}).")
    for p in pend:
        pts = [(n, medians[(p, n)]) for n in nodes if (p, n) in medians]
        if len(pts) >= 2:
            k = exponent(pts)
            out.append(f"At {p:,} pending, from {pts[0][0]:,} to {pts[-1][0]:,} nodes: exponent {k:.2f} ({in_words(k)}).")
    return out


def cpu_case(n_pending: int, n_nodes: int, runs: int, arrays: int = 0, kept: bool = True) -> str:
    """One line: CPU (process time, less sensitive to a loaded machine than wall) and wall of
    plan() on one snapshot, min and median over `runs`, and the load average. `kept`: with the
    request-class Queue the daemon keeps from pass to pass (filed by a first, untimed pass; the
    daemon's passes find only the jobs that changed since its last); else each pass files anew."""
    cfg = config.loads(CONFIG)
    snap = snapshot(n_pending, n_nodes, arrays=arrays)
    tune_gc()
    queue = Queue() if kept else None
    if queue is not None:
        plan(snap, cfg, queue=queue)
    cpu, wall = [], []
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        plan(snap, cfg, queue=queue)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    return (f"{n_pending} x {n_nodes}{f' ({arrays} arrays)' if arrays else ' random'}"
            f"{', kept queue' if kept else ', no queue'}: CPU min "
            f"{min(cpu) * 1000:.1f} ms, median {statistics.median(cpu) * 1000:.1f}; wall min {min(wall) * 1000:.1f} ms; "
            f"runs {runs}; load {load}")


def tick_case(n_pending: int, n_nodes: int, runs: int) -> str:
    """The daemon's CPU per tick without Redis: Scheduler.snapshot's tuple of jobs, plan() with the
    daemon's kept Queue and applier.apply_plan, on a steady queue (the first pass's reasons applied;
    the placements are not, so every pass plans the same)."""
    from dataclasses import replace

    from labq.scheduler.daemon.applier import apply_plan
    cfg = config.loads(CONFIG)
    snap = snapshot(n_pending, n_nodes)
    tune_gc()
    queue, jobs = Queue(), {j.id: j for j in snap.jobs}
    for j in apply_plan(plan(snap, cfg, queue=queue), jobs, jobs, snap.nodes, snap.now).pended:
        jobs[j.id] = j
    plan(replace(snap, jobs=tuple(jobs.values())), cfg, queue=queue)   # files the new records
    best = None
    for _ in range(runs):
        t0 = time.process_time()
        now = replace(snap, jobs=tuple(jobs.values()))
        t1 = time.process_time()
        p = plan(now, cfg, queue=queue)
        t2 = time.process_time()
        apply_plan(p, jobs, jobs, snap.nodes, snap.now)
        t3 = time.process_time()
        if best is None or t3 - t0 < best[0]:
            best = (t3 - t0, t1 - t0, t2 - t1, t3 - t2)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    return (f"{n_pending} x {n_nodes} random, daemon tick: CPU min {best[0] * 1000:.1f} ms (snapshot "
            f"{best[1] * 1000:.1f}, plan {best[2] * 1000:.1f}, apply {best[3] * 1000:.1f}); runs {runs}; load {load}")


def changing_case(n_pending: int, n_nodes: int, passes: int, changes: int, backfill: bool = True,
                  seed: int = 2, short: bool = False) -> str:
    """plan() as the daemon calls it (policy.Kept, kept from pass to pass) on a queue that changes
    between passes: before each, `changes` running jobs end, `changes` pending jobs are cancelled
    and `changes` new ones submitted, and the clock moves 1 s; each pass's plan is applied
    (applier.apply_plan: admissions start, reasons written), so the next pass sees its records.
    Timed (CPU): Kept.inputs (filing what changed) and plan(); the first pass, which files the
    whole queue, is not. `short`: short jobs first (short_job_weight = age_weight, as `labq simulate`'s
    learned policy)."""
    from dataclasses import replace

    from labq.scheduler.daemon.applier import apply_plan
    from labq.scheduler.policy.kept import Kept
    rng = random.Random(seed)
    cfg = config.loads(CONFIG + ("" if backfill else "[scheduler]\nbackfill_depth = 0\n")
                       + ("[priority]\nshort_job_weight = 10\n" if short else ""))
    snap = snapshot(n_pending, n_nodes)
    nodes = tuple(replace(n, lease_expiry=NOW + 10 ** 6) for n in snap.nodes)
    jobs = {j.id: j for j in snap.jobs}
    fresh = snapshot(passes * changes + 1, 1, seed=seed)      # the submits' requests, renumbered
    extra = [j for j in fresh.jobs if j.state == states.PENDING]
    jid = max(jobs) + 1
    tune_gc()
    kept, now, cpu, filing, placed, written = Kept(), NOW, [], [], 0, []
    for k in range(passes + 1):
        if k:
            now += 1.0
            on = [j for j in jobs.values() if j.state == states.RUNNING]
            waiting = [j for j in jobs.values() if j.state == states.PENDING]
            for j in rng.sample(on, min(changes, len(on))) + rng.sample(waiting, min(changes, len(waiting))):
                del jobs[j.id]                # ended or cancelled: out of the daemon's active jobs
            for j in extra[(k - 1) * changes:k * changes]:
                jobs[jid] = replace(j, id=jid, submit_time=now)
                jid += 1
        s = Snapshot(now, nodes, tuple(jobs.values()))
        c0 = time.process_time()
        given = kept.inputs(s, cfg)
        c1 = time.process_time()
        p = plan(s, cfg, **given)
        if k:
            cpu.append(time.process_time() - c0)
            filing.append(c1 - c0)
            placed += len(p.places)
        done = apply_plan(p, jobs, jobs, nodes, now)
        if k:
            written.append(len(done.pended))      # records a new reason rewrites (the daemon's writes)
        for j in done.started + done.pended + done.expired:
            jobs[j.id] = j
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    return {"median_s": statistics.median(cpu), "min_s": min(cpu), "max_s": max(cpu), "runs": passes,
            "filing_s": statistics.median(filing), "placed": placed, "load": load, "backfill": backfill,
            "changes": changes, "pending": n_pending, "nodes": n_nodes, "rewritten": statistics.median(written),
            "short": short}


def changing_text(r: dict) -> str:
    c = r["changes"]
    return (f"{r['pending']} x {r['nodes']} random, changing queue ({c} ends, {c} cancels, {c} submits a pass; "
            f"backfill {'on' if r['backfill'] else 'off'}{', short jobs first' if r.get('short') else ''}): plan() CPU min {r['min_s'] * 1000:.1f} ms, median "
            f"{r['median_s'] * 1000:.1f}, max {r['max_s'] * 1000:.1f} (of which filing the changes, median "
            f"{r['filing_s'] * 1000:.1f}); {r['placed']} started in {r['runs']} passes; records given a new reason a "
            f"pass, median {r['rewritten']:.0f}; load {r['load']}")


# (pending, nodes) -> (passes, changes of each kind a pass) for bench/run.py's changing-queue rows
CHANGING = {(10_000, 50): (20, 20), (100_000, 1000): (8, 200)}


if __name__ == "__main__":
    import sys
    if "--tick" in sys.argv:   # --tick P N RUNS: the daemon's plan + apply per tick, no Redis
        at = sys.argv.index("--tick")
        print(tick_case(*(int(x) for x in sys.argv[at + 1:at + 4])))
        sys.exit(0)
    if "--changing" in sys.argv:   # --changing P N PASSES CHANGES [--no-backfill] [--short]: plan() on a changing queue
        at = sys.argv.index("--changing")
        p, n, k, c = (int(x) for x in sys.argv[at + 1:at + 5])
        print(changing_text(changing_case(p, n, k, c, backfill="--no-backfill" not in sys.argv,
                                          short="--short" in sys.argv)))
        sys.exit(0)
    if "--cpu" in sys.argv:   # --cpu P N RUNS [--arrays] [--no-queue]: one case, CPU and wall (RESULTS.md `planner`)
        at = sys.argv.index("--cpu")
        p, n, k = (int(x) for x in sys.argv[at + 1:at + 4])
        print(cpu_case(p, n, k, arrays=20 if "--arrays" in sys.argv else 0, kept="--no-queue" not in sys.argv))
        sys.exit(0)
    # --arrays: the same grid with the pending jobs as 20 arrays (plan() judges each class once)
    arrays = 20 if "--arrays" in sys.argv else 0
    for p, n in GRID if "--all" in sys.argv else [(1000, 10), (10_000, 50)]:
        r = time_plan(p, n, runs_for(p, n, True), arrays=arrays)
        print(f"{p:>7} x {n:>4}{' (20 arrays)' if arrays else ''}: median {r['median_s'] * 1000:9.1f} ms  "
              f"placed {r['placed']}  {r['reasons']}")
