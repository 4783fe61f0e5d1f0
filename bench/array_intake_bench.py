"""A held 10,000-task array at the scheduler and in `stat` (issue 39 item 1: an array is one record).

A private redis-server (AOF, as `labq up` runs it), the scheduler in-process, one node: each run
pushes one `sub -H -a 1-N` request into the inbox and times the scheduler's tick that takes it
(intake, commit and the plan after it: process CPU and wall), counts the keys it added, then times
what the thin `stat` does with the arrays queued so far (rows read, lines compacted, table made).
Then it cancels each array whole (`del A`) and times the scheduler's ticks until it is answered and
ended. bench/live_bench.py times the same submit through the CLI on a whole stack.

    .venv/bin/python bench/array_intake_bench.py [--tasks 10000] [--runs 5]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from labq.cli import statview  # noqa: E402
from labq.cli.embedded import Stack  # noqa: E402
from labq.scheduler.daemon.loop import Scheduler  # noqa: E402
from labq.scheduler.jobs.model import Gpu  # noqa: E402
from labq.scheduler.settings import config  # noqa: E402
from labq.scheduler.store import conn, inbox  # noqa: E402
from labq.scheduler.store.agentside import AgentStore  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402
from labq.scheduler.thinclient import ThinClient  # noqa: E402

CFG = "[scheduler]\nmax_pending_per_user = 1000000\nmax_pending = 1000000\n"


def _ms(xs) -> str:
    return f"min {min(xs):.1f}, median {statistics.median(xs):.1f} ms"


def measure(tasks: int, runs: int) -> dict:
    d = tempfile.mkdtemp(prefix="labq-arraybench-", dir="/tmp")
    stack = Stack(d, None)
    try:
        url = stack.start_redis()
        r, k = conn.connect(url), Keys()
        AgentStore(r, k).register("n1", 64, 256 << 30, 64, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
        s = Scheduler(r, cfg=config.loads(CFG), me="bench")
        s.tick(time.time())
        body = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "time_limit": 3600, "hold": True,
                "array": [1, tasks, 1]}
        out: dict = {"cpu": [], "wall": [], "keys": [], "stat_cpu": [], "stat_wall": []}
        for i in range(runs):
            before = r.dbsize()
            for cmd in inbox.send_commands(k, "alice", {"rid": f"a{i}", "op": "submit", "body": json.dumps(body)}):
                r.execute_command(*cmd)
            c0, w0 = time.process_time(), time.perf_counter()
            s.tick(time.time())
            out["cpu"].append((time.process_time() - c0) * 1e3)
            out["wall"].append((time.perf_counter() - w0) * 1e3)
            out["keys"].append(r.dbsize() - before)
            if not r.lrange(k.reply(f"a{i}"), 0, -1):
                raise RuntimeError("the submit was not answered in its tick")
            c = ThinClient(url)
            c0, w0 = time.process_time(), time.perf_counter()
            rows, _ = c.read.stat_rows()
            statview.rows_table(statview.rows_cells(rows, time.time()), currency=c.currency)
            out["stat_cpu"].append((time.process_time() - c0) * 1e3)
            out["stat_wall"].append((time.perf_counter() - w0) * 1e3)
        # `labq del A` of each held array (issue 39 step 3): the ticks until its reply, CPU and wall,
        # the keys and acct rows it leaves.
        out.update(del_cpu=[], del_wall=[], del_keys=[], del_acct=[])
        for i in range(runs):
            a = json.loads(r.lrange(k.reply(f"a{i}"), 0, -1)[0])["job_id"]
            before, acct = r.dbsize(), r.hlen(k.acct_rows)
            for cmd in inbox.send_commands(k, "alice", {"rid": f"d{i}", "op": "cancel",
                                                        "body": json.dumps({"ids": [str(a)]})}):
                r.execute_command(*cmd)
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(1000):
                s.tick(time.time())
                if r.lrange(k.reply(f"d{i}"), 0, -1) and r.hlen(k.acct_rows) - acct >= 1 and not s.jobs:
                    break
            out["del_cpu"].append((time.process_time() - c0) * 1e3)
            out["del_wall"].append((time.perf_counter() - w0) * 1e3)
            out["del_keys"].append(r.dbsize() - before)
            out["del_acct"].append(r.hlen(k.acct_rows) - acct)
        return out
    finally:
        stack.stop_all()
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    got = measure(a.tasks, a.runs)
    print(f"{a.tasks}-task held array, {a.runs} runs, load {os.getloadavg()[0]:.1f}")
    print(f"scheduler tick that takes it: CPU {_ms(got['cpu'])}; wall {_ms(got['wall'])}")
    print(f"keys added per array: {got['keys']}")
    print("stat's rows + table, client CPU with 1.. arrays queued: "
          + ", ".join(f"{x:.1f}" for x in got["stat_cpu"]) + " ms")
    print(f"`del A` of each, scheduler ticks until answered and ended: CPU {_ms(got['del_cpu'])}; "
          f"wall {_ms(got['del_wall'])}; keys added {got['del_keys']}; acct rows {got['del_acct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
