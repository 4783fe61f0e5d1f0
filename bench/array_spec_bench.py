"""Redis bytes per pending job for a 10,000-task array with a 1 MB script (DESIGN §11: ≤ 2 KB).

A short run: a private redis-server (AOF, as `labq up` runs it), the scheduler in-process, one node
with one GPU (so one task runs and the rest pend), one submit straight into the inbox. The figure is
Redis's `used_memory` after the submit minus before, divided by the tasks; the shared spec's own
size and a task record's MEMORY USAGE are printed beside it.

    .venv/bin/python bench/array_spec_bench.py [--tasks 10000] [--script-bytes 1000000]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from labq.cli.embedded import Stack  # noqa: E402
from labq.scheduler.daemon.loop import Scheduler  # noqa: E402
from labq.scheduler.jobs.model import Gpu  # noqa: E402
from labq.scheduler.settings import config  # noqa: E402
from labq.scheduler.store import conn  # noqa: E402
from labq.scheduler.store.agentside import AgentStore  # noqa: E402
from labq.scheduler.store.keys import Keys  # noqa: E402


def measure(tasks: int, script_bytes: int) -> dict:
    d = tempfile.mkdtemp(prefix="labq-specbench-", dir="/tmp")
    stack = Stack(d, None)
    try:
        r = conn.connect(stack.start_redis())
        k, cfg = Keys(), config.loads("")
        AgentStore(r, k).register("n1", 64, 256 << 30, 64, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
        s = Scheduler(r, cfg=cfg, me="bench")
        s.tick(time.time())
        script = "#!/bin/sh\n# " + "x" * script_bytes + "\necho $LABQ_ARRAY_TASK_ID\n"
        body = {"argv": [], "script": script, "workdir": "/tmp", "gpus": 1, "time_limit": 3600,
                "array": [0, tasks - 1, 1]}
        r.execute_command("MEMORY", "PURGE")
        before = int(r.info("memory")["used_memory"])
        r.lpush(k.requests, json.dumps({"rid": "big", "op": "submit", "body": json.dumps(body), "user": "bench"}))
        t0 = time.monotonic()
        s.tick(time.time(), ["user:bench"])
        took = time.monotonic() - t0
        reply = json.loads(r.lrange(k.reply("big"), 0, -1)[-1])
        assert reply["ok"], reply
        r.execute_command("MEMORY", "PURGE")
        after = int(r.info("memory")["used_memory"])
        first = reply["job_id"]
        return {"tasks": tasks, "script_bytes": len(script), "submit_s": round(took, 2),
                "bytes_per_task": round((after - before) / tasks),
                "spec_bytes": r.strlen(k.spec(first)),
                "record_memory_usage": r.memory_usage(k.job(first + 1)),
                "record_strlen": r.strlen(k.job(first + 1)),
                "pending": r.zcard(k.active) - 1}
    finally:
        stack.stop_all()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--script-bytes", type=int, default=1_000_000)
    a = ap.parse_args()
    m = measure(a.tasks, a.script_bytes)
    print(json.dumps(m))
    print(f"Redis bytes per pending array task: {m['bytes_per_task']} (target ≤ 2048); "
          f"{m['tasks']} tasks, a {m['script_bytes']}-byte script stored once ({m['spec_bytes']} bytes); "
          f"one task's record {m['record_strlen']} bytes (MEMORY USAGE {m['record_memory_usage']})")


if __name__ == "__main__":
    main()
