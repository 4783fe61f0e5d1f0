"""`labq plan`: what-if for N identical jobs, or a list of different ones, before anything is submitted."""
import os
from functools import partial

import click

from labq.scheduler import units
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.model import Job
from labq.scheduler.units import fmt_duration, fmt_money, to_micro

from .common import pass_ctx
from .out import echo_json
from .simulate import parse_nodes
from .subcore import gpus_and_nodes


@click.command("plan")
@click.option("--jobs", "count", type=int, help="How many identical jobs (with -G, -c, --mem, -t).")
@click.option("--file", "path", metavar="JOBS.csv", help="A list of different jobs, replayed by the simulator (see above).")
@click.option("-G", "--gpus", help="GPUs per job, N or MODEL:N (with -N the job's total, as `sub -N` and "
                                  "SLURM read it).  [default: 0]")
@click.option("--gpus-per-node", help="GPUs on each node of a multi-node job: N or MODEL:N.")
@click.option("-N", "--job-nodes", type=int, help="Nodes per job (a multi-node job; -c, --mem per node).  [default: 1]")
@click.option("-c", "--cpus", type=int, help="CPUs per job.  [default: 1]")
@click.option("--mem", help="Memory per job, like 12G.  [default: 0]")
@click.option("-t", "--time", "time_", help="Time limit per job (required with --jobs).")
@click.option("--nodes", help="The cluster, COUNTxGPUS[:CPUS[:MEM[:MODEL]]] (default: the registered nodes).")
@click.option("--budget", help="A configured budget's name (its limit), or an amount in the currency.")
@click.option("-q", "--qos", default="normal", help="The QoS of --jobs (a --file gives its own).")
@click.option("--progress/--no-progress", default=None, help="--file: a progress bar on stderr (default: when it is a terminal).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def plan(ctx, count, path, gpus, gpus_per_node, cpus, mem, time_, job_nodes, nodes, budget, qos, progress, as_json):
    """Concurrency per resource, waves, makespan, cost and what is left of the budget.

    With --jobs N: N identical jobs, by arithmetic (every job uses its whole limit).

    With --file JOBS.csv: a list of different jobs, all submitted now, replayed through the
    scheduler's own plan() by the simulator (as `labq simulate` does), with the same report plus
    what is left of the budget. A CSV with a header; only `time` is required:

    \b
      count  how many such jobs            (default 1)
      gpus   N or MODEL:N                  (default 0)
      cpus   CPUs per job                  (default 1)
      mem    memory per job, like 12G      (default 0)
      time   time limit: 2h, 90 (minutes), 1:30:00, 2-0
      est    how long each job runs        (default: its whole time limit)
      name   a label
      qos    a QoS class                   (default normal)
      nodes  nodes per job (a multi-node job: gpus, cpus, mem per node; default 1)

    \b
      count,gpus,cpus,mem,time,name
      12,1,4,12G,2h,sweep
      2,A100:4,32,128G,1-0,pretrain
    """
    from labq.scheduler.whatif import what_if
    cfg = ctx.cfg
    if path is not None:
        if count is not None or any(v is not None for v in (gpus, gpus_per_node, cpus, mem, time_, job_nodes)):
            raise UsageError("--file: the jobs come from the file; drop --jobs, -G, -c, --mem, -N and -t")
        return _plan_file(ctx, path, nodes, budget, progress, as_json)
    if count is None or time_ is None:
        raise UsageError("give --jobs N with -t TIME (and -G, -c, --mem), or --file JOBS.csv")
    cpus, mem = 1 if cpus is None else cpus, mem or "0"
    if count < 1 or cpus < 1 or not 1 <= (job_nodes or 1) <= 1024:
        raise UsageError("--jobs and --cpus must be at least 1, -N from 1 to 1024")
    # -G and --gpus-per-node as `labq sub` reads them: with -N, -G is the job's total, split evenly
    model, n, _ = gpus_and_nodes({"gpus": gpus, "gpus_per_node": gpus_per_node, "nodes": job_nodes})
    job = Job(id=0, user="plan", account="", gpus=n, gpu_type=model, cpus=cpus, mem=units.parse_size(mem, "--mem"),
              time_limit=units.parse_duration(time_, "--time"), qos=qos, nodes=job_nodes or 1)
    cluster = parse_nodes(nodes) if nodes else ctx.client.nodes()
    if not cluster:
        raise UsageError("no nodes: give --nodes COUNTxGPUS[:CPUS[:MEM]] or start a worker")
    limit, warn = _budget(cfg, budget)
    w = what_if(cluster, job, count, cfg, limit, warn)
    if as_json:
        return echo_json(w.as_json())
    c = w.concurrency
    click.echo("concurrency: " + ", ".join(f"{k} {'∞' if v is None else v}" for k, v in c.items() if k != "overall")
               + f" → {c['overall']} at once (bound by {w.binding})")
    click.echo(f"waves: {w.waves}   makespan: {fmt_duration(w.makespan_s)} (if every job uses its whole limit)")
    m = partial(fmt_money, currency=cfg.rates.currency)
    click.echo(f"cost: {m(w.cost)} for {count} jobs")
    if limit is not None:
        click.echo(f"budget: {m(limit)}, left after: {m(w.budget_remaining)}; warn at "
                   + ", ".join(f"{f:.0%} = {m(a)}" for f, a in w.warn_levels))


def _plan_file(ctx, path, nodes, budget, progress, as_json):
    from labq.scheduler.whatif import PLAN_BUDGET, plan_file

    from .simulate import cluster, progress_for, report_lines
    cfg = ctx.cfg
    named = amount = None
    if budget:
        b = next((b for b in cfg.budgets if b.name == budget), None)
        if b is not None:
            named = b.name
        else:
            amount = to_micro(budget.lstrip("$€£¥"), "--budget")
    res, rep = plan_file(path, cluster(ctx, nodes, None), cfg, named, amount, progress_for(progress, "planning"))
    rep = {"trace": os.path.basename(path), "policy": "config", "config": _describe(cfg), **rep}
    name = named or (PLAN_BUDGET if amount is not None else None)
    if name:
        b = rep["budgets"][name]
        warn = next((x.warn for x in res.cfg.budgets if x.name == name), ())
        rep["budget"] = {"name": name, **b, "held_jobs": rep["held_by_budget"]["jobs"]}
        # the keys `labq plan --jobs --json` has for the budget (DESIGN §8)
        rep["budget_remaining"] = b["left"]
        rep["warn_levels"] = [{"fraction": f, "amount": round(b["limit"] * f, 6)} for f in warn]
    if as_json:
        return echo_json(rep)
    for line in report_lines(rep):
        click.echo(line)
    if name:
        b = rep["budget"]
        amount = ((lambda v: fmt_money(round(v * 1e6), currency=cfg.rates.currency)) if b["unit"] == "usd"
                  else (lambda v: f"{v:,.3f} {b['unit'].replace('_', '-')}"))
        click.echo(f"{'budget left':<15}{amount(b['left'])} of {amount(b['limit'])} ({name})"
                   + (f"; {b['held_jobs']:,} jobs waited for it" if b["held_jobs"] else ""))


def _describe(cfg) -> str:
    from labq.scheduler.sim.policies import describe
    return describe(cfg)


def _budget(cfg, text):
    if not text:
        return None, (0.7, 0.9)
    b = next((b for b in cfg.budgets if b.name == text), None)
    if b is not None:
        if b.unit != "usd":
            raise UsageError(f"--budget: {b.name} is in {b.unit}; plan reports money")
        return b.limit, b.warn
    return to_micro(text.lstrip("$€£¥"), "--budget"), (0.7, 0.9)
