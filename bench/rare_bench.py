"""Issue 39 item 4 on the live path: the CPU of the rare commands (`acct`, `budget`, `report`, `show`,
`alerts`, `nodes`, `prio`, `share`) and of `--help` (the first call, nothing kept, and the next ones)
against `labq sub`'s, each a whole `labq` process on a private stack (redis-server, `labq scheduler`,
`labq worker`: bench/stackutil.py) that has run a few jobs, so each command has rows to print. CPU is
the reaped child's user + system (live_bench.timed); min and median of n runs.

    .venv/bin/python bench/rare_bench.py [--quick] [--pending N]   # one line per command; bench/run.py takes rows()
    .venv/bin/python bench/rare_bench.py --pending 10000 --vs /work/bench/tree [--rounds 7] [--churn [--others]] [--array]

--pending N first submits N held single jobs (20 client processes, as live_bench.py's drains leave
10,000 before bench/run.py measures these): `prio`, `report`, `budget`, `nodes` and `share` cost most
where the queue is long.

--vs TREE measures side by side: on the one stack, each command (`stat` too) is run by TREE's `labq`
(its .venv, TREE on PYTHONPATH) and by this checkout's, alternately, `--rounds` times; each side with
its own settings cache. Both read the same rows, so TREE must keep this checkout's row shape
(statrows.ROWS_VERSION). It prints min/median CPU of each side, the ratio to that side's `sub -H`,
and the load average before and after each command. With --churn a churn client (drainclient.py
--churn: submit a held job, cancel it, again) changes the queue meanwhile, as live_bench.py's
command rows have it: a quiet queue favours `prio` (its published ranking, docs/internals.md). The
churn is the bench user's, as is every command, so `prio` ranks the rows (that user's jobs changed);
with --others (as root) every command but `sub` runs as `nobody` (setpriv): what a user sees while
another changes the queue. With --array each round of `prio` comes right after the live bench's last
step, a held 10,000-task array submitted and cancelled by the bench user (live_bench.command_rows).

--ended N first writes N ended jobs (ended_jobs: records as the scheduler's commit of their end writes
them, writes.put_jobs, over the last 6.5 days (inside history.keep: none archived meanwhile), 1-2
attempts of minutes, one in 20 across an hour's edge) and waits until the scheduler has folded them into `labq report`'s totals (store/totals.py): what a
lab's week of ended jobs costs `report` and `acct`. --only CMD,CMD: just those of the A/B (and `sub`);
--filters adds `prio -u USER` and `prio -A parked` to it.
"""
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from live_bench import HERE, compiled, drain, timed, user_env  # noqa: E402
from rows import Row  # noqa: E402
from stackutil import BenchStack, labq_command  # noqa: E402

# a budget over the bench account, so that `labq budget` has a row to print
BUDGET = '\n[[budgets]]\nname = "bench-budget"\naccount = "bench"\nlimit = 100.0\nperiod = "month"\n'
LIVE = (("acct",), ("budget",), ("report",), ("show", "{job}"), ("alerts",), ("nodes",), ("prio",), ("share",))
HELP = (("acct", "--help"), ("budget", "--help"), ("report", "--help"), ("sub", "--help"))


def measure(bs, quick: bool) -> list[tuple[str, list[float], list[float]]]:
    n = 5 if quick else 11
    env, cwd = user_env(bs), bs.work
    job = str(bs.submit(["true"])["job_id"])
    bs.wait_terminal([job], 60)
    timed(bs.labq_argv("stat"), env, cwd, 1)        # the client's settings cache filled, as after a first command
    out = [("sub -H -- true",) + timed(bs.labq_argv("sub", "-A", "parked", "-H", "--", "true"), env, cwd, n)]
    for args in LIVE:
        args = tuple(a.format(job=job) for a in args)
        out.append((" ".join(args),) + timed(bs.labq_argv(*args), env, cwd, n))
    for args in (("--help",),) + HELP:
        # As a user types them (no --config); "first": an empty cache each run, as after an install.
        cache = os.path.join(bs.dir, "helpcache")
        w, c = [], []
        for _ in range(n):
            shutil.rmtree(cache, ignore_errors=True)
            w1, c1 = timed(labq_command() + list(args), dict(env, XDG_CACHE_HOME=cache), cwd, 1)
            w, c = w + w1, c + c1
        out.append((" ".join(args) + " (first)", w, c))
        out.append((" ".join(args) + " (again)",) + timed(labq_command() + list(args), env, cwd, n))
    return out


def rows(bs, quick: bool) -> list[Row]:
    active = bs.client.store.r.zcard(bs.client.k.active)     # live_bench's drains leave 10,000 held jobs
    figures = measure(bs, quick)
    sub = min(figures[0][2])
    worst = max(figures[1:], key=lambda f: min(f[2]))
    load = os.getloadavg()
    note = "; ".join(f"`labq {name}` {min(c):.0f}/{statistics.median(c):.0f}" for name, _w, c in figures)
    return [Row("rare commands' CPU against `labq sub`'s (the costliest, as a ratio)", min(worst[2]) / sub, "x", 1.5,
                key="rare.ratio", note=f"`labq {worst[0]}` {min(worst[2]):.0f} ms against `labq sub` {sub:.0f} ms "
                                       f"(min/median ms CPU: {note}); {active:,} active jobs; load {load[0]:.1f}")]


AB = (("sub", "-A", "parked", "-H", "--", "true"), ("stat",), ("prio",), ("report",), ("budget",), ("nodes",),
      ("share",), ("acct",))


def side_by_side(bs, tree: str, rounds: int, extra=(), others: bool = False, array: bool = False) -> None:
    """Each of AB (and `extra`) run by TREE's labq and this checkout's in turn, `rounds` times; with
    `others`, all but `sub` as `nobody`; with `array`, each round of `prio` follows the live bench's
    last step (a held 10,000-task array submitted and cancelled by `labq del`, its owner the bench
    user), the side that goes first alternating, and says how many of each side's runs printed the
    published ranking ("as of" on its weights line) rather than ranking the rows."""
    tree = os.path.abspath(tree)
    if others:
        as_nobody(bs)
    sides = {"base": ([os.path.join(tree, ".venv", "bin", "labq")],
                      dict(user_env(bs), PYTHONPATH=tree, XDG_CACHE_HOME=os.path.join(bs.dir, "cache-base"))),
             "new": (labq_command(), dict(user_env(bs), XDG_CACHE_HOME=os.path.join(bs.dir, "cache-new")))}
    for cmd, env in sides.values():     # the settings caches filled, as after a user's first command
        timed((NOBODY if others else []) + cmd + ["--config", bs.cfg_path, "stat"], env, bs.work, 1)
    sub = {}
    print(f"{'command':<24} {'base min/median':>16} {'new min/median':>16}   new/base   vs sub (base, new)   load")
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    for args in AB + tuple(extra):
        if only and args[0] != "sub" and " ".join(args) not in only:
            continue
        cpu = {s: [] for s in sides}
        published = dict.fromkeys(sides, 0)
        load0 = os.getloadavg()[0]
        for k in range(rounds):
            if array and args == ("prio",):
                _array_cancelled(bs)
            for s in (list(sides) if k % 2 == 0 or not array else list(sides)[::-1]):
                cmd, env = sides[s]
                who = NOBODY if others and args[0] != "sub" else []
                argv = who + cmd + ["--config", bs.cfg_path, *args]
                cpu[s] += timed(argv, env, bs.work, 1)[1]
                if array and args == ("prio",):
                    published[s] += "; as of " in subprocess.run(argv, env=env, cwd=bs.work, capture_output=True,
                                                                 text=True, timeout=120).stdout.split("\n", 1)[0]
        if args[0] == "sub":
            sub = {s: min(c) for s, c in cpu.items()}
        b, n = cpu["base"], cpu["new"]
        print(f"{' '.join(args)[:24]:<24} {min(b):7.1f} /{statistics.median(b):6.1f} {min(n):8.1f} /{statistics.median(n):6.1f}"
              f"   {min(n) / min(b):7.2f}x   {min(b) / sub['base']:5.2f}x {min(n) / sub['new']:5.2f}x"
              f"   {load0:.1f}-{os.getloadavg()[0]:.1f}", flush=True)
        if args[0] == "report":      # both read the same rows: the same text, byte for byte (the churn's
            # cancels change acct's, not report's: a job never run counts nothing)
            outs = {s: subprocess.run(sides[s][0] + ["--config", bs.cfg_path, *args, "--json"], env=sides[s][1],
                                      cwd=bs.work, capture_output=True, text=True, timeout=120).stdout for s in sides}
            print(f"  {args[0]} --json the same on both sides: {outs['base'] == outs['new']} "
                  f"({len(outs['new'])} bytes)", flush=True)
        if array and args == ("prio",):
            print(f"  prio printed the published ranking (patched) in {published['base']} of {rounds} (base), "
                  f"{published['new']} of {rounds} (new), each right after its timed run", flush=True)


def ended_jobs(bs, n: int, seed: int = 39) -> None:
    """N ended jobs in the stack's Redis, as writes.put_jobs commits ends (ids from 900,000,000: the
    scheduler's own never reach them), then waited for until folded into the report's cells."""
    import random
    import time

    from labq.scheduler.jobs import states
    from labq.scheduler.jobs.model import Attempt, Job
    from labq.scheduler.store import writes
    rng, now, r, k = random.Random(seed), time.time(), bs.client.store.r, bs.client.k
    jobs = []
    for i in range(n):
        end = now - rng.uniform(60, 6.5 * 86_400)      # inside history.keep (7 days): none archived meanwhile
        runs = [rng.uniform(5, 1800) for _ in range(rng.choice((1, 1, 1, 2)))]
        if i % 20 == 0:
            runs[0] += 3600        # across an hour's edge: read whole (store/totals.py's split)
        atts, t = [], end
        for a, run in enumerate(reversed(runs)):
            last = a == 0
            atts.insert(0, Attempt(len(runs) - a, "n0", ("GPU-0",) if i % 3 else (), dispatch_time=t - run - 1,
                                   start_time=t - run, end_time=t, outcome="completed" if last else "preempted",
                                   exit_code=0 if last else None, cost=rng.randrange(10 ** 7),
                                   usage={"gpu_util_mean": rng.uniform(0, 100)} if i % 3 else None))
            t -= run + rng.uniform(0, 120)
        jobs.append(Job(id=900_000_000 + i, user=rng.choice(("alice", "bob", "carol")), name="train",
                        account=rng.choice(("bench", "parked")), gpus=1 if i % 3 else 0, cpus=2, state=states.COMPLETED,
                        exit_code=0, attempts=tuple(atts), start_time=atts[0].start_time, end_time=end,
                        submit_time=atts[0].dispatch_time - 5))
    for i in range(0, n, 2000):
        p = r.pipeline(transaction=False)
        writes.put_jobs(p, k, jobs[i:i + 2000])
        p.execute()
    deadline = time.monotonic() + 300
    while r.hlen(k.report_new) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"{n:,} ended jobs written; {r.hlen(k.report_new)} not folded yet, {r.hlen(k.report_cells)} cells, "
          f"{r.zcard(k.report_split)} split", flush=True)


def _array_cancelled(bs) -> None:
    """The live bench's last step: a held 10,000-task array submitted and cancelled whole."""
    import re
    out = bs.run_labq("sub", "-A", "parked", "-H", "-a", "1-10000", "--", "true", env=user_env(bs)).stdout
    bs.run_labq("del", re.search(r"\d+", out).group(), timeout=300, env=user_env(bs))


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]     # execs the command: its CPU


def as_nobody(bs) -> None:
    """The stack's directory, config, Redis socket and both settings caches open to `nobody`."""
    for d in ("cache-base", "cache-new"):
        os.makedirs(os.path.join(bs.dir, d), exist_ok=True)
    for root, _dirs, files in os.walk(bs.dir):
        if os.path.basename(root) in ("cache-base", "cache-new", "redis") or root in (bs.dir, bs.work):
            os.chmod(root, 0o777)
            for f in files:
                os.chmod(os.path.join(root, f), 0o777)
    os.chmod(bs.cfg_path, 0o644)


def main() -> int:
    quick = "--quick" in sys.argv
    pending = int(sys.argv[sys.argv.index("--pending") + 1]) if "--pending" in sys.argv else 0
    compiled()
    with BenchStack(slots=2, max_pending=max(100_000, 2 * pending)) as bs:
        with open(bs.cfg_path, "a") as f:
            f.write(BUDGET)
        if pending:
            drain(bs, 20, -(-pending // 20))
            print(f"{bs.client.store.r.zcard(bs.client.k.active):,} active jobs", flush=True)
        if "--ended" in sys.argv:
            ended_jobs(bs, int(sys.argv[sys.argv.index("--ended") + 1]))
        if "--vs" in sys.argv:
            rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
            extra = [("prio", "--json")] if "--json" in sys.argv else []
            if "--filters" in sys.argv:      # prio of one user's / account's jobs (scheduler/priofilter.py)
                from labq.scheduler.client import current_user
                extra += [("prio", "-u", current_user()), ("prio", "-A", "parked")]
            churn = subprocess.Popen([sys.executable, os.path.join(HERE, "drainclient.py"), bs.cfg_path, "--churn"],
                                     env=user_env(bs), cwd=bs.work, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True) if "--churn" in sys.argv else None
            try:
                if churn:
                    churn.stdout.readline()
                side_by_side(bs, sys.argv[sys.argv.index("--vs") + 1], rounds, extra, "--others" in sys.argv,
                             "--array" in sys.argv)
            finally:
                if churn:
                    print(f"churn: {churn.communicate('', timeout=120)[0].strip()}")
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            return 0
        for name, w, c in measure(bs, quick):
            print(f"labq {name:<28} CPU min {min(c):5.0f} median {statistics.median(c):5.0f} ms   "
                  f"wall min {min(w):5.0f} median {statistics.median(w):5.0f} ms", flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
