"""Submit → process start on an idle node, through the Python API and through `labq sub`.

Each sample submits `date +%s.%N` (an exec that prints its own start time, with no interpreter
start-up to blur it) and takes the time it printed minus the time just before the submit call.
Samples are sequential, each on an idle node: the next is submitted only after the previous job
has ended. For the CLI the figure includes the `labq sub` process's own start-up.
"""
import os
import time

from rows import Row


def percentile(xs, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _started_at(path: str, timeout: float = 30.0) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.001)
    raise TimeoutError(f"no start time in {path} after {timeout}s")


def _sample_api(bs, i: int) -> tuple[float, int, float]:
    out = os.path.join(bs.work, f"lat-api-{i}.out")
    body = bs.body(["date", "+%s.%N"], output=out)
    t0 = time.time()
    jid = bs.client.submit(body)["job_id"]
    return _started_at(out) - t0, jid, t0


def _sample_cli(bs, i: int) -> tuple[float, int]:
    out = os.path.join(bs.work, f"lat-cli-{i}.out")
    t0 = time.time()
    p = bs.run_labq("sub", "--parsable", "-A", "bench", "-t", "10m", "-o", out, "--", "date", "+%s.%N")
    if p.returncode != 0:
        raise RuntimeError(f"labq sub exited {p.returncode}: {p.stderr.strip()}")
    return _started_at(out) - t0, int(p.stdout.strip()), t0


def measure(bs, how: str, n: int) -> tuple[list[float], list[float]]:
    """(submit → process start, submit → scheduler's dispatch) in ms, per sample."""
    sample = _sample_api if how == "api" else _sample_cli
    lat, disp = [], []
    for i in range(n):
        dt, jid, t0 = sample(bs, i)
        lat.append(dt * 1000)
        (job,) = bs.wait_terminal([jid], 30, interval=0.005)   # the node is idle again before the next sample
        if job.attempts and job.attempts[0].dispatch_time:
            disp.append((job.attempts[0].dispatch_time - t0) * 1000)
    return lat, disp


def run(bs, quick: bool) -> list[Row]:
    rows = []
    for how, label, n in (("api", "Python API (Client.submit)", 15 if quick else 50),
                          ("cli", "CLI (`labq sub` subprocess)", 8 if quick else 30)):
        lat, disp = measure(bs, how, n)
        note = f"{n} sequential samples, min {min(lat):.1f} ms, max {max(lat):.1f} ms"
        if disp:
            note += f"; submit → the admitting scheduler tick (Attempt.dispatch_time): median {percentile(disp, 50):.1f} ms"
        rows.append(Row(f"submit → start p50, {label}", percentile(lat, 50), "ms", 20, note=note))
        rows.append(Row(f"submit → start p99, {label}", percentile(lat, 99), "ms", 100, note=note))
    return rows
