"""Scheduler memory and Redis bytes per job with 100,000 pending.

A fresh private stack (its own redis-server, scheduler and worker, `max_pending = 200000`) gets one
array submit of 100,000 tasks, not held, that may begin only in an hour (`--begin now+1hour`), so
every task stays pending (BeginTime) and every pass plans it: the figure issue 39 states for
"100,000 non-held pending". (Held, the array is one record kept out of the plan, jobs/rest.py, and
says nothing of a pending queue; a pending one is one record too since issue 39 item 1, with a
window of its first tasks as records.) The scheduler's figure is its process's VmRSS (from /proc/PID/status) once the submit has
been answered and the scheduler has planned the full queue again (one tick later); VmHWM, its peak,
is in the note. Redis's figure is the growth of `INFO memory` used_memory over the same interval,
divided by the number of jobs. Where the scheduler's memory goes: tracemalloc over 10,000 decodes
of one of the job records gives the Python heap one Job object holds.

A second stack gets 100,000 SINGLE jobs, each its own request from one of 16 connections, not held,
pending an hour: the queue a lab builds with a loop of `labq sub`, with no array record to fold it into
(`_singles`). Its rows are the §11 figures for a deep queue; the array's show what the one record saves.

This stack runs `tick = "10s"` (leader lease 30 s). Without --quick a second stack with the default
tick (lease 10 s, extended by a big commit before it is built) tries the same submit and reports what
happens (`probe_default_tick`); before that extension the 100,000-task request was never answered.
"""
import time

from rows import Row
from stackutil import BenchStack

from labq.scheduler.client import Client
from labq.scheduler.store import conn

JOBS = 100_000
SUBMIT_TIMEOUT = 300


def proc_status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/status (VmRSS, VmHWM, ...), in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            parts = v.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[k] = int(parts[0]) * 1024
    return out


def _used_memory(r) -> int:
    return int(r.info("memory")["used_memory"])


TICK = "10s"
PROBE_TIMEOUT = 30


def run(quick: bool) -> list[Row]:
    rows = _measure() + _singles()
    if not quick:
        rows.append(probe_default_tick())
    return rows


def _measure() -> list[Row]:
    with BenchStack(slots=1, max_pending=2 * JOBS, tick=TICK) as bs:
        pid = bs.stack.procs["scheduler"].pid
        # Client.request waits up to timeout/3 per try on a socket whose read timeout is 30 s: give
        # this one connection room for a submit that takes longer than that.
        r = conn.connect(bs.stack.url, socket_timeout=SUBMIT_TIMEOUT + 30)
        client = Client(bs.cfg, url=bs.stack.url, r=r)
        before, used0 = proc_status(pid), _used_memory(r)
        body = bs.body(["true"], begin="now+1hour", array=f"1-{JOBS}")
        t0 = time.perf_counter()
        reply = client.submit(body, timeout=SUBMIT_TIMEOUT)
        took = time.perf_counter() - t0
        if reply["count"] != JOBS:
            raise RuntimeError(f"array reply has {reply['count']} tasks: {reply.get('display')}")
        # Let the scheduler plan the full queue again so any per-pass structure is counted too.
        time.sleep(bs.cfg.tick + 1)
        after, used1 = proc_status(pid), _used_memory(r)
        pending = len(bs.client.read.active())
        keys = r.dbsize()
        # The tasks that are records (all, or an array rest's window: the first ones).
        sample = [j for j in range(reply["job_id"], reply["last_job_id"] + 1)[:: JOBS // 100]
                  if r.exists(bs.client.k.job(j))] or [reply["job_id"]]
        record = sum(r.strlen(bs.client.k.job(j)) for j in sample) / len(sample)
        records = r.zcard(bs.client.k.active)
        decoded = job_object_bytes(r.get(bs.client.k.job(sample[0])))
        cancel, ratio = mass_cancel(bs, pid, reply["job_id"])
    rss, hwm = after["VmRSS"] / 1e6, after["VmHWM"] / 1e6
    per_job = (used1 - used0) / JOBS
    lease = max(5.0, 3 * bs.cfg.tick)
    return [
        Row(f"scheduler RSS, {pending:,} pending", rss, "MB", 200, key="mem.sched",
            data={"before": before["VmRSS"] / 1e6, "jobs": JOBS, "decoded": decoded},
            note=f"VmRSS of the `labq scheduler` process; {before['VmRSS'] / 1e6:.0f} MB before the submit, "
                 f"peak (VmHWM) {hwm:.0f} MB; tick {TICK}; one decoded Job object holds {decoded:,.0f} bytes "
                 f"(tracemalloc)"),
        Row(f"Redis bytes per pending job ({pending:,} pending)", per_job, "bytes", 2048, key="mem.redis",
            note=f"INFO used_memory {used0 / 1e6:.1f} → {used1 / 1e6:.1f} MB over the submit; {keys:,} keys, "
                 f"{records:,} job records; a job record (JSON string) is {record:,.0f} bytes on average",
            data={"record": record, "keys": keys, "records": records}),
        cancel,
        ratio,
        Row(f"{JOBS:,}-task array submit (one request), tick {TICK}", took * 1000, "ms", key="array100k",
            note=f"onto an empty queue; leader lease {lease:.0f} s"),
    ]


SINGLE_CLIENTS = 16


def _singles() -> list[Row]:
    """100,000 single jobs, each its own request, not held, pending an hour (BeginTime): the queue a
    lab builds with a loop of `labq sub` — no array record to fold them into, every one a job record
    in Redis and in the scheduler's pending queue. Sent by SINGLE_CLIENTS connections at once (threads:
    the client's cost is not what is measured)."""
    from concurrent.futures import ThreadPoolExecutor
    with BenchStack(slots=1, max_pending=2 * JOBS, tick=TICK) as bs:
        pid = bs.stack.procs["scheduler"].pid
        r = bs.client.store.r
        before, used0 = proc_status(pid), _used_memory(r)
        body = bs.body(["true"], begin="now+1hour")
        per = JOBS // SINGLE_CLIENTS

        def send(_n: int) -> int:
            client = Client(bs.cfg, url=bs.stack.url)
            return sum(1 for _ in range(per) if client.submit(dict(body), timeout=SUBMIT_TIMEOUT)["job_id"])

        t0 = time.perf_counter()
        with ThreadPoolExecutor(SINGLE_CLIENTS) as pool:
            sent = sum(pool.map(send, range(SINGLE_CLIENTS)))
        took = time.perf_counter() - t0
        time.sleep(bs.cfg.tick + 1)          # one more full pass over the whole queue
        after, used1 = proc_status(pid), _used_memory(r)
        pending, keys = len(bs.client.read.active()), r.dbsize()
    rss, hwm = after["VmRSS"] / 1e6, after["VmHWM"] / 1e6
    return [
        Row(f"scheduler RSS, {pending:,} single pending jobs", rss, "MB", 200, key="mem.sched.singles",
            note=f"VmRSS of the `labq scheduler` process; {before['VmRSS'] / 1e6:.0f} MB before, peak (VmHWM) "
                 f"{hwm:.0f} MB; {sent:,} submits from {SINGLE_CLIENTS} connections in {took:.0f} s; tick {TICK}"),
        Row(f"Redis bytes per pending job ({pending:,} single jobs)", (used1 - used0) / max(sent, 1), "bytes", 2048,
            key="mem.redis.singles",
            note=f"INFO used_memory {used0 / 1e6:.1f} → {used1 / 1e6:.1f} MB over the submits; {keys:,} keys "
                 f"(a job record, its environment, the kept reply of its request)"),
        Row(f"single submits taken in while the pending queue grows to {pending:,}", sent / took, "jobs/s",
            key="mem.singles.rate",
            note=f"{sent:,} not-held submits from {SINGLE_CLIENTS} connections in {took:.0f} s: every pass plans "
                 f"the whole queue so far (the drain rows submit held jobs, which no pass plans)"),
    ]


def mass_cancel(bs, pid: int, array_id: int) -> tuple[Row, Row]:
    """`labq del ARRAY` of the 100,000 pending tasks, as a user runs it: the scheduler's peak RSS
    while it cancels (VmHWM, reset first through /proc/PID/clear_refs) against its RSS before, and
    that ratio (issue 39: a mass cancel streams, no 2x spike). `labq del` must still say that it
    cancelled every task (one line naming the run)."""
    before = proc_status(pid)["VmRSS"]
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")          # resets VmHWM to the current RSS (Linux >= 4.0)
        reset = True
    except OSError:
        reset = False
    t0 = time.perf_counter()
    p = bs.run_labq("del", str(array_id), timeout=SUBMIT_TIMEOUT)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"labq del {array_id} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    said = f"job {array_id}_[1-{JOBS}]: cancelled"
    if said not in p.stdout:
        raise RuntimeError(f"labq del {array_id} did not say {said!r}: {p.stdout.strip()[-300:]!r}")
    bs._wait(lambda: not bs.client.store.r.hlen(bs.client.k.stat_rows), SUBMIT_TIMEOUT, "the cancelled tasks to leave")
    after = proc_status(pid)
    peak = after["VmHWM"]
    skipped = "" if reset else "cannot reset VmHWM (/proc/PID/clear_refs)"
    return Row(f"scheduler peak RSS while `labq del` cancels a {JOBS:,}-task array", peak / 1e6, "MB", 200,
               key="mem.cancel", skipped=skipped,
               note=f"{before / 1e6:.0f} MB before, peak {peak / 1e6:.0f} MB ({peak / before:.2f}× before), "
                    f"{after['VmRSS'] / 1e6:.0f} MB after; `labq del` took {took:.1f} s"), \
        Row(f"scheduler peak RSS / RSS before, `labq del` of a {JOBS:,}-task array", peak / before, "×", 1.5,
            key="mem.cancel.ratio", skipped=skipped,
            note=f"{peak / 1e6:.0f} / {before / 1e6:.0f} MB; a cancel commits 2,000 tasks a transaction (handlers.CHUNK)")


def job_object_bytes(record: str, n: int = 10_000) -> float:
    """Python heap bytes per Job decoded from `record` (tracemalloc over n decodes, all kept alive)."""
    import tracemalloc

    from labq.scheduler.store import codec
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        jobs = [codec.loads(record) for _ in range(n)]
        per = (tracemalloc.get_traced_memory()[0] - base) / n
    finally:
        tracemalloc.stop()
    del jobs
    return per


def probe_default_tick() -> Row:
    """The same 100,000-task submit with the default tick (1 s, lease 10 s): answered, or not within PROBE_TIMEOUT."""
    name = f"{JOBS:,}-task array submit, default tick 1s"
    with BenchStack(slots=1, max_pending=2 * JOBS) as bs:
        r = conn.connect(bs.stack.url, socket_timeout=PROBE_TIMEOUT + 30)
        client = Client(bs.cfg, url=bs.stack.url, r=r)
        t0 = time.perf_counter()
        try:
            client.submit(bs.body(["true"], account="parked", array=f"1-{JOBS}"), timeout=PROBE_TIMEOUT)
            return Row(name, (time.perf_counter() - t0) * 1000, "ms", key="array100k.tick1")
        except Exception as e:          # the expected outcome on a slow machine: reported, with the log's evidence
            with open(bs.log_path) as f:
                lost = sum(1 for line in f if "leader lease" in line and "reloading state" in line)
            return Row(name, key="array100k.tick1",
                       failed=f"no answer within {PROBE_TIMEOUT} s ({type(e).__name__})",
                       note=f"the scheduler lost its leader lease {lost} times while handling the request "
                            f"(\"…leader lease…; reloading state\" in its log): each try outlasts the lease, "
                            f"its commit is refused as stale, and the request is handled again")
