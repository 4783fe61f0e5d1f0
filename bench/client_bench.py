"""The thin CLI (issue 13, client half), side by side in one run: `labq sub` wall, its imports,
`labq stat` at 1k/10k/100k queued, CLI submit → start, against task-spooler where installed, and the
labq of an earlier commit on the same queue ("before") where `--before REV` names one.

    .venv/bin/python bench/client_bench.py [--quick] [--before 7db4d61] [--write]

Walls are medians of whole processes as a shell runs them, in a user's env (no PYTHONPATH, bytecode
cached: see user_env). Two installs are timed: the dev venv's console script (`make install`: an
editable install in compat mode, the checkout's folder in a .pth) and a wheel of this
checkout in a venv of its own (what `make install-system` gives users; built here, no dependencies:
the fast path needs none). The figures reported against the targets are the wheel's. Queued jobs are
held (`-H`) arrays, so they stay pending. `--write` puts the figures in bench/HISTORY.md (the earlier reports) between the
`speedcli` markers.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from latency_bench import _sample_cli, percentile  # noqa: E402
from peers import PeerUnusable, Slurm, TaskSpooler  # noqa: E402
from stackutil import BenchStack, labq_command  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = {"sub": 60, "lat": 80, "stat10k": 100}


class Walls(list):
    """Wall ms of each run, with `.cpu`: the child's user+sys CPU ms of each. On a loaded machine the
    CPU time is what the command itself costs; the wall adds the wait for a core."""

    def __init__(self):
        super().__init__()
        self.cpu = []


def wall(argv, env, cwd, n: int, ok=(0,)) -> Walls:
    out = Walls()
    for _ in range(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
        out.append((time.perf_counter() - t0) * 1000)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.cpu.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
        if p.returncode not in ok:
            raise RuntimeError(f"{' '.join(argv[-5:])}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return out


def wheel_labq(tmp: str) -> list[str] | None:
    """`labq` of a wheel of this checkout in a venv of its own, or None (said on stdout) if it cannot be built."""
    venv = os.path.join(tmp, "venv")
    try:
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True, capture_output=True, timeout=120)
        pip = os.path.join(venv, "bin", "pip")
        subprocess.run([pip, "install", "-q", "wheel"], capture_output=True, timeout=300)
        subprocess.run([pip, "wheel", "-q", "--no-deps", "-w", tmp, ROOT], check=True, capture_output=True, timeout=300)
        whl = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
        subprocess.run([pip, "install", "-q", "--no-deps", os.path.join(tmp, whl)], check=True, capture_output=True,
                       timeout=300)
        return [os.path.join(venv, "bin", "labq")]
    except (subprocess.SubprocessError, OSError, IndexError) as e:
        print(f"  wheel install skipped: {e}")
        return None


def before_labq(rev: str, tmp: str) -> list[str] | None:
    """`python -m labq.cli.main` of an older commit (a detached worktree), with the dev venv's packages."""
    d = os.path.join(tmp, "before")
    p = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", d, rev], capture_output=True, text=True)
    if p.returncode:
        print(f"  before ({rev}) skipped: {p.stderr.strip()[-200:]}")
        return None
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {d!r}); sys.argv[0] = 'labq'; "
            "from labq.cli.main import main; main()"]


def user_env(env: dict) -> dict:
    """`env` as a user's shell has it: no PYTHONPATH (the stack's points at the checkout) and
    bytecode written and read as Python does by default."""
    return {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}


def importtime(args, env, cwd) -> tuple[float, list[tuple[str, int]]]:
    """`python -X importtime -m labq ARGS`: (µs of all imports, the 10 largest top-level ones)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", *args], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    top = []
    for line in p.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\S.*)$", line)
        if m:
            top.append((m.group(3), int(m.group(2))))
    total = sum(us for name, us in top)
    return total, sorted(top, key=lambda x: -x[1])[:10]


def fill(bs, n_total: int, have: int) -> int:
    """Held array tasks until `n_total` are queued."""
    while have < n_total:
        k = min(10_000, n_total - have)    # one array per 10,000: a bigger one can outlast the lease on a loaded box
        body = bs.body(["true"], array=f"0-{k - 1}", hold=True)
        bs.client.submit(body, timeout=600)
        have += k
    return have


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--before", help="a commit to time beside this one (e.g. 7db4d61, before issue 13)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    n = 5 if args.quick else 11
    tmp = tempfile.mkdtemp(prefix="labq-clibench-", dir="/tmp")
    res, notes = {}, []
    try:
        installs = {"dev venv (editable, compat)": labq_command()}
        w = wheel_labq(tmp)
        if w:
            installs["wheel venv"] = w
        if args.before:
            b = before_labq(args.before, tmp)
            if b:
                installs[f"before ({args.before}, dev venv)"] = b
        with BenchStack(max_pending=250_000) as bs:
            # The stack's env puts the checkout first on PYTHONPATH (for its daemons), and this
            # machine's sets PYTHONDONTWRITEBYTECODE=1: with both, "the wheel" imported the checkout's
            # sources and compiled every module at every start (18 ms of CPU). A user's shell has
            # neither: the commands are timed without them ("user env"); `sub` also as before.
            sandbox, cwd = bs.stack.env(), bs.work
            env = user_env(sandbox)
            # CLI submit -> start on an idle node, through the dev venv's `labq` (stackutil), in a user's
            # env like the walls below. In the sandbox env (PYTHONDONTWRITEBYTECODE=1 on this machine) a
            # fresh checkout has no bytecode and each `labq sub` compiled its modules: the scheduler stage
            # (t0 → admitted) was 144 ms of a 184 ms p50 at load 8.
            wall(labq_command() + ["--config", bs.cfg_path, "sub", "--test-only", "-A", "bench", "--", "true"],
                 env, cwd, 1)     # writes the bytecode a user's first run writes
            lat = [_sample_cli(bs, i, env)[0] * 1000 for i in range(8 if args.quick else 30)]
            res["lat"] = (percentile(lat, 50), percentile(lat, 99), len(lat))
            for name, cmd in installs.items():
                base = cmd + ["--config", bs.cfg_path]
                py = [open(cmd[0]).readline()[2:].strip()] if cmd[0].endswith("labq") else cmd[:1]
                res[("floor", name)] = wall(py + ["-c", "pass"], env, cwd, n)
                res[("sub", name)] = wall(base + ["sub", "-H", "-A", "bench", "--", "true"], env, cwd, n)
                if name == "wheel venv":
                    res[("sub", name + ", sandbox env")] = wall(base + ["sub", "-H", "-A", "bench", "--", "true"],
                                                                sandbox, cwd, n)
            res["imports"] = importtime(["--config", bs.cfg_path, "sub", "--test-only", "-A", "bench", "--", "true"],
                                        env, cwd)
            have = len(bs.client.read.active())
            for size in [int(s) for s in args.sizes.split(",")]:
                have = fill(bs, size, have)
                for name, cmd in installs.items():
                    if name.startswith("before") and size > 10_000:
                        continue    # seconds per run there; 1k and 10k show its growth
                    k = n if size <= 10_000 else max(3, n // 3)
                    res[("stat", name, have)] = wall(cmd + ["--config", bs.cfg_path, "stat"], env, cwd, k)
        try:
            with TaskSpooler(slots=4) as ts:
                tl = ts.latency(8 if args.quick else 30)
                res["tsp.lat"] = (percentile(tl, 50), percentile(tl, 99), len(tl))
                res["tsp.sub"] = ts.submit_wall(n)
                res["tsp.desc"] = ts.describe()
        except PeerUnusable as e:
            notes.append(f"task-spooler: skipped, {e}")
        try:
            with Slurm() as sl:
                res["slurm.sub"] = sl.submit_walls(n)["sub.wall"]
                _, jid = sl.array_submit(10_000, 1)    # 10,000 held tasks: squeue at 10k queued
                res["slurm.stat"], res["slurm.queued"] = sl.stat_wall(n)
                res["slurm.desc"] = sl.describe()
        except PeerUnusable as e:
            notes.append(f"SLURM: skipped, {e}")
    finally:
        if args.before:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", os.path.join(tmp, "before")],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(res, notes, args)
    print(text)
    if args.write:
        write(text)


def _med(ts) -> str:
    cpu = f"; CPU {statistics.median(ts.cpu):.0f} ms" if getattr(ts, "cpu", None) else ""
    return f"{statistics.median(ts):.0f} ms (min {min(ts):.0f}{cpu}, n={len(ts)})"


def report(res, notes, args) -> str:
    tsp_sub = statistics.median(res["tsp.sub"]) if "tsp.sub" in res else None
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M')} UTC on {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.1f} at the end (walls wait for a core; CPU = the child's user+sys time); "
             "user env (no PYTHONPATH, bytecode cached) unless a row says sandbox env; "
             f"`python bench/client_bench.py{' --quick' if args.quick else ''}"
             f"{' --before ' + args.before if args.before else ''}`.", "",
             "| figure | install | labq | target | task-spooler | ratio |", "|---|---|---|---|---|---|"]
    for key, ts in res.items():
        if isinstance(key, tuple) and key[0] == "floor":
            lines.append(f"| `python -c pass` (the interpreter's own start: the floor) | {key[1]} | {_med(ts)} | — | — | — |")
    for key, ts in res.items():
        if isinstance(key, tuple) and key[0] == "sub":
            ratio = f"{statistics.median(ts) / tsp_sub:.1f}×" if tsp_sub else "—"
            lines.append(f"| `labq sub -H -- true` wall | {key[1]} | {_med(ts)} | ≤ {TARGETS['sub']} ms | "
                         f"{f'{tsp_sub:.1f} ms' if tsp_sub else 'skipped'} | {ratio} |")
    p50, p99, k = res["lat"]
    tl = res.get("tsp.lat")
    lines.append(f"| CLI submit → start p50 (p99) | dev venv | {p50:.0f} ms ({p99:.0f}), n={k} | ≤ {TARGETS['lat']} ms | "
                 f"{f'{tl[0]:.1f} ms ({tl[1]:.1f})' if tl else 'skipped'} | {f'{p50 / tl[0]:.1f}×' if tl else '—'} |")
    for key, ts in res.items():
        if isinstance(key, tuple) and key[0] == "stat":
            target = f"≤ {TARGETS['stat10k']} ms" if 10_000 <= key[2] < 20_000 else "—"
            lines.append(f"| `labq stat`, {key[2]:,} queued | {key[1]} | {_med(ts)} | {target} | not run¹ | — |")
    if "slurm.sub" in res:
        lines.append(f"| peer: SLURM | {res['slurm.desc']} | `sbatch -H --wrap true` {_med(res['slurm.sub'])}; "
                     f"`squeue` at {res['slurm.queued']:,} queued {_med(res['slurm.stat'])} | — | — | — |")
    total, top = res["imports"]
    lines += ["", f"`python -X importtime -m labq sub --test-only -- true` (dev venv, live stack): "
                  f"{total / 1000:.1f} ms of imports; largest: "
              + ", ".join(f"{name.strip()} {us / 1000:.1f}" for name, us in top), "",
              "¹ tsp has no queue listing worth timing at this size: each queued tsp job is a live client "
              "process (TS_MAXCONN, 1,000 by default)."]
    lines += [f"- {x}" for x in notes]
    return "\n".join(lines)


BEGIN, END = "<!-- speedcli:begin -->", "<!-- speedcli:end -->"


def write(text: str) -> None:
    path = os.path.join(HERE, "HISTORY.md")
    with open(path) as f:
        doc = f.read()
    block = f"{BEGIN}\n## Thin CLI (issue 13, client half: bench/client_bench.py)\n\n{text}\n{END}"
    if BEGIN in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
