"""The accounting archive at scale (issue 18): N ended jobs (each one attempt, one charge entry)
written to a private redis-server with AOF, then archived through the scheduler's Archiver. Prints
Redis memory and its restart time (AOF replay) with the jobs kept vs archived, the archiving rate
(records, acct rows and ledger rows written, Redis deletes), then:

- `labq acct --since 30d` as a user runs it (a subprocess: wall and CPU) over an archive of ROWS
  jobs: beyond the N archived ones, acct rows are written straight into the archive's `acct` table
  (store/acctrows.row of a template job, ends spread evenly over the past year, no records: acct
  does not read them), so a million-job archive is set up in a minute, not ten;
- plan latency at the same pending load (P pending jobs, one 4-GPU node, a submit before each tick)
  before and during archiving: each tick alone, then each tick followed by an archive pass of 1,000
  jobs, as the scheduler's loop runs them (one thread: the pass delays the next tick).

    .venv/bin/python bench/archive_bench.py [--jobs 100000] [--rows 1000000] [--pending 2000]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import redis  # noqa: E402

from labq.scheduler.daemon.loop import Scheduler  # noqa: E402
from labq.scheduler.daemon.transitions import Charge  # noqa: E402
from labq.scheduler.jobs import states  # noqa: E402
from labq.scheduler.jobs.model import Attempt, Gpu, Job  # noqa: E402
from labq.scheduler.settings import config
from labq.scheduler.store import acctrows, archive, codec, dialect, writes  # noqa: E402
from labq.scheduler.store.agentside import AgentStore  # noqa: E402
from labq.scheduler.store.archive import Archive, Archiver  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402

NOW = time.time()


def start(d):
    sock = os.path.join(d, "r.sock")
    p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--dir", d, "--appendonly", "yes",
                          "--save", "", "--loglevel", "warning"], stdout=subprocess.DEVNULL)
    r = redis.Redis(unix_socket_path=sock, decode_responses=True)
    t0 = time.monotonic()
    while True:
        try:
            r.ping()
            return p, r, time.monotonic() - t0
        except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
            time.sleep(0.01)


def restart(d, p):
    p.terminate()
    p.wait()
    return start(d)


def fill(r, k, n, first=1, ended=NOW - 35 * 86400):
    base = Job(id=1, user="alice", account="eta", argv=("python", "train.py", "--lr", "0.1"), workdir="/home/alice/x",
               gpus=1, cpus=4, mem=12 << 30, time_limit=7200, submit_time=NOW - 40 * 86400)
    for lo in range(first, first + n, 5000):
        p = r.pipeline(transaction=False)
        jobs, charges = [], []
        for jid in range(lo, min(first + n, lo + 5000)):
            end = ended + jid - first
            a = Attempt(1, "n1", ("GPU-0",), start_time=end - 600, dispatch_time=end - 600, end_time=end,
                        outcome="completed", exit_code=0, cost=333_333, charges=(("eta", 333_333),))
            jobs.append(replace(base, id=jid, state=states.COMPLETED, attempts=(a,), start_time=end - 600,
                                end_time=end, exit_code=0))
            charges.append(Charge(jid, 1, "eta", "usd", 333_333))
        writes.put_jobs(p, k, jobs)
        for c in charges:
            writes.put_charge(p, k, c, NOW - 35 * 86400, "")
            writes.mark_charged(p, k, c.key)
        p.execute()


_USERS = tuple(f"user{i:02d}" for i in range(20))
_NAMES = ("train", "eval", "sweep-lr", "finetune-bert-large", "preprocess", "", "resnet50_imagenet", "notebook",
          "a-rather-long-job-name-for-the-name-column", "bench")
_OUTCOMES = (("completed", 0, states.COMPLETED),) * 14 + (("exit", 1, states.FAILED), ("exit", 137, states.FAILED),
             ("timeout", None, states.TIMEOUT), ("oom", None, states.OOM), ("cancelled", None, states.CANCELLED),
             ("node_failure", None, states.NODE_FAIL))


def varied(jid: int, end: float) -> Job:
    """An ended job whose every acct column varies with its id (deterministic): users, accounts,
    names, states and exit codes, arrays, GPUs, 1-3 attempts, costs, run times to the second."""
    h = (jid * 2654435761) & 0xFFFFFFFF
    outcome, code, state = _OUTCOMES[h % len(_OUTCOMES)]
    n_att, run = 1 + (h >> 8) % 3 // 2 + (h >> 9) % 5 // 4, 30 + (h >> 4) % 86_000
    gpus = (0, 1, 1, 2, 4, 8)[(h >> 12) % 6]
    atts = []
    for k in range(n_att):
        t1 = end - (n_att - k - 1) * (run + 60)
        last = k == n_att - 1
        atts.append(Attempt(k + 1, f"gpu{(h >> 16) % 40:02d}", tuple(f"GPU-{g}" for g in range(gpus)),
                            start_time=t1 - run, dispatch_time=t1 - run - 2, end_time=t1,
                            outcome=outcome if last else "preempted", exit_code=code if last else None,
                            cost=run * gpus * 97 + k, charges=(("eta", run * gpus * 97 + k),)))
    arr = (h >> 20) % 5 == 0
    return Job(id=jid, user=_USERS[(h >> 3) % 20], account=("eta", "theta", "vision", "nlp", "x")[(h >> 5) % 5],
               argv=("python", "train.py"), workdir="/home/x", name=_NAMES[(h >> 7) % len(_NAMES)], gpus=gpus,
               cpus=1 + (h >> 11) % 16, mem=(h >> 13) % 64 << 30, time_limit=86_400, state=state,
               exit_code=code if code is not None else (None if state == states.CANCELLED else 1),
               array_id=(jid - (h >> 22) % 50) if arr else None, array_index=(h >> 22) % 50 if arr else None,
               attempts=tuple(atts), start_time=atts[0].start_time, end_time=end, submit_time=atts[0].start_time - 90,
               restart_count=n_att - 1)


def more_rows(path, first, n):
    """n archived jobs straight into the archive (setup only): varied jobs (`varied`), each its
    record and its acct row, ends spread over the past year; no ledger rows."""
    db = Archive(path)
    span, recs, rows = 365 * 86400, [], []
    jobs_sql, acct_sql = dialect.upsert("jobs", archive._JOBS), dialect.upsert("acct", acctrows.SQL_NAMES)
    for i in range(n):
        j = varied(first + i, round(NOW - span + i * span / n))
        recs.append((j.id, j.end_time, j.user, j.account, j.state, codec.dumps(j)))
        rows.append(acctrows.row(j, j.attempts[-1].cost + 1000 * (i % 7)))
        if len(rows) == 50_000 or i == n - 1:
            db.db.executemany(jobs_sql, recs)
            db.db.executemany(acct_sql, rows)
            db.db.commit()
            recs, rows = [], []
    db.close()


# The labq that the timed commands run: this checkout's, or another's (--pythonpath: a `before` column).
_CODE: dict = {"cwd": None, "env": {}}


def acct_cli(d, path, window=("--since", "30d")):
    """`labq acct --since 30d` in its own process: (wall s, CPU s, jobs listed)."""
    cfg = os.path.join(d, "labq.toml")
    with open(cfg, "w") as f:
        f.write(f'[history]\nurl = "sqlite://{path}"\n')
    env = {**os.environ, **_CODE["env"], "LABQ_REDIS_URL": f"unix://{os.path.join(d, 'r.sock')}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", cfg, "acct", *window], env=env,
                       capture_output=True, text=True, check=True, cwd=_CODE["cwd"])
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, int(p.stdout.strip().splitlines()[-1].split()[0])


def plan_latency(r, k, pending, archivers):
    """Median tick (plan) time at `pending` pending jobs, before and during archiving with each of
    `archivers`, and its median archive pass; each tick follows one submit, so each one plans."""
    cfg = config.loads('[accounts.eta]\nusers = ["alice"]\n[scheduler]\nmax_pending = 1000000\n'
                       'max_pending_per_user = 1000000\n')
    AgentStore(r, k).register("n1", 64, 512 << 30, 64, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)], "h", 1, 86400)
    s = Scheduler(r, cfg, me="bench")
    body = json.dumps({"argv": ["true"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 3600, "account": "eta"})

    def submit(n):
        p = r.pipeline(transaction=False)
        for _ in range(n):
            p.lpush(k.requests, json.dumps({"rid": os.urandom(8).hex(), "op": "submit", "body": body, "user": "alice"}))
        p.lpush(k.wake, "user:alice")
        p.execute()
    for i in range(0, pending, 1000):
        submit(min(1000, pending - i))
        s.tick(time.time(), ["user:alice"])

    def ticks(n, archiver):
        out, passes = [], []
        for _ in range(n):
            submit(1)
            t0 = time.perf_counter()
            s.tick(time.time(), ["user:alice"])
            out.append(time.perf_counter() - t0)
            if archiver:
                archiver.next = float("-inf")
                t0 = time.perf_counter()
                archiver.step(NOW + 7 * 86400 + 60)
                passes.append(time.perf_counter() - t0)
        return statistics.median(out), (statistics.median(passes) if passes else 0.0)
    before, _ = ticks(20, None)
    during = [ticks(20, a) for a in archivers]
    return len([j for j in s.jobs.values() if j.state == states.PENDING]), before, during


def scheduler_restart(d, path, k):
    """`labq scheduler` started on the bench's Redis and archive: seconds (wall) and its CPU until it
    answers a request (`labq stat --start`'s `starts`, through the inbox), and Redis's memory."""
    from labq.scheduler.client import Client
    cfg_path, sock, state = (os.path.join(d, n) for n in ("sched.toml", "r.sock", "state.json"))
    with open(cfg_path, "w") as f:
        f.write(f'[redis]\nurl = "unix://{sock}"\n[scheduler]\nstate_file = "{state}"\n'
                f'[history]\nurl = "sqlite://{path}"\nkeep = "8d"\n')   # the setup's week stays in Redis
    r = redis.Redis(unix_socket_path=os.path.join(d, "r.sock"), decode_responses=True)
    r.delete(k.leader)                  # a lease left by the previous run would make it wait a term out
    c = Client(config.load(cfg_path), user="alice")
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "labq.cli.main", "--config", cfg_path, "scheduler"], cwd=_CODE["cwd"],
                         env={**os.environ, **_CODE["env"], "LABQ_STATE_DIR": d}, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "scheduler.log"), "w"))
    try:
        c.request("starts", {}, timeout=120)
        wall = time.monotonic() - t0
        with open(f"/proc/{p.pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        p.terminate()
        p.wait()
    return wall, cpu, r.info("memory")["used_memory"]


def recent(r, k, n):
    """n jobs that ended in the past week (history.keep's default): they stay in Redis."""
    fill(r, k, n, first=5 * 10 ** 6, ended=NOW - 7 * 86400 + 3600)


def archive_and_acct(args, d, path, k, p, r):
    """Redis memory and restart with N jobs kept, then archived; the archiving rate; the rest of the
    archive written directly; then a week of ended jobs that stay in Redis."""
    n = args.jobs
    fill(r, k, n)
    kept_mem = r.info("memory")["used_memory"]
    p, r, kept_restart = restart(d, p)
    arch = Archiver(r, k, Archive(path), keep=7 * 86400, batch=5000)
    t0 = time.monotonic()
    # The ledger entries were written just now (their stream ids say so): archive as of a week on.
    while sum(arch.step(NOW + 7 * 86400 + 60)) and (r.zcard(k.history) or r.xlen(k.ledger)):
        arch.next = float("-inf")
    rate = n / (time.monotonic() - t0)
    r.bgrewriteaof()
    while r.info("persistence")["aof_rewrite_in_progress"]:
        time.sleep(0.05)
    archived_mem = r.info("memory")["used_memory"]
    p, r, archived_restart = restart(d, p)
    print(f"{n:,} ended jobs: Redis {kept_mem / 1e6:.1f} MB kept -> {archived_mem / 1e6:.1f} MB archived; "
          f"Redis restart {kept_restart:.2f} s -> {archived_restart:.2f} s; archiving {rate:,.0f} jobs/s; "
          f"archive file {os.path.getsize(path) / 1e6:.0f} MB", flush=True)
    if args.rows > n:
        t0 = time.monotonic()
        more_rows(path, n + 1, args.rows - n)
        print(f"setup: {args.rows - n:,} archived jobs (record + acct row) written straight into the archive in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
    if args.recent:
        recent(r, k, args.recent)
    return p, r


def back_fill(args, d, path, r, k):
    """A setup kept from before Redis held acct rows (keys.acct_rows): time acct without them (each
    job's record read instead, as just after an upgrade), then the scheduler's back-fill
    (SchedulerStore.acct_rows_missing, backfill_acct_rows: what a new leader's loop runs)."""
    from labq.scheduler.store.state import SchedulerStore
    if r.hlen(k.acct_rows) >= r.zcard(k.history):
        return
    for _ in range(2):
        wall, cpu, listed = acct_cli(d, path)
        print(f"labq acct --since 30d, the Redis jobs without acct rows (records read; an upgrade's first "
              f"minutes): {listed:,} listed, wall {wall:.2f} s, CPU {cpu:.2f} s (load {_load()})", flush=True)
    r.set(k.leader, "bench-backfill")
    store = SchedulerStore(r, k, "bench-backfill")
    t0, c0 = time.monotonic(), time.process_time()
    todo = store.acct_rows_missing()
    n = len(todo)
    while todo:
        todo = store.backfill_acct_rows(todo)
    r.delete(k.leader)
    print(f"back-fill of {n:,} acct rows: wall {time.monotonic() - t0:.2f} s, CPU {time.process_time() - c0:.2f} s "
          f"(load {_load()})", flush=True)


def acct_runs(args, d, path):
    # --since 30d: the past week's jobs are still in Redis (history.keep's default): their acct rows;
    # 66d to 36d: a month that is all archived (the setup's first jobs ended 35 days before it).
    for window in (("--since", "30d"), ("--since", "66d", "--until", "36d")):
        for _ in range(2):      # the second run reads a warm page cache, as a user's repeated query does
            wall, cpu, listed = acct_cli(d, path, window)
            print(f"labq acct {' '.join(window)} over {max(args.rows, args.jobs):,} archived jobs: {listed:,} "
                  f"listed, wall {wall:.2f} s, CPU {cpu:.2f} s (load {_load()})", flush=True)


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1_000_000, help="jobs in the archive for the acct timing")
    ap.add_argument("--recent", type=int, default=19_200, help="jobs ended in the past week, kept in Redis "
                                                               "(a million a year is ~19,200 a week)")
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--latency-only", action="store_true", help="only the plan latency part (a 45,000-job backlog)")
    ap.add_argument("--pythonpath", help="time another checkout's labq (its root): a `before` column")
    ap.add_argument("--dir", help="keep Redis and the archive here; when it holds a finished setup, reuse it "
                                  "(acct and restart timings only)")
    args = ap.parse_args()
    if args.pythonpath:
        _CODE.update(cwd=args.pythonpath, env={"PYTHONPATH": args.pythonpath})
    d = args.dir or tempfile.mkdtemp(prefix="labq-arch-", dir="/tmp")
    os.makedirs(d, exist_ok=True)
    done = os.path.join(d, "setup.json")
    reuse = os.path.exists(done)
    k = Keys()
    cpu0 = time.process_time()
    try:
        p, r, redis_start = start(d)
        path = os.path.join(d, "history.db")
        if reuse:
            print(f"reusing {d}: {open(done).read().strip()}; Redis started (AOF replay) in {redis_start:.2f} s, "
                  f"{r.info('memory')['used_memory'] / 1e6:.1f} MB", flush=True)
            if not args.latency_only and not args.pythonpath:
                back_fill(args, d, path, r, k)
        elif not args.latency_only:
            p, r = archive_and_acct(args, d, path, k, p, r)
            with open(done, "w") as f:
                json.dump({"jobs": args.jobs, "rows": args.rows, "recent": args.recent}, f)
            p, r, redis_start = restart(d, p)
            print(f"Redis restart with {args.recent:,} recent ended jobs kept, the rest archived: "
                  f"{redis_start:.2f} s, {r.info('memory')['used_memory'] / 1e6:.1f} MB", flush=True)
        if not args.latency_only:
            acct_runs(args, d, path)
            for _ in range(2):
                wall, cpu, mem = scheduler_restart(d, path, k)
                print(f"scheduler start to its first answer, {max(args.rows, args.jobs):,} jobs archived: wall "
                      f"{wall:.2f} s, its CPU {cpu:.2f} s; Redis {mem / 1e6:.1f} MB (load {_load()})", flush=True)
        if args.dir and not args.latency_only:
            p.terminate()
            p.wait()
            return
        r.flushall()
        fill(r, k, 45_000, first=10 ** 8)         # a backlog for both archivers while the scheduler plans
        fixed = Archiver(r, k, Archive(path), keep=7 * 86400, batch=1000)
        sized = Archiver(r, k, Archive(path), keep=7 * 86400, batch=1000, pass_s=0.1)   # the scheduler's
        pend, before, during = plan_latency(r, k, args.pending, [fixed, sized])
        for (tick, step), what in zip(during, ("passes of 1,000 jobs", "passes sized to 0.1 s (the scheduler's)")):
            print(f"plan latency at {pend:,} pending: tick {before * 1000:.0f} ms before archiving, {tick * 1000:.0f} "
                  f"ms during {what}; each pass {step * 1000:.0f} ms (the loop's next tick waits for it)", flush=True)
        p.terminate()
    finally:
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
        print(f"bench CPU (this process) {time.process_time() - cpu0:.0f} s; load {_load()}")


if __name__ == "__main__":
    main()
