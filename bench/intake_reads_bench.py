"""The scheduler's CPU for a batch's intake reads alone, in one process against a private redis-server
(no AOF): N requests of ~1.8 KB pushed with a wake token each, then the loop's wait (store.wait_wake,
which moves requests ahead), the tick's look and take_requests, REPS times; the scheduler's CPU and
Redis' per request. What `live_vs.py` cannot tell apart under other engineers' load (a µs or two a
request), run with each checkout's own interpreter, alternated (issue 39):

    for t in /work/bench/base . /work/bench/base .; do (cd /tmp && $t/.venv/bin/python $OLDPWD/bench/intake_reads_bench.py 90 400); done
"""
import os
import subprocess
import sys
import tempfile
import time

import redis

import labq
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.state import SchedulerStore

WARM = 3


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    sock = os.path.join(tempfile.mkdtemp(prefix="labq-reads-"), "redis.sock")
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = redis.Redis(unix_socket_path=sock, protocol=3, decode_responses=True)
        k = Keys("labq")
        store = SchedulerStore(r, k, "me")
        entries = [os.urandom(900).hex().encode() for _ in range(n)]
        store.look([], 500)       # as a leader's first tick: the waits then look ahead
        cpu = redis_cpu = 0.0
        for rep in range(reps + WARM):
            r.lpush(k.requests, *entries)
            r.lpush(k.wake, *["t"] * n)
            c0, r0 = time.process_time(), _cpu(server.pid)
            store.wait_wake(1.0)
            _, waiting, _ = store.look([], 500)
            got = store.take_requests(500, waiting)
            c1, r1 = time.process_time(), _cpu(server.pid)
            assert len(got) == n, len(got)
            if rep >= WARM:
                cpu, redis_cpu = cpu + c1 - c0, redis_cpu + r1 - r0
            r.delete(k.taken, k.requests)
            store.held.clear()
        print(f"{os.path.dirname(os.path.dirname(labq.__file__))}: scheduler {1e6 * cpu / (reps * n):.2f} µs a "
              f"request, Redis {1e6 * redis_cpu / (reps * n):.2f} ({n} a batch, {reps} batches, load "
              f"{os.getloadavg()[0]:.1f})")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
