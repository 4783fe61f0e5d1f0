"""Where the time goes, for each figure that misses its target: py-spy on the hot path, untimed.

py-spy (`pip install '.[bench]'`) samples a process from outside at 250 Hz: a `plan()` loop on the
benchmark's snapshot, `labq stat` with 10,000 queued, the running scheduler while a client submits in
a loop, and the node agent with its slot runners while trivial jobs run through it.
Each table lists the frames most often on the stack ("total": share of samples with the frame
anywhere on the stack; "self": share with it on top, i.e. running its own code), labq's frames first.
CLI start-up is profiled with `python -X importtime` (no extra tool): the slowest top-level imports.
Nothing here is timed; it runs after the timed benchmarks of the same stack, and is skipped with
a message when py-spy is missing or may not attach (ptrace).
"""
import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RATE = 250
TRUNK = 0.9
OURS = ("scheduler/", "worker/", "cli/")
_FRAME = re.compile(r"^(.*) \((.*?)(?::(\d+))?\)$")


@dataclass
class Profile:
    key: str                       # what it explains: "plan:PxN", "scheduler", "array", "worker", "stat", "cli"
    title: str
    how: str
    lines: list = field(default_factory=list)    # (frame, total %, self %) or (module, ms)
    samples: int = 0
    hot: list = field(default_factory=list)      # (frame:line, self %): the top of the stack
    kind: str = "pyspy"            # "pyspy" or "importtime"
    skipped: str = ""


def pyspy() -> str | None:
    cand = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return cand if os.access(cand, os.X_OK) else shutil.which("py-spy")


@functools.lru_cache(maxsize=1)
def unavailable() -> str:
    """Why profiles cannot be taken here, or "" when they can."""
    exe = pyspy()
    if not exe:
        return "py-spy is not installed (`.venv/bin/pip install '.[bench]'`): profiles not taken"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "probe.txt")
        p = subprocess.run([exe, "record", "-r", "50", "-f", "raw", "-o", out, "--", sys.executable, "-c",
                            "import time\nt=time.time()\nwhile time.time()-t<0.3: pass"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0 or not os.path.exists(out):
            return f"py-spy cannot sample here: {(p.stderr or p.stdout).strip()[-200:]}"
    return ""


# -- reading py-spy's raw (collapsed) output ---------------------------------------------------
def _frames(line: str):
    stack, _, n = line.rpartition(" ")
    out = []
    for f in stack.split(";"):
        m = _FRAME.match(f)
        name, path, lineno = (m.group(1), m.group(2), m.group(3)) if m else (f, "", None)
        out.append((name, _short(path), lineno))
    return out, int(n)


def _short(path: str) -> str:
    for marker in ("site-packages/", ROOT + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.path.basename(path) if path.startswith("/") else path


def summarize(raw: str, root: str = "", top: int = 12) -> tuple[list, int, list]:
    """([(frame, total %, self %)], samples, [(frame:line, self %)]) of the stacks that contain `root`
    (from it down).

    The trunk (frames on at least TRUNK of the samples: the call chain down to where the work
    branches) is left out; labq's own frames come first, then the libraries' most-sampled ones. The
    last list is where the samples were on top of the stack, by line: the CPU itself, or the wait."""
    total, incl, selfs, lines = 0, collections.Counter(), collections.Counter(), collections.Counter()
    for line in raw.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        fr, n = _frames(line)
        if root:
            at = next((i for i, f in enumerate(fr) if root in f"{f[0]} ({f[1]})"), None)
            if at is None:
                continue
            fr = fr[at:]
        total += n
        seen = set()
        for name, path, _ in fr:
            k = f"{name} ({path})"
            if k not in seen:
                seen.add(k)
                incl[k] += n
        name, path, lineno = fr[-1]
        selfs[f"{name} ({path})"] += n
        lines[f"{name} ({path}:{lineno})"] += n
    if not total:
        return [], 0, []
    keep = [(k, v) for k, v in incl.most_common() if v < TRUNK * total]
    ours = [kv for kv in keep if any(o in kv[0] for o in OURS)][:top - top // 3]
    rest = [kv for kv in keep if kv not in ours][:top - len(ours)]
    rows = sorted(ours + rest, key=lambda kv: -kv[1])
    hot = [(k, 100 * v / total) for k, v in lines.most_common(5)]
    return [(k, 100 * v / total, 100 * selfs.get(k, 0) / total) for k, v in rows], total, hot


# -- taking profiles ---------------------------------------------------------------------------
def record_cmd(argv, env=None, cwd=None, timeout=300, idle=False) -> str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "raw.txt")
        cmd = [pyspy(), "record", "-r", str(RATE), "-f", "raw", "-o", out] + (["--idle"] if idle else []) + ["--", *argv]
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if not os.path.exists(out):
            raise RuntimeError(f"py-spy wrote nothing: {(p.stderr or p.stdout).strip()[-300:]}")
        with open(out) as f:
            return f.read()


def record_pids(pids: list[int], workload, subprocesses=False, idle=False, max_s=120) -> list[str]:
    """Sample each of `pids` (one py-spy each) while `workload()` runs in this process; stop when it returns."""
    with tempfile.TemporaryDirectory() as d:
        outs = [os.path.join(d, f"raw-{pid}.txt") for pid in pids]
        spies = [subprocess.Popen([pyspy(), "record", "--pid", str(pid), "-r", str(RATE), "-f", "raw", "-o", out,
                                   "-d", str(max_s), "--nonblocking"] + (["--subprocesses"] if subprocesses else [])
                                  + (["--idle"] if idle else []),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for pid, out in zip(pids, outs)]
        time.sleep(0.5)           # attached
        errors = []

        def work():
            try:
                workload()
            except Exception as e:     # re-raised below, after py-spy has stopped
                errors.append(e)
        t = threading.Thread(target=work)
        t.start()
        t.join(max_s)
        logs = []
        for spy in spies:
            spy.send_signal(2)    # SIGINT: py-spy writes what it has and exits
            logs.append(spy.communicate(timeout=60)[0])
        t.join()
        if errors:
            raise errors[0]
        got = []
        for out, log in zip(outs, logs):
            if not os.path.exists(out):
                raise RuntimeError(f"py-spy wrote nothing: {log.strip()[-300:]}")
            with open(out) as f:
                got.append(f.read())
        return got


def _tree(lines: list[str]) -> list[tuple[int, str, float, float]]:
    """importtime's post-order lines → pre-order [(depth, module, self ms, cumulative ms)], heaviest first."""
    done: list[list] = []          # finished nodes waiting for their parent: [depth, name, self, cum, children]
    for line in lines:
        try:
            self_us, cum_us, name = line.split(":", 1)[1].split("|")
            node = [(len(name) - len(name.lstrip()) - 1) // 2, name.strip(), int(self_us) / 1000, int(cum_us) / 1000, []]
        except ValueError:
            continue               # the header line
        while done and done[-1][0] > node[0]:
            node[4].insert(0, done.pop())
        done.append(node)
    out = []

    def walk(nodes):
        for n in sorted(nodes, key=lambda n: -n[3]):
            out.append((n[0], n[1], n[2], n[3]))
            walk(n[4])
    walk(done)
    return out


def importtime(argv, env, cwd, min_ms: float = 4.0, depth: int = 3) -> tuple[list, float]:
    """The import tree of `python -X importtime ARGV...`, to `depth` levels and modules of ≥ `min_ms`
    cumulative: [(depth, module, self ms, cumulative ms)], and the top-level imports' total ms."""
    p = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=120)
    tree = _tree([ln for ln in p.stderr.splitlines() if ln.startswith("import time:")])
    total = sum(cum for d, _, _, cum in tree if d == 0)
    return [t for t in tree if t[0] < depth and t[3] >= min_ms], total


# -- the profiles ------------------------------------------------------------------------------
def _profile(key, title, how, raw, root="") -> Profile:
    lines, n, hot = summarize(raw, root=root)
    return Profile(key, title, how, lines, n, hot)


def plan_profile(pending: int, nodes: int, seconds: float) -> Profile:
    code = (f"import sys; sys.path[:0] = [{HERE!r}, {ROOT!r}]\n"
            f"import plan_bench, time\n"
            f"from labq.scheduler.settings import config\n"
            f"from labq.scheduler.policy import plan\n"
            f"snap, cfg = plan_bench.snapshot({pending}, {nodes}), config.loads(plan_bench.CONFIG)\n"
            f"end = time.monotonic() + {seconds}\n"
            f"while time.monotonic() < end: plan(snap, cfg)\n")
    raw = record_cmd([sys.executable, "-c", code], cwd=ROOT)
    return _profile(f"plan:{pending}x{nodes}", f"plan(), {pending:,} pending × {nodes:,} nodes",
                    f"py-spy on a loop of plan() over plan_bench's snapshot for {seconds:.0f} s; only samples "
                    f"inside plan()", raw, root="plan (scheduler/policy/__init__.py)")


def stat_profile(bs) -> Profile:
    queued = len(bs.client.read.active())
    raw = record_cmd(bs.labq_argv("stat"), env=bs.stack.env(), cwd=bs.work)
    return _profile("stat", f"`labq stat`, {queued:,} queued", "py-spy on one `labq stat` process (on-CPU samples)", raw)


def cli_profile(bs) -> Profile:
    tree, total = importtime(["-m", "labq.cli.main", "--config", bs.cfg_path, "sub", "--test-only", "-A", "bench",
                              "--", "true"], bs.stack.env(), bs.work)
    return Profile("cli", "`labq sub` start-up: imports",
                   f"`python -X importtime -m labq.cli.main sub --test-only -- true`: the import tree to three levels, "
                   f"modules of 4 ms or more (all top-level imports together: {total:.0f} ms)",
                   tree, kind="importtime")


SCHED_HOW = "py-spy on the `labq scheduler` process from its tick down, waiting (idle) samples included"
WORKER_HOW = "py-spy --subprocesses on `labq worker`: the agent and its slot runners, on-CPU samples"


def scheduler_profile(bs, workload, what: str, key: str = "scheduler") -> Profile:
    (raw,) = record_pids([bs.stack.procs["scheduler"].pid], workload, idle=True)
    return _profile(key, f"the scheduler during {what}", SCHED_HOW, raw, root="Scheduler.tick (scheduler/daemon/loop.py)")


def node_profiles(bs, workload, what: str) -> list[Profile]:
    """The worker and the scheduler, both sampled during one run of `workload`."""
    w, s = record_pids([bs.stack.procs["worker"].pid, bs.stack.procs["scheduler"].pid], workload,
                       subprocesses=True)
    return [_profile("worker", f"the worker during {what}", WORKER_HOW, w),
            _profile("tput-scheduler", f"the scheduler during {what}", SCHED_HOW.replace(", waiting (idle) samples "
                     "included", ", on-CPU samples"), s, root="Scheduler.tick (scheduler/daemon/loop.py)")]


def markdown(p: Profile) -> list[str]:
    out = [f"### {p.title}", ""]
    if p.skipped:
        return out + [f"Not profiled: {p.skipped}", ""]
    out += [p.how + ("" if not p.samples else f"; {p.samples:,} samples") + ".", ""]
    if p.kind == "importtime":
        out += ["| module | self ms | cumulative ms |", "|---|---:|---:|"]
        out += [f"| {'&nbsp;' * 4 * d}`{m}` | {sm:.1f} | {cm:.1f} |" for d, m, sm, cm in p.lines]
        return out + [""]
    out += ["| frame | total | self |", "|---|---:|---:|"]
    out += [f"| `{k}` | {t:.0f} % | {s:.0f} % |" for k, t, s in p.lines]
    if p.hot:
        out += ["", "On top of the stack most often: " + "; ".join(f"`{k}` {v:.0f} %" for k, v in p.hot) + "."]
    return out + [""]
