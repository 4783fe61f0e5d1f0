"""End-to-end throughput of trivial jobs (`true`) through one 4-slot node.

M jobs are submitted as one array request (so the figure is the scheduler + worker pipeline, not M
client round trips), and the clock runs from just before the submit call until a poll (every
50 ms) sees every job terminal in Redis. The node is idle before the submit. Each job writes its
(empty) log in the benchmark's work directory: the runner refuses /dev/null as a log path.
"""
import time

from rows import Row

from labq.scheduler.jobs import states


def run(bs, quick: bool) -> list[Row]:
    m = 100 if quick else 300
    body = bs.body(["true"], output="tput-%j.out", array="1-%d" % m)
    t0 = time.time()
    reply = bs.client.submit(body)
    jobs = bs.wait_terminal(range(reply["job_id"], reply["last_job_id"] + 1), 300, interval=0.05)
    wall = time.time() - t0
    ok = sum(1 for j in jobs if j.state == states.COMPLETED)
    starts = [a.start_time for j in jobs for a in j.attempts if a.start_time]
    note = f"{m} jobs, {ok} completed, {wall:.2f} s from submit to all terminal; {bs.slots} slots"
    if len(starts) > 1:
        note += f"; process starts spread over {max(starts) - min(starts):.2f} s"
    if ok != m:
        note += f"; {m - ok} did not complete: {sorted({j.state for j in jobs if j.state != states.COMPLETED})}"
    return [Row(f"trivial jobs end to end, one {bs.slots}-slot node", m / wall, "jobs/s", 100, "higher", note,
                key="tput")]
