"""The 100-client drain of two checkouts' whole stacks, interleaved: where a change is the scheduler's
(its round trips, its commits), not the clients' (`live_bench.py --alternate` runs two trees' clients
against this tree's scheduler). Each run is a fresh private stack (live_bench's BenchStack: redis-server,
`labq scheduler`, `labq worker`) of one checkout, its scheduler and its clients, in the order ABBA ABBA;
each drains `--drains` times 100 clients × 94 held submits (the first on a warm stack, the queue
growing 9,400 held jobs each). Per drain: requests/s, each process's CPU per request (the scheduler's,
the clients', Redis'), requests a batch (a batch is one EXEC; `--clients 1`: one a batch, so the
scheduler's CPU per request is its fixed cost per batch and one request's), and with `--strace` the scheduler's
round trips a batch (its sendto calls) and Redis' fsyncs a batch (fdatasync, with their wall time),
counted by `strace --seccomp-bpf -c -w`, which costs Redis CPU: read the rates of untraced runs.

    .venv/bin/python bench/live_vs.py 4 /work/bench/base              # ABBA ×2, `appendfsync always`
    .venv/bin/python bench/live_vs.py 2 /work/bench/base --strace     # the counts
    .venv/bin/python bench/live_vs.py 2 /work/bench/base --fsync everysec --drains 1
    .venv/bin/python bench/live_vs.py 2 /work/bench/base --clients 1 --per 1000   # a batch per request

A run is this file run again by the checkout's own interpreter with the checkout first on PYTHONPATH
(`--one-stack`): this tree's bench code, that checkout's labq; it prints one JSON line a drain."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRACED = {"redis": "fdatasync,fsync", "scheduler": "sendto"}


def _arg(name: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def _trace(pid: int, calls: str, out: str) -> subprocess.Popen:
    return subprocess.Popen(["strace", "--seccomp-bpf", "-f", "-c", "-w", "-e", f"trace={calls}", "-o", out,
                             "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _counted(out: str) -> dict[str, tuple[int, float]]:
    """strace -c's table: {syscall: (calls, seconds)}."""
    got = {}
    with open(out) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[-1].isidentifier() and parts[3].isdigit():
                got[parts[-1]] = (int(parts[3]), float(parts[1]))
    return got


def one_stack(drains: int, fsync: str | None, trace: bool, clients: int, per: int) -> None:
    sys.path.insert(0, HERE)
    import live_bench
    from stackutil import BenchStack
    with BenchStack(slots=4, max_pending=200_000) as bs:
        if fsync:
            bs.client.store.r.config_set("appendfsync", fsync)
        pids = {name: bs.stack.procs[name].pid for name in TRACED}
        for _ in range(drains):
            tracers = {}
            if trace:
                tracers = {name: (_trace(pids[name], TRACED[name], f"{bs.dir}/strace.{name}"), f"{bs.dir}/strace.{name}")
                           for name in TRACED}
                time.sleep(1)           # attached before the clients start
            d = live_bench.drain(bs, clients, per)
            counts = {}
            for name, (p, out) in tracers.items():
                p.send_signal(signal.SIGINT)
                p.wait()
                counts.update(_counted(out))
            d.pop("commands")
            print(json.dumps({**d, "counts": counts, "load": os.getloadavg()[0]}), flush=True)


def _line(tree: str, d: dict) -> str:
    n, b = d["requests"], max(1, d["batches"])
    per = lambda k: d[k] * 1e6 / n       # noqa: E731
    text = (f"{tree}: {d['rate']:,.0f} requests/s; CPU per request: scheduler {per('cpu'):.0f} µs, clients "
            f"{per('client_cpu'):.0f}, Redis {per('redis_cpu'):.0f}, sum {per('cpu') + per('client_cpu') + per('redis_cpu'):.0f}; "
            f"{n / b:.1f} requests a batch; p50 {d['p50']:.1f} ms; load {d['load']:.2f}")
    if "run_wait" in d:     # waiting runnable for a CPU, a batch (schedstat)
        text += (f"\n    run-queue wait a batch: scheduler {d['run_wait'] * 1e3 / b:.2f} ms, "
                 f"Redis {d['redis_run_wait'] * 1e3 / b:.2f} ms; span a batch {d['span'] * 1e3 / b:.2f} ms")
    c = d["counts"]
    if "sendto" in c:
        text += f"\n    scheduler round trips a batch {c['sendto'][0] / b:.2f}"
    for call in ("fdatasync", "fsync"):
        if call in c:
            text += f"; Redis {call} a batch {c[call][0] / b:.2f}, {c[call][1] * 1e3 / max(1, c[call][0]):.2f} ms each"
    return text


def versus(reps: int, other: str, argv: list[str]) -> None:
    mine = os.path.dirname(HERE)
    for tree in (mine, other):      # bytecode, as an installed labq has it
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j0", *(os.path.join(tree, d) for d in
                        ("labq", "scheduler", "worker", "cli"))], stdout=subprocess.DEVNULL, check=False)
    for rep in range(reps):
        for tree in ((other, mine) if rep % 2 == 0 else (mine, other)):
            env = dict(os.environ, PYTHONPATH=tree)
            py = os.path.join(tree, ".venv", "bin", "python")
            p = subprocess.run([py, os.path.abspath(__file__), "--one-stack", *argv], env=env, cwd=tree,
                               capture_output=True, text=True, timeout=900)
            rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
            if p.returncode or not rows:
                raise SystemExit(f"{tree}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
            for d in rows:
                print(f"{rep + 1} {_line(tree, d)}", flush=True)


def main() -> int:
    drains, fsync, trace = int(_arg("--drains", "2")), _arg("--fsync"), "--strace" in sys.argv
    clients, per = int(_arg("--clients", "100")), int(_arg("--per", "94"))
    if trace and not shutil.which("strace"):
        raise SystemExit("--strace: strace is not installed")
    if "--one-stack" in sys.argv:
        one_stack(drains, fsync, trace, clients, per)
        return 0
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        raise SystemExit(__doc__)
    rest = ["--drains", str(drains), "--clients", str(clients), "--per", str(per)] + \
        (["--fsync", fsync] if fsync else []) + (["--strace"] if trace else [])
    versus(int(sys.argv[1]), os.path.abspath(sys.argv[2]), rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
