"""`labq plan`: what-if for N identical jobs, before anything is submitted."""
import click

from scheduler import units
from scheduler.errors import UsageError
from scheduler.model import Gpu, Job, Node
from scheduler.units import fmt_duration, fmt_money, to_micro

from .common import echo_json, pass_ctx
from .submit import parse_gpus


def parse_nodes(text: str, model: str = "fake") -> tuple[Node, ...]:
    """`COUNTxGPUS[:CPUS[:MEM]]`, comma-separated groups: `1x4:16:64G`, `8x4`, `2x8:64:512G,4x0:32:128G`."""
    nodes = []
    for group in text.split(","):
        try:
            count, _, rest = group.strip().partition("x")
            parts = rest.split(":")
            gpus, cpus = int(parts[0]), int(parts[1]) if len(parts) > 1 else 16
            mem = units.parse_size(parts[2]) if len(parts) > 2 else 64 << 30
            count = int(count)
        except (ValueError, IndexError, UsageError):
            raise UsageError(f"--nodes: expected COUNTxGPUS[:CPUS[:MEM]] like 1x4:16:64G, got {group!r}") from None
        for _ in range(count):
            i = len(nodes)
            nodes.append(Node(f"n{i}", cpus, mem, cpus, tuple(Gpu(f"GPU-{i}-{g}", g, model) for g in range(gpus))))
    return tuple(nodes)


@click.command("plan")
@click.option("--jobs", "count", type=int, required=True, help="How many identical jobs.")
@click.option("-G", "--gpus", default="0", help="GPUs per job: N or MODEL:N.")
@click.option("-c", "--cpus", type=int, default=1, help="CPUs per job.")
@click.option("--mem", default="0", help="Memory per job, like 12G.")
@click.option("-t", "--time", "time_", required=True, help="Time limit per job.")
@click.option("--nodes", help="The cluster, COUNTxGPUS[:CPUS[:MEM]] (default: the registered nodes).")
@click.option("--budget", help="A configured budget's name, or an amount in the currency.")
@click.option("-q", "--qos", default="normal")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def plan(ctx, count, gpus, cpus, mem, time_, nodes, budget, qos, as_json):
    """Concurrency per resource, waves, makespan, cost and what is left of the budget."""
    from scheduler.whatif import what_if
    cfg = ctx.cfg
    if count < 1 or cpus < 1:
        raise UsageError("--jobs and --cpus must be at least 1")
    model, n = parse_gpus(gpus)
    job = Job(id=0, user="plan", account="", gpus=n, gpu_type=model, cpus=cpus, mem=units.parse_size(mem, "--mem"),
              time_limit=units.parse_duration(time_, "--time"), qos=qos)
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
    click.echo(f"cost: {fmt_money(w.cost)} for {count} jobs")
    if limit is not None:
        click.echo(f"budget: {fmt_money(limit)}, left after: {fmt_money(w.budget_remaining)}; warn at "
                   + ", ".join(f"{f:.0%} = {fmt_money(a)}" for f, a in w.warn_levels))


def _budget(cfg, text):
    if not text:
        return None, (0.7, 0.9)
    b = next((b for b in cfg.budgets if b.name == text), None)
    if b is not None:
        if b.unit != "usd":
            raise UsageError(f"--budget: {b.name} is in {b.unit}; plan reports money")
        return b.limit, b.warn
    return to_micro(text.lstrip("$"), "--budget"), (0.7, 0.9)
