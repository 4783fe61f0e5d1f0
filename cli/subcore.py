"""`labq sub` without click: the flags' values → a submit request → the reply printed.

Precedence: command-line flags, then environment (LABQ_SUB_ACCOUNT, LABQ_SUB_QOS, LABQ_SUB_TIME),
then the script's `#LABQ` lines (read up to the first line that is neither blank nor a comment), or,
when it has none, its `#SBATCH` lines (cli/sbatch.py).
The click command (submit.py) and the fast path (fast.py) both call `run`.
"""
import os
import sys

from labq.scheduler import units
from labq.scheduler.errors import RefusedError, UsageError
from labq.scheduler.jobs import bounds, exportenv

from .out import echo, echo_json

ENV = {"account": "LABQ_SUB_ACCOUNT", "qos": "LABQ_SUB_QOS", "time": "LABQ_SUB_TIME"}


def parse_gpus(text) -> tuple[str, int]:
    return units.parse_gpus(text, "--gpus")


def parse_array(text) -> tuple[list[int], int | None]:
    """`1-12`, `1-12:2`, `5`, `1-12%4` → ([lo, hi, step], throttle or None)."""
    s, percent, pct = str(text).partition("%")
    throttle = None
    if len(str(text)) > 100:
        raise UsageError(f"--array: expected LO-HI[:STEP][%N], got {len(str(text))} characters")
    if percent:
        try:
            throttle = bounds.integer("--array %N throttle", int(pct), 1)
        except ValueError:
            raise UsageError(f"--array: expected LO-HI%N with N a number, got {text!r}") from None
        if throttle < 1:
            raise UsageError(f"--array: the %N throttle must be at least 1, got {text!r}")
    rng, _, step = s.partition(":")
    lo, _, hi = rng.partition("-")
    try:
        a = [int(lo), int(hi or lo), int(step or 1)]
    except ValueError:
        raise UsageError(f"--array: expected LO-HI or LO-HI:STEP, got {text!r}") from None
    if a[0] < 0 or a[1] < a[0] or a[2] < 1:
        raise UsageError(f"--array: expected 0 ≤ LO ≤ HI and STEP ≥ 1, got {text!r}")
    return a, throttle


def parse_begin(text, now: float | None = None, what: str = "--begin") -> float:
    """A time as sbatch --begin takes it (scheduler/jobs/when.py) → epoch seconds."""
    import time

    from labq.scheduler.jobs import when
    now = time.time() if now is None else now
    return bounds.epoch(what, when.parse(text, now, what), now)


def parse_codes(text) -> list[int]:
    """`3,75` → [3, 75]: exit codes 1–255."""
    try:
        codes = [int(c) if len(c) < 10 else 0 for c in str(text).split(",")]   # a long one is out of range
    except ValueError:
        raise UsageError(f"--retry-on: expected exit codes like 3,75, got {text!r}") from None
    if not all(1 <= c <= 255 for c in codes):
        raise UsageError(f"--retry-on: exit codes are 1–255, got {text!r}")
    return codes


SIGNUM = {"1": "HUP", "2": "INT", "3": "QUIT", "10": "USR1", "12": "USR2", "14": "ALRM", "15": "TERM", "23": "URG"}


def parse_signal(text) -> list:
    """sbatch's `[{B|R}:][SIG][@SECS]`: `USR1@60`, `SIGUSR2@2m`, `@90` (USR1), `USR1` (60 s before,
    SLURM's default), `10@60` (a number), `B:USR1@60` (the batch shell only) → [name, seconds] or
    [name, seconds, "batch"]."""
    text = str(text)
    scope, colon, rest = text.partition(":")
    if colon and scope.upper() in ("B", "R"):
        text = rest
    name, at, when = text.rpartition("@") if "@" in text else (text, "@", "60")
    if not when:
        raise UsageError(f"--signal: expected [B:][SIG][@SECS] like USR1@60, got {text!r}")
    name = name.upper().removeprefix("SIG") or "USR1"
    out = [SIGNUM.get(name, name), units.parse_duration(when, "--signal", bare_unit=1)]
    return out + ["batch"] if colon and scope.upper() == "B" else out


def directives(script: str) -> list[str]:
    out = []
    for line in script.splitlines()[1 if script.startswith("#!") else 0:]:
        s = line.strip()
        if s.startswith("#LABQ"):
            import shlex  # here: it imports `re` (and `enum`), which a script without directives needs not
            try:
                out += shlex.split(s[len("#LABQ"):])
            except ValueError as e:
                raise UsageError(f"#LABQ directive: {e} in {s[:80]!r}") from None
        elif s and not s.startswith("#"):
            break
    return out


def run(client, opts: dict, args, dashdash: bool, merge) -> None:
    """Submit with the parsed flags `opts`; `merge(opts, directives, what)` fills what the flags left
    unset from a script's directives (each parser brings its own, so that errors read the same)."""
    argv, script, script_name = command(dashdash, args)
    if script is not None:
        given = {k for k in ("mem", "mem_per_cpu") if opts.get(k) is not None}
        script_directives(opts, script, merge)
        if given:       # the command line's memory beats the script's, in either spelling
            opts.update({k: None for k in ("mem", "mem_per_cpu") if k not in given})
        opts["name"] = opts.get("name") or script_name
    for key, var in ENV.items():
        opt = "time_" if key == "time" else key
        if opts.get(opt) is None and os.environ.get(var):
            opts[opt] = os.environ[var]
    body = build_body(opts, argv, script, getattr(client, "limits", None))
    reply = client.submit(body)
    if reply.get("test_only"):
        return print_test_only(reply, opts, currency=client.currency)
    if opts["as_json"]:
        echo_json(reply)
    elif opts["parsable"]:
        echo(reply["job_id"])     # sbatch: an array's id alone, which `-d afterok:ID` accepts
    else:
        echo(f"Submitted job {reply['display']}")
    if reply.get("budget_hold") and not opts["as_json"]:
        # --hold-until-budget took a job the budget cannot pay now: say why it will wait.
        echo(f"job {reply['display']} waits (BudgetExhausted): {reply['budget_hold']}", err=True)
    if opts["wait"]:
        from .hot import wait_for_jobs
        sys.exit(wait_for_jobs(client, [str(reply["job_id"])], quiet=True))


def script_directives(opts, script: str, merge) -> None:
    """`#LABQ` lines, else `#SBATCH` lines (translated; what labq ignores is named in one warning)."""
    dirs, what = directives(script), "#LABQ"
    if not dirs and ("#PBS" in script or "#$" in script):
        from . import pbsdirs
        family, tokens = pbsdirs.directives(script)
        if family:
            dirs, ignored, _ = pbsdirs.translate(tokens, family)
            what = {"pbs": "#PBS", "sge": "#$"}[family]
            if ignored:
                echo(f"labq: warning: {what} directives ignored: {' '.join(ignored)}", err=True)
            return merge(opts, dirs, what) if dirs else None
    if not dirs:
        from . import sbatch
        dirs, ignored = sbatch.translate(sbatch.directives(script))
        what = "#SBATCH"
        if ignored:
            echo(f"labq: warning: #SBATCH directives ignored: {' '.join(ignored)}", err=True)
    if dirs:
        merge(opts, dirs, what)


def command(dashdash: bool, args):
    if dashdash:
        if not args:
            raise UsageError("no command after --")
        return list(args), None, None
    if args:
        path = args[0]
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"script {path}: {e.strerror} (to run a command, put it after --)") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"script {path}: not UTF-8 text (byte {e.start})") from None
        return list(args[1:]), text, os.path.basename(path)
    if not sys.stdin.isatty():
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError as e:
            raise UsageError(f"script on stdin: not UTF-8 text (byte {e.start})") from None
        if text.strip():
            return [], text, "stdin"
    raise UsageError("give a command after --, a script file, or a script on stdin")


LIMITS = {"max_time_limit": bounds.DEFAULT_MAX_TIME_LIMIT, "max_array_size": bounds.DEFAULT_MAX_ARRAY,
          "max_request_bytes": bounds.DEFAULT_MAX_REQUEST_BYTES}


def build_body(opts, argv, script, limits: dict | None = None) -> dict:
    """The submit request body from parsed options. Raises UsageError on any bad value, and a
    RefusedError beyond the [scheduler] bounds in `limits` (clientconf.limits; the scheduler checks
    them again: this is feedback)."""
    body = _body(opts, argv, script)
    lim = {**LIMITS, **(limits or {})}
    if "time_limit" in body:
        bounds.time_limit("--time", body["time_limit"], lim["max_time_limit"])
    if "est" in body:
        bounds.time_limit("--est", body["est"], lim["max_time_limit"])
    if "array" in body:
        bounds.array_tasks("--array", *body["array"], lim["max_array_size"])
    size = bounds.encoded_size(body)
    if size > lim["max_request_bytes"]:
        raise RefusedError(f"request: {size} bytes (the script included) is above "
                           f"scheduler.max_request_bytes = {lim['max_request_bytes']}")
    return body


def _body(opts, argv, script) -> dict:
    if opts.get("gres") is not None and opts.get("gpus") is None:
        from . import sbatch
        gres = sbatch.gres(opts["gres"])
        if gres is None:
            raise UsageError(f"--gres: expected gpu[:MODEL]:N, got {opts['gres']!r}")
        opts = {**opts, "gpus": gres[1]}
    model, gpus, nodes = gpus_and_nodes(opts)
    body = {
        "argv": argv, "script": script, "workdir": os.path.abspath(opts.get("chdir") or os.getcwd()),
        "name": opts.get("name") or "", "account": opts.get("account") or "", "project": opts.get("project") or "",
        "qos": opts.get("qos") or "", "budget": opts.get("budget_name") or "",
        "gpus": gpus, "gpu_type": model, "out": opts.get("output") or "", "err": opts.get("error") or "",
        **({"nodes": nodes} if nodes > 1 else {}),
        "test_only": bool(opts.get("test_only")),
        # sbatch's default: the job gets the environment the user submits from (their venv's PATH…)
        **exportenv.capture(opts.get("export"), os.environ),
    }
    if opts.get("cpus") is not None:
        try:
            body["cpus"] = int(opts["cpus"]) if len(str(opts["cpus"])) < 20 else None
        except ValueError:
            body["cpus"] = None
        bounds.integer("--cpus", body["cpus"], 1)
    if opts.get("mem") is not None:
        body["mem"] = units.parse_size(opts["mem"], "--mem")
    _per_cpu_and_tasks(opts, body)
    for key, flag, dest in (("time_", "--time", "time_limit"), ("est", "--est", "est"),
                            ("max_wait", "--max-wait", "max_wait")):
        if opts.get(key) is not None:
            body[dest] = units.parse_duration(opts[key], flag)
    if body.get("time_limit") == 0:
        raise UsageError("--time: must be more than 0")
    _when_options(opts, body)
    _retry_and_limits(opts, body)
    if opts.get("array") is not None:
        body["array"], throttle = parse_array(opts["array"])
        if throttle:
            body["array_throttle"] = throttle
        # SGE_TASK_STEPSIZE/FIRST/LAST in the tasks (worker/batchenv.py): the record keeps no step
        body["env"] = {**body.get("env", {}), "LABQ_SUB_ARRAY_STEP": str(body["array"][2])}
    tags = []
    for t in opts.get("tag") or ():
        k, sep, v = t.partition("=")
        if not sep or not k:
            raise UsageError(f"--tag: expected KEY=VALUE, got {t!r}")
        tags.append([k, v])
    body["tags"] = tags
    return body


def gpus_and_nodes(opts) -> tuple[str, int, int]:
    """(GPU model, GPUs per node, nodes). With -N, `--gpus-per-node` is per node and -G the job's total
    (SLURM's meaning), split evenly; without -N, -G 16 stays one node of 16 GPUs."""
    nodes = 1
    if opts.get("nodes") is not None:
        text = str(opts["nodes"])
        lo, _, hi = text.partition("-")    # sbatch's MIN-MAX: only a fixed count (MIN = MAX) is taken
        if not lo.isdigit() or len(lo) > 6 or (hi and hi != lo):
            raise UsageError(f"--nodes: expected a node count like 2, got {text!r}")
        nodes = bounds.integer("--nodes", int(lo), 1, bounds.MAX_NODES)
    per_node = opts.get("gpus_per_node")
    if per_node is not None:
        if opts.get("gpus") is not None:
            raise UsageError("--gpus-per-node: give either it or --gpus, not both")
        model, gpus = units.parse_gpus(per_node, "--gpus-per-node")
        return model, gpus, nodes
    model, gpus = parse_gpus(opts["gpus"]) if opts.get("gpus") is not None else ("", 0)
    if nodes > 1 and gpus:
        if gpus % nodes:
            raise UsageError(f"--gpus: {gpus} GPUs do not split evenly over {nodes} nodes "
                             f"(give --gpus-per-node N)")
        gpus //= nodes
    return model, gpus, nodes


def _per_cpu_and_tasks(opts, body: dict) -> None:
    """sbatch's --mem-per-cpu (the job's memory: its CPUs × it) and --ntasks-per-node (1 only)."""
    if opts.get("mem_per_cpu") is not None:
        if opts.get("mem") is not None:
            raise UsageError("--mem-per-cpu: give either it or --mem, not both")
        body["mem"] = units.parse_size(opts["mem_per_cpu"], "--mem-per-cpu") * body.get("cpus", 1)
    n = opts.get("ntasks_per_node")
    if n is not None and str(n) != "1":
        raise UsageError(f"--ntasks-per-node: labq starts one task per node, got {str(n)[:20]!r} "
                         "(give 1, and start the per-GPU ranks with torchrun --nproc-per-node)")


def _when_options(opts, body: dict) -> None:
    """When the job may run: start, deadline, dependencies."""
    if opts.get("begin"):
        body["begin"] = parse_begin(opts["begin"])
    if opts.get("deadline"):
        body["deadline"] = parse_begin(opts["deadline"], what="--deadline")
    if opts.get("dependency"):
        from labq.scheduler.jobs.jobspec import parse_dependency
        parse_dependency(opts["dependency"])    # the scheduler parses it again; bad syntax fails here, offline
        body["dependency"] = opts["dependency"]
    if opts.get("kill_on_invalid_dep"):
        body["kill_on_invalid_dep"] = True


def _retry_and_limits(opts, body: dict) -> None:
    """Retries and requeue, preemptibility, the memory limit, hold, the warning signal, checkpoints."""
    if opts.get("retries") is not None:
        from labq.scheduler.jobs.jobspec import MAX_RETRIES
        body["retries"] = bounds.integer("--retries", opts["retries"], 0, MAX_RETRIES)
    if opts.get("retry_on") is not None:
        body["retry_on"] = parse_codes(opts["retry_on"])
    for key in ("requeue", "preemptible"):
        if opts.get(key) is not None:
            body[key] = opts[key]
    if opts.get("requeue_on_timeout"):
        body["requeue_on_timeout"] = True
    if opts.get("mem_limit") is not None:
        body["mem_limit"] = units.parse_size(opts["mem_limit"], "--mem-limit")
    if opts.get("hold"):
        body["hold"] = True
    if opts.get("hold_until_budget"):
        body["hold_until_budget"] = True
    if opts.get("warn_signal"):
        body["signal"] = parse_signal(opts["warn_signal"])
    if opts.get("checkpoint_exit_code") is not None:
        body["checkpoint_exit_code"] = bounds.integer("--checkpoint-exit-code", opts["checkpoint_exit_code"], 1, 255)


def print_test_only(reply, opts, *, currency: str):
    if opts["as_json"]:
        return echo_json(reply)
    rate = units.fmt_money(round(reply["cost_per_hour"] * units.MICRO), currency=currency)
    echo(f"forecast: {reply['forecast_text']} at {rate}/h for the time limit")
    for b in reply["budgets"]:
        m = lambda v, unit=b["unit"]: units.fmt_money(round(v * units.MICRO), unit, currency=currency)   # noqa: E731
        echo(f"budget {b['budget']}: commits {m(b['forecast'])}, available after: {m(b['available_after'])}")
    est = reply.get("estimate")
    if est:
        echo(f"estimated run time {units.fmt_duration(est['seconds'])} ({est['basis']})" if est["seconds"]
             else f"estimated run time: none yet ({est['basis']})")
    echo(f"verdict: {reply['verdict']}")
    start = reply.get("expected_start")
    if start is not None and not reply.get("starts_now"):
        import time
        echo(f"expected start: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start))} "
                   f"(from running jobs' {reply.get('start_from', 'time limits')})")
    elif start is None and not reply.get("starts_now"):
        echo("expected start: unknown (no reservation could be computed)")
