"""Submit → process start on an idle node, through the Python API and through `labq sub`.

Each sample submits `date +%s.%N` (an exec that prints its own start time, with no interpreter
start-up to blur it) and takes the time it printed minus the time just before the submit call.
Samples are sequential, each on an idle node: the next is submitted only after the previous job
has ended. For the CLI the figure includes the `labq sub` process's own start-up. Each sample is
split into four stages from the records the job leaves: scheduler (submit → the tick that admitted
it, Attempt.dispatch_time), dispatch (→ a runner claimed it: the attempt hash's claimed_at, after
the blocking pop of the node's dispatch list, the runner's fork and its read of the record),
runner (→ Attempt.start_time, which the runner takes after opening the logs and building the
environment) and spawn (→ the time the command printed: limits, then the fork/exec into its cgroup).
"""
import os
import time

from rows import Row

SAMPLES, SAMPLES_QUICK = 30, 8      # CLI samples; task-spooler's latency uses the same counts


def percentile(xs, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def started_at(path: str, timeout: float = 30.0) -> float:
    """The time a job's `date +%s.%N` wrote to `path`, once it is there."""
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
    return started_at(out) - t0, jid, t0


def _sample_cli(bs, i: int, env=None) -> tuple[float, int, float]:
    out = os.path.join(bs.work, f"lat-cli-{i}.out")
    t0 = time.time()
    p = bs.run_labq("sub", "--parsable", "-A", "bench", "-t", "10m", "-o", out, "--", "date", "+%s.%N", env=env)
    if p.returncode != 0:
        raise RuntimeError(f"labq sub exited {p.returncode}: {p.stderr.strip()}")
    return started_at(out) - t0, int(p.stdout.strip()), t0


STAGES = ("scheduler", "dispatch", "runner", "spawn")      # see the module's docstring


def _claimed(r, keys, job) -> float | None:
    """When a runner claimed the attempt (the attempt hash's claimed_at), or None."""
    got = r.hget(keys.attempt(job.id, 1), "claimed_at")
    return float(got) if got else None


def measure(bs, how: str, n: int) -> tuple[list[float], dict[str, list[float]]]:
    """(submit → process start in ms per sample, {stage: ms per sample}) — see STAGES."""
    from labq.scheduler.store import conn
    from labq.scheduler.store.keys import Keys
    r, keys = conn.connect(bs.stack.url), Keys(bs.cfg.prefix)
    sample = _sample_api if how == "api" else _sample_cli
    lat, split = [], {k: [] for k in STAGES}
    for i in range(n):
        dt, jid, t0 = sample(bs, i)
        lat.append(dt * 1000)
        (job,) = bs.wait_terminal([jid], 30, interval=0.005)   # the node is idle again before the next sample
        a = job.attempts[0] if job.attempts else None
        claimed = _claimed(r, keys, job)
        if a and a.dispatch_time and a.start_time and claimed:
            marks = (t0, a.dispatch_time, claimed, a.start_time, t0 + dt)
            for k, lo, hi in zip(STAGES, marks, marks[1:]):
                split[k].append((hi - lo) * 1000)
    return lat, split


def split_text(split: dict) -> str:
    if not split[STAGES[0]]:
        return ""
    return "median split: " + ", ".join(f"{k} {percentile(split[k], 50):.1f} ms" for k in STAGES)


def run(bs, quick: bool) -> list[Row]:
    rows = []
    for how, label, n in (("api", "Python API (Client.submit)", 15 if quick else 50),
                          ("cli", "CLI (`labq sub` subprocess)", SAMPLES_QUICK if quick else SAMPLES)):
        lat, split = measure(bs, how, n)
        note = f"{n} sequential samples, min {min(lat):.1f} ms, max {max(lat):.1f} ms"
        if split_text(split):
            note += "; " + split_text(split)
        data = {k: percentile(v, 50) for k, v in split.items() if v}
        # DESIGN §11: API p50 ≤ 20 ms, p99 ≤ 100 ms; CLI p50 ≤ 80 ms (the command's start-up included).
        rows.append(Row(f"submit → start p50, {label}", percentile(lat, 50), "ms", 20 if how == "api" else 80, note=note,
                        key=f"lat.{how}.p50", data=data))
        rows.append(Row(f"submit → start p99, {label}", percentile(lat, 99), "ms", 100, note=note,
                        key=f"lat.{how}.p99", data=data))
    return rows
