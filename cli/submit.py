"""`labq sub`: argv after `--`, a script with `#LABQ` directives, or a script on stdin.

Precedence: command-line flags, then environment (LABQ_SUB_ACCOUNT, LABQ_SUB_QOS, LABQ_SUB_TIME),
then the script's `#LABQ` lines (read up to the first line that is neither blank nor a comment), or,
when it has none, its `#SBATCH` lines (cli/sbatch.py).
"""
import os
import shlex
import sys

import click

from labq.scheduler import exportenv, units, when
from labq.scheduler.errors import UsageError
from labq.scheduler.jobspec import parse_dependency

from . import sbatch
from .common import echo_json, pass_ctx

ENV = {"account": "LABQ_SUB_ACCOUNT", "qos": "LABQ_SUB_QOS", "time": "LABQ_SUB_TIME"}


class SubCommand(click.Command):
    """Remembers whether `--` was given: after it, the arguments are a command, not a script."""

    def parse_args(self, ctx, args):
        ctx.meta["dashdash"] = "--" in args
        return super().parse_args(ctx, args)


def parse_gpus(text) -> tuple[str, int]:
    return units.parse_gpus(text, "--gpus")


def parse_array(text) -> tuple[list[int], int | None]:
    """`1-12`, `1-12:2`, `5`, `1-12%4` → ([lo, hi, step], throttle or None)."""
    s, percent, pct = str(text).partition("%")
    throttle = None
    if percent:
        try:
            throttle = int(pct)
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
    """A time as sbatch --begin takes it (scheduler/when.py) → epoch seconds."""
    import time
    return when.parse(text, time.time() if now is None else now, what)


def parse_codes(text) -> list[int]:
    """`3,75` → [3, 75]: exit codes 1–255."""
    try:
        codes = [int(c) for c in str(text).split(",")]
    except ValueError:
        raise UsageError(f"--retry-on: expected exit codes like 3,75, got {text!r}") from None
    if not all(1 <= c <= 255 for c in codes):
        raise UsageError(f"--retry-on: exit codes are 1–255, got {text!r}")
    return codes


def parse_signal(text) -> list:
    """`USR1@60`, `SIGUSR2@2m`, `@90` (USR1) → [name, seconds]."""
    name, at, when = str(text).rpartition("@")
    if not at:
        raise UsageError(f"--signal: expected [SIG]@SECS like USR1@60, got {text!r}")
    name = (name.upper().removeprefix("SIG") or "USR1")
    return [name, units.parse_duration(when, "--signal", bare_unit=1)]


def directives(script: str) -> list[str]:
    out = []
    for line in script.splitlines()[1 if script.startswith("#!") else 0:]:
        s = line.strip()
        if s.startswith("#LABQ"):
            out += shlex.split(s[len("#LABQ"):])
        elif s and not s.startswith("#"):
            break
    return out


OPTIONS = [
    click.option("-J", "--name", "--job-name", "name", help="Job name."),
    click.option("-A", "--account", help="Account (team) to charge."),
    click.option("--project", help="Project, for project budgets and reports."),
    click.option("-q", "--qos", help="QoS class (default: normal)."),
    click.option("--budget", "budget_name", help="A named batch budget to charge as well."),
    click.option("-G", "--gpus", help="GPUs: N or MODEL:N."),
    click.option("--gres", help="SLURM's gpu[:MODEL]:N (the same as --gpus [MODEL:]N)."),
    click.option("-c", "--cpus", "--cpus-per-task", "cpus", help="CPUs (default 1)."),
    click.option("--mem", help="Memory, like 12G (default 0: no reservation)."),
    click.option("-t", "--time", "time_", help="Time limit: 2h, 90 (minutes), 1:30:00, 2-0."),
    click.option("--est", help="Expected runtime (forecast budget mode)."),
    click.option("--max-wait", help="Give up (EX) if not started within this long."),
    click.option("--begin", help="Not before: 16:00, tomorrow, now+30minutes, 2026-12-03T09:00, 30m."),
    click.option("-H", "--hold", is_flag=True, default=None, help="Submit held (labq release ID starts it)."),
    click.option("--deadline", help="End the job (DL) once it could no longer finish by this time (forms of --begin)."),
    click.option("-d", "--dependency", help="afterok:ID[:ID],afternotok:ID,afterany:ID,singleton (',' = all of)."),
    click.option("--kill-on-invalid-dep", is_flag=True, default=None,
                 help="Cancel the job when a dependency can never be satisfied (else it pends)."),
    click.option("--retries", type=int, help="Retry up to N times on node failure and on --retry-on exit codes."),
    click.option("--retry-on", help="Exit codes that are retried (with --retries), comma-separated: 3,75."),
    click.option("--requeue/--no-requeue", default=None, help="Requeue on node failure (default) or end NF."),
    click.option("--requeue-on-timeout", is_flag=True, default=None,
                 help="A timeout after a checkpoint taken in that attempt requeues the job."),
    click.option("--preemptible/--no-preemptible", default=None, help="Override the QoS's preemptibility."),
    click.option("--mem-limit", help="Memory the job may use before it is killed (default: --mem)."),
    click.option("-a", "--array", help="Array: 1-12, 1-12:2, 1-12%4 (at most 4 at once)."),
    click.option("--signal", "warn_signal", help="[SIG]@SECS: send SIG (default USR1) SECS before the time limit."),
    click.option("--checkpoint-exit-code", type=int, help="Exiting with this code requeues the job at once."),
    click.option("-o", "--output", help="stdout pattern (default labq-%j.out; %j %A %a %x %u %r)."),
    click.option("-e", "--error", help="stderr pattern (default: with stdout)."),
    click.option("-D", "--chdir", help="Working directory (default: the current one)."),
    click.option("--export", help="Environment the job gets: ALL (default: yours, now), NONE, or VAR[,VAR=value…]."),
    click.option("--tag", multiple=True, help="K=V tag, repeatable."),
    click.option("--test-only", is_flag=True, default=None, help="Forecast and verdict; submit nothing."),
    click.option("-W", "--wait", is_flag=True, default=None, help="Wait for the job; exit with its code."),
    click.option("--parsable", is_flag=True, default=None, help="Print only the job id."),
    click.option("--json", "as_json", is_flag=True, default=None, help="Print the reply as JSON."),
]


def _with_options(f):
    for opt in reversed(OPTIONS):
        f = opt(f)
    return f


@click.command(cls=SubCommand, context_settings={"ignore_unknown_options": False})
@_with_options
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
@click.pass_context
def sub(cctx, ctx, args, **opts):
    """Submit a job: `labq sub [opts] -- CMD…`, `labq sub SCRIPT [ARGS]`, or a script on stdin."""
    argv, script, script_name = _command(cctx, args)
    if script is not None:
        _script_directives(cctx, opts, script)
        opts["name"] = opts.get("name") or script_name
    for key, var in ENV.items():
        opt = "time_" if key == "time" else key
        if opts.get(opt) is None and os.environ.get(var):
            opts[opt] = os.environ[var]
    body = build_body(opts, argv, script)
    reply = ctx.client.submit(body)
    if reply.get("test_only"):
        return _print_test_only(reply, opts)
    if opts["as_json"]:
        echo_json(reply)
    elif opts["parsable"]:
        click.echo(reply["job_id"])     # sbatch: an array's id alone, which `-d afterok:ID` accepts
    else:
        click.echo(f"Submitted job {reply['display']}")
    if opts["wait"]:
        from .query import wait_for_jobs
        sys.exit(wait_for_jobs(ctx.client, [str(reply["job_id"])], quiet=True))


def _command(cctx, args):
    if cctx.meta.get("dashdash"):
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
        return list(args[1:]), text, os.path.basename(path)
    if not sys.stdin.isatty():
        text = sys.stdin.read()
        if text.strip():
            return [], text, "stdin"
    raise UsageError("give a command after --, a script file, or a script on stdin")


def _script_directives(cctx, opts, script: str) -> None:
    """`#LABQ` lines, else `#SBATCH` lines (translated; what labq ignores is named in one warning)."""
    dirs, what = directives(script), "#LABQ"
    if not dirs:
        dirs, ignored = sbatch.translate(sbatch.directives(script))
        what = "#SBATCH"
        if ignored:
            click.echo(f"labq: warning: #SBATCH directives ignored: {' '.join(ignored)}", err=True)
    _merge_directives(cctx, opts, dirs, what)


def _merge_directives(cctx, opts, dirs, what: str = "#LABQ"):
    if not dirs:
        return
    try:
        sub_ctx = sub.make_context("sub", dirs + ["--", "true"], parent=cctx.parent)
    except click.UsageError as e:
        raise UsageError(f"{what} directive: {e.format_message()}") from None
    for k, v in sub_ctx.params.items():
        if k != "args" and opts.get(k) in (None, ()) and v not in (None, ()):
            opts[k] = v


def build_body(opts, argv, script) -> dict:
    """The submit request body from parsed options. Raises UsageError on any bad value."""
    if opts.get("gres") is not None and opts.get("gpus") is None:
        gres = sbatch.gres(opts["gres"])
        if gres is None:
            raise UsageError(f"--gres: expected gpu[:MODEL]:N, got {opts['gres']!r}")
        opts = {**opts, "gpus": gres[1]}
    model, gpus = parse_gpus(opts["gpus"]) if opts.get("gpus") is not None else ("", 0)
    body = {
        "argv": argv, "script": script, "workdir": os.path.abspath(opts.get("chdir") or os.getcwd()),
        "name": opts.get("name") or "", "account": opts.get("account") or "", "project": opts.get("project") or "",
        "qos": opts.get("qos") or "", "budget": opts.get("budget_name") or "",
        "gpus": gpus, "gpu_type": model, "out": opts.get("output") or "", "err": opts.get("error") or "",
        "test_only": bool(opts.get("test_only")),
        # sbatch's default: the job gets the environment the user submits from (their venv's PATH…)
        **exportenv.capture(opts.get("export"), os.environ),
    }
    if opts.get("cpus") is not None:
        try:
            body["cpus"] = int(opts["cpus"])
        except ValueError:
            raise UsageError(f"--cpus: expected an integer, got {opts['cpus']!r}") from None
        if body["cpus"] < 1:
            raise UsageError(f"--cpus: expected at least 1, got {opts['cpus']!r}")
    if opts.get("mem") is not None:
        body["mem"] = units.parse_size(opts["mem"], "--mem")
    for key, flag, dest in (("time_", "--time", "time_limit"), ("est", "--est", "est"),
                            ("max_wait", "--max-wait", "max_wait")):
        if opts.get(key) is not None:
            body[dest] = units.parse_duration(opts[key], flag)
    if body.get("time_limit") == 0:
        raise UsageError("--time: must be more than 0")
    _run_options(opts, body)
    tags = []
    for t in opts.get("tag") or ():
        k, sep, v = t.partition("=")
        if not sep or not k:
            raise UsageError(f"--tag: expected KEY=VALUE, got {t!r}")
        tags.append([k, v])
    body["tags"] = tags
    return body


def _run_options(opts, body: dict) -> None:
    """When and how the job runs: start and deadline, dependencies, retries and requeue, limits,
    signals, arrays."""
    if opts.get("begin"):
        body["begin"] = parse_begin(opts["begin"])
    if opts.get("deadline"):
        body["deadline"] = parse_begin(opts["deadline"], what="--deadline")
    if opts.get("dependency"):
        parse_dependency(opts["dependency"])    # the scheduler parses it again; bad syntax fails here, offline
        body["dependency"] = opts["dependency"]
    if opts.get("kill_on_invalid_dep"):
        body["kill_on_invalid_dep"] = True
    if opts.get("retries") is not None:
        if opts["retries"] < 0:
            raise UsageError(f"--retries: expected a count ≥ 0, got {opts['retries']}")
        body["retries"] = opts["retries"]
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
    if opts.get("warn_signal"):
        body["signal"] = parse_signal(opts["warn_signal"])
    if opts.get("checkpoint_exit_code") is not None:
        body["checkpoint_exit_code"] = opts["checkpoint_exit_code"]
    if opts.get("array") is not None:
        body["array"], throttle = parse_array(opts["array"])
        if throttle:
            body["array_throttle"] = throttle


def _print_test_only(reply, opts):
    if opts["as_json"]:
        return echo_json(reply)
    click.echo(f"forecast: {reply['forecast_text']} at ${reply['cost_per_hour']:.4f}/h for the time limit")
    for b in reply["budgets"]:
        click.echo(f"budget {b['budget']}: commits {b['forecast']:.4f} {b['unit']}, "
                   f"available after: {b['available_after']:.4f} {b['unit']}")
    click.echo(f"verdict: {reply['verdict']}")
    start = reply.get("expected_start")
    if start is not None and not reply.get("starts_now"):
        import time
        click.echo(f"expected start: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start))} "
                   f"(from running jobs' time limits)")
    elif start is None and not reply.get("starts_now"):
        click.echo("expected start: unknown (no reservation could be computed)")
