"""`labq simulate TRACE.csv`: replay a workload through the scheduler's own plan() on a virtual
clock (scheduler/sim/), and report what it did. Also the report's text form, which `labq plan
--file` prints too."""
import math
import os
import sys
import time

import click

from labq.scheduler import units
from labq.scheduler.errors import LabqError, UsageError
from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.units import fmt_duration, fmt_money

from . import simcompare
from .common import pass_ctx
from .out import echo_json


def parse_nodes(text: str, model: str = "fake", cpus: int | None = None) -> tuple[Node, ...]:
    """`COUNTxGPUS[:CPUS[:MEM[:MODEL]]]`, comma-separated groups: `1x4:16:64G`, `8x4`,
    `2x8:64:512G:A100,4x0:32:128G`. A group without CPUS gets `cpus` (default 16), without MEM 64G,
    without MODEL `model`; each node has a job slot per CPU."""
    nodes = []
    for group in text.split(","):
        try:
            count, x, rest = group.strip().partition("x")
            parts = rest.split(":")
            if not x or (len(parts) > 3 and not ":".join(parts[3:])):
                raise ValueError(group)
            gpus, n_cpus = int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1] else (cpus or 16)
            mem = units.parse_size(parts[2]) if len(parts) > 2 and parts[2] else 64 << 30
            kind = ":".join(parts[3:]) or model
            count = int(count)
            if count < 1 or gpus < 0 or n_cpus < 1:
                raise ValueError(group)
        except (ValueError, IndexError, UsageError):
            raise UsageError(f"--nodes: expected COUNTxGPUS[:CPUS[:MEM[:MODEL]]] like 1x4:16:64G (count ≥ 1, "
                             f"CPUs ≥ 1), got {group!r}") from None
        for _ in range(count):
            i = len(nodes)
            nodes.append(Node(f"n{i}", n_cpus, mem, n_cpus, tuple(Gpu(f"GPU-{i}-{g}", g, kind) for g in range(gpus))))
    return tuple(nodes)


def cluster(ctx, nodes: str | None, cpus: str | None):
    """The nodes of --nodes (with --cpus per node where a group gives none), one CPU machine of
    --cpus processors, or else the registered nodes."""
    per_node = _int(cpus, "--cpus", 1) if cpus is not None else None
    if nodes:
        return parse_nodes(nodes, cpus=per_node)
    if per_node is not None:
        return parse_nodes(f"1x0:{per_node}")
    from labq.scheduler.store.faults import ERRORS
    try:
        found = ctx.client.nodes()
    except (LabqError, *ERRORS) as e:
        raise UsageError(f"no --nodes given and the registered nodes cannot be read ({e}): "
                         "give --nodes COUNTxGPUS[:CPUS[:MEM]] or --cpus N") from None
    if not found:
        raise UsageError("no nodes: give --nodes COUNTxGPUS[:CPUS[:MEM]] or --cpus N, or start a worker")
    return found


def _int(text, what: str, lo: int) -> int:
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{what}: expected a whole number, got {text!r}") from None
    if v < lo:
        raise UsageError(f"{what}: expected a whole number ≥ {lo}, got {v}")
    return v


def _float(text, what: str) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{what}: expected a number, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise UsageError(f"{what}: expected a number > 0, got {text!r}")
    return v


def need_matplotlib(path: str | None) -> None:
    """Fail before the replay, not after it, when --plot cannot be drawn or written."""
    if not path:
        return
    where = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(where):
        raise UsageError(f"--plot: no such directory: {where}")
    if not os.access(where, os.W_OK):
        raise UsageError(f"--plot: cannot write in {where}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib, the optional extra `plot`: pip install 'labq[plot]'") from None


class Progress:
    """A one-line bar on stderr, redrawn at most ten times a second."""

    def __init__(self, label: str):
        self.label, self.last = label, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac:4.0%} {done:,}/{total:,} jobs")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def progress_for(flag: bool | None, label: str):
    on = sys.stderr.isatty() if flag is None else flag
    return Progress(label) if on else None


@click.command("simulate")
@click.argument("trace", metavar="TRACE.csv")
@click.option("--nodes", metavar="SPEC", help="The cluster: COUNTxGPUS[:CPUS[:MEM[:MODEL]]] groups, comma-separated, "
                                             "e.g. 8x4 or 2x8:64:512G:A100,4x0:32:128G (default: the registered nodes).")
@click.option("--cpus", metavar="N", help="CPUs (and job slots) per node for --nodes groups that give none (default 16). "
                             "Alone: one CPU-only machine of N processors (--cpus 100 = --nodes 1x0:100).")
@click.option("--policy", metavar="NAME", default="config", show_default=True,
              help="fifo | priority | backfill | fairshare | learned | sjf-oracle (true run times: an oracle bound) | config (the configuration as it is).")
@click.option("--backfill-depth", metavar="N", help="Override scheduler.backfill_depth (backfill: default 1).")
@click.option("--extra", metavar="FILE.csv", help="A CSV keyed by job_id whose columns join the trace's (like kth_sp2_1996_extra.csv).")
@click.option("--time-column", metavar="COLUMN", help="The column (trace or --extra) with each job's time limit in seconds "
                                    "(default: time_limit_s when the trace has it).")
@click.option("--time-factor", metavar="F", default="1.0", show_default=True,
              help="Without a time column (or where it is empty): time limit = duration × this.")
@click.option("--gpus-from-cpus", is_flag=True, help="Replay a CPU trace on a GPU pool: each job asks for its cpus as GPUs, and 1 CPU.")
@click.option("--plot", "plot_path", metavar="FILE.png",
              help="Draw utilisation over time and a Gantt chart of the busiest nodes (needs matplotlib: pip install 'labq[plot]').")
@click.option("--progress/--no-progress", default=None, help="A progress bar on stderr (default: when stderr is a terminal).")
@click.option("--enforce-queue-limits", is_flag=True,
              help="Refuse submits beyond scheduler.max_pending(_per_user) as the daemon would (off: the trace's "
                   "scheduler had no such bound).")
@click.option("--compare", metavar="P1,P2,...",
              help="Replay under each of these policies (e.g. fifo,backfill,learned): one table of makespan, "
                   "utilisation, wait, JCT, bounded slowdown and cost; with --plot their wait distributions.")
@click.option("--group-nodes", metavar="FILE.csv",
              help="Per-group capacity: a CSV group,nodes (e.g. vc-a,4x8:64:512G); each group's jobs (account, "
                   "else the trace's group) run only on its own nodes, all groups replayed together.")
@click.option("--sort", "sort_rows", is_flag=True,
              help="Replay a trace whose rows are not in submit order, sorted by submit time (without it such a "
                   "trace is refused, naming the first row out of order).")
@click.option("--drop-too-large", is_flag=True,
              help="Replay without the jobs no node (or set of nodes) of the cluster could ever hold: each is "
                   "refused at submit as `labq sub` would refuse it and counted under `refused` (capacity). "
                   "Without it such a job is refused, naming its row, the column and the cluster's size.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def simulate(ctx, trace, nodes, cpus, policy, backfill_depth, extra, time_column, time_factor, gpus_from_cpus,
             plot_path, progress, enforce_queue_limits, compare, group_nodes, sort_rows, drop_too_large, as_json):
    """Replay a workload trace (docs/internals.md, "The simulator") through the scheduler's own plan()
    on a virtual clock: makespan, utilisation, wait, bounded slowdown, completion time, cost,
    refusals, budget holds, preemptions and lost work.

    TRACE.csv has a header and at least job_id, submit_s (seconds from the trace's start) and
    duration_s; it may also give gpus, cpus, mem_gib, user, group (the account), status,
    time_limit_s, account, qos and gpu_type. Rates, budgets, accounts and QoS come from the config.

    \b
    The KTH SP2 log on its 100 processors, each job's requested time as its limit:
      labq simulate kth_sp2_1996.csv --cpus 100 --extra kth_sp2_1996_extra.csv \\
          --time-column req_time_s --policy backfill"""
    from labq.scheduler.sim import engine, metrics, policies, trace as simtrace
    need_matplotlib(plot_path)
    _say_which_config(ctx.cfg, as_json)
    depth = _int(backfill_depth, "--backfill-depth", 0) if backfill_depth is not None else None
    names = simcompare.policies(compare) if compare is not None else None
    cfg, hooks = policies.resolve(ctx.cfg, policy, depth)
    jobs = simtrace.load(trace, extra=extra, time_column=time_column, time_factor=_float(time_factor, "--time-factor"),
                    cpus_as_gpus=gpus_from_cpus, sort=sort_rows)
    if not jobs:
        raise UsageError(f"trace: {trace}: no jobs")
    if group_nodes and (nodes or cpus):
        raise UsageError("--group-nodes gives the cluster: leave out --nodes and --cpus")
    from labq.scheduler.sim import groups as simgroups
    groups = simgroups.read(group_nodes, parse_nodes) if group_nodes else None
    cluster_nodes = tuple(n for g in groups.values() for n in g) if groups else cluster(ctx, nodes, cpus)
    fits(trace, jobs, groups, cluster_nodes, "cpus" if gpus_from_cpus else "gpus", drop_too_large)
    if names:
        rows = simcompare.run(ctx, names, jobs, cluster_nodes, depth, lambda label: progress_for(progress, label),
                              enforce_queue_limits, groups)
        if plot_path:
            from .simplot import plot_waits
            plot_waits(rows, plot_path, f"{os.path.basename(trace)}: wait by policy")
        return simcompare.show(os.path.basename(trace), rows, as_json, plot_path)
    t0 = time.monotonic()
    if groups:
        res = simgroups.replay(jobs, groups, cfg, lambda: policies.resolve(ctx.cfg, policy, depth)[1],
                               progress=progress_for(progress, "replaying"), queue_limits=enforce_queue_limits)
    else:
        res = engine.simulate(jobs, cluster_nodes, cfg, progress=progress_for(progress, "replaying"),
                           queue_limits=enforce_queue_limits, hooks=hooks)
    rep = metrics.report(res)
    rep = {"trace": os.path.basename(trace), "policy": policy, "config": policies.describe(cfg) + (f" — {hooks.label}" if hooks and hooks.label else ""), **rep,
           "config_file": _config_file(ctx.cfg), "wall_s": round(time.monotonic() - t0, 2)}
    if plot_path:
        from .simplot import plot
        plot(res, plot_path, f"{os.path.basename(trace)} — {policy}")
    if as_json:
        return echo_json(rep)
    for line in report_lines(rep):
        click.echo(line)
    if plot_path:
        click.echo(f"{'plot':<15}{plot_path}")


def _config_file(cfg) -> str | None:
    """The file whose rates, accounts, caps, budgets and QoS the replay applies (None: built-in defaults)."""
    return None if cfg.source.startswith("<") or cfg.source == os.devnull else cfg.source


def _say_which_config(cfg, as_json: bool) -> None:
    """A replay of someone else's cluster under this machine's caps and budgets changes its makespan
    threefold without a word (issue 41): where the system's config applies without being named
    (no --config, no $LABQ_CONFIG), say so on stderr before the replay. The report names the file
    always (`config file`, `config_file`)."""
    from labq.scheduler.settings.clientconf import DEFAULT_PATH
    if as_json or cfg.source != DEFAULT_PATH:
        return
    capped = any(a.max_running or a.max_gpus or a.max_cpus or a.max_submit for a in cfg.accounts)
    limits = [what for what, there in (("budgets", cfg.budgets), ("account caps", capped)) if there]
    click.echo(f"labq simulate: applying this machine's {DEFAULT_PATH}" + (f" ({' and '.join(limits)} included)" if limits else "")
               + "; --config /dev/null replays under built-in defaults", err=True)


def fits(trace: str, jobs, groups, nodes, gpus_column: str, drop: bool) -> None:
    """Before any replay: every job's group has nodes, and (unless --drop-too-large) the nodes could
    hold each job (sim/fit.py: one line naming the row, the column and the cluster's size)."""
    from labq.scheduler.sim import fit, groups as simgroups
    parts = simgroups.split(jobs, groups) if groups else {}
    if drop:
        return
    if not groups:
        return fit.check(trace, jobs, nodes, gpus_column)
    for g, idx in parts.items():
        fit.check(trace, [jobs[i] for i in idx], groups[g], gpus_column, f"group {g}")


def report_lines(rep: dict) -> list[str]:
    """The report as aligned lines (labq simulate, labq plan --file)."""
    c, j = rep["cluster"], rep["jobs"]
    money = lambda v: fmt_money(round(v * 1e6), currency=rep["currency"])   # noqa: E731
    w = rep["wait_s"]
    util = rep["utilisation"]
    lines = []
    if "trace" in rep:
        rounded = [f"{j[k + '_rounded_up']:,} asked for a fraction of a {what}: rounded up to whole {what}s"
                   for k, what in (("gpus", "GPU"), ("cpus", "CPU")) if j.get(k + "_rounded_up")]
        lines.append(("trace", f"{rep['trace']}: {j['trace']:,} jobs" + (f" ({'; '.join(rounded)})" if rounded else "")))
    if "config_file" in rep:
        lines.append(("config file", rep["config_file"] or "none (built-in defaults)"))
    lines += [
        ("cluster", f"{c['nodes']:,} node{'s' * (c['nodes'] != 1)}: {c['gpus']:,} GPUs, {c['cpus']:,} CPUs"),
        ("policy", f"{rep['policy']}: {rep['config']}"),
        ("jobs", f"{j['completed']:,} completed, {j['timeout']:,} timed out, {j['expired']:,} expired, "
                 f"{j['never_started']:,} never started" + (f", {j['requeued_unfinished']:,} requeued and not finished"
                                                           if j["requeued_unfinished"] else "")),
        ("makespan", fmt_duration(rep["makespan_s"])),
        ("utilisation", "n/a" if util is None else f"{util:.1%} of {'GPUs' if rep['utilisation_of'] == 'gpus' else 'CPUs'}"),
        ("wait", f"mean {fmt_duration(w['mean'])}, p50 {fmt_duration(w['p50'])}, p95 {fmt_duration(w['p95'])}"),
        ("slowdown", f"mean {rep['bounded_slowdown']['mean']:,.2f} (bounded at {rep['bounded_slowdown']['bound_s']:g} s)"),
        ("completion", f"mean {fmt_duration(rep['completion_time_s']['mean'])} (submit to end)"),
        ("cost", money(rep["cost"])),
    ]
    for name, b in rep["budgets"].items():
        amount = money if b["unit"] == "usd" else (lambda v, u=b["unit"]: f"{v:,.3f} {u.replace('_', '-')}")
        lines.append(("budget", f"{name}: spent {amount(b['spent'])} of {amount(b['limit'])}, left {amount(b['left'])}"
                                + (f" (in the last of {b['periods']} {b['period']}s)" if b["period"] != "none" else "")))
    r, h = rep["refused"], rep["held_by_budget"]
    kinds = ", ".join(f"{k} {n:,}" for k, n in r["by_kind"].items())
    lines.append(("refused", f"{r['count']:,}" + (f" ({kinds}; first: {r['first']})" if r["count"] else "")))
    lines.append(("held by budget", f"{h['jobs']:,} jobs" + (f", {h['never_started']:,} never started" if h["never_started"] else "")))
    for key, label in (("preemptions", "preemptions"), ("timeouts", "timeouts")):
        p = rep[key]
        jobs = f" ({p['jobs']:,} jobs)" if p.get("jobs") else ""
        lines.append((label, f"{p['count']:,}{jobs}, lost work {fmt_duration(p['lost_work_s'])}"
                             + (f" ({p['lost_gpu_hours']:,.1f} GPU-h)" if p["lost_gpu_hours"] else "")
                             + (f" ({p['lost_cpu_hours']:,.1f} CPU-h)" if not p["lost_gpu_hours"] and p["lost_cpu_hours"] else "")))
    lines.append(("replay", f"{rep['plan']['calls']:,} plan() passes, {rep['plan']['skipped']:,} skipped"
                            + (f", {rep['wall_s']:.1f} s" if "wall_s" in rep else "")))
    return [f"{k:<15}{v}" for k, v in lines]
