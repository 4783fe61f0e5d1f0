"""Why `labq sub` refuses a job: no node could ever hold it, no node runs its user's jobs, a cap it
alone exceeds, or a budget that could never pay for it. Pure: the nodes and the config decide."""
from collections.abc import Iterable, Sequence

from ..jobs.model import Job, Node
from ..settings.config import Config
from ..units import fmt_size
from . import capacity
from .budget import never_affordable
from .quota import over_alone


def request_text(job: Job) -> str:
    """The request as a refusal or a reason names it."""
    gpu = f"{job.gpus}x{job.gpu_type or 'GPU'}, " if job.gpus else ""
    return f"{gpu}{job.cpus} CPUs, {fmt_size(job.mem)} and a slot"


def refusal(job: Job, nodes: Sequence[Node], cfg: Config, spent: dict[str, int] | None = None,
            running: Iterable[Job] = ()) -> str | None:
    """Why the job must be refused at submit: no node could ever hold it, a cap is exceeded by the
    job alone (or now, with on_limit = "refuse", counting `running`), or a budget could never pay
    for it (`spent`: settled spending, which a budget without periods never gets back)."""
    why, unpaid = refusals(job, nodes, cfg, spent, running)
    return why or unpaid


def refusals(job: Job, nodes: Sequence[Node], cfg: Config, spent: dict[str, int] | None = None,
             running: Iterable[Job] = ()) -> tuple[str | None, str | None]:
    """`refusal` in two: (why no budget matters, why a budget could never pay as things are now).
    The second waits for room instead with --hold-until-budget (SLURM's DenyOnLimit off): a new
    period, a raised limit or an override can change it; nothing changes the first."""
    why, cheapest = refusal_of_shape(job, nodes, cfg, running)
    return why, None if why else never_affordable(job, cheapest, cfg, spent)


# Shapes a Refusals keeps between changes of the nodes or the config (a lab submits a few).
SHAPES = 256


class Refusals:
    """`refusals` for the daemon's stream of submits: what `refusal_of_shape` says of a request's
    shape (its GPUs, model, CPUs, memory, nodes, user and account: all it reads of the job) is kept
    while the nodes and the config are the same objects (both are replaced, never changed, when
    they change), so a submit asks the nodes once per shape, not each time (~5 us a submit on one
    node in the 100-client drain, more with each node; issue 39). A shape whose account or user
    cap has on_limit = "refuse" counts the running jobs: asked afresh each time. The budgets'
    part (`never_affordable`, which reads `spent`) is asked each time."""

    def __init__(self) -> None:
        self.nodes: Sequence[Node] | None = None
        self.cfg: Config | None = None
        self.shapes: dict[tuple[object, ...], tuple[str | None, str]] = {}

    def __call__(self, job: Job, nodes: Sequence[Node], cfg: Config, spent: dict[str, int] | None = None,
                 running: Iterable[Job] = ()) -> tuple[str | None, str | None]:
        if nodes is not self.nodes or cfg is not self.cfg:
            self.nodes, self.cfg, self.shapes = nodes, cfg, {}
        key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.nodes, job.user, job.account)
        got = self.shapes.get(key)
        if got is None:
            got = refusal_of_shape(job, nodes, cfg, running)
            if not _counts_running(job, cfg):
                if len(self.shapes) >= SHAPES:
                    self.shapes.clear()
                self.shapes[key] = got
        why, cheapest = got
        return why, None if why else never_affordable(job, cheapest, cfg, spent)


def _counts_running(job: Job, cfg: Config) -> bool:
    """Whether `over_alone` reads the running jobs for `job`: a cap of its account or user refuses
    what is over it now."""
    return any(c is not None and c.on_limit == "refuse" for c in (cfg.account_named(job.account),
                                                                  cfg.user_named(job.user)))


def refusal_of_shape(job: Job, nodes: Sequence[Node], cfg: Config,
                     running: Iterable[Job] = ()) -> tuple[str | None, str]:
    """`refusal` but for the budgets, which it asks last: (why, or None; the cheapest GPU model of
    the nodes that could hold the job, for never_affordable). It reads only the job's request
    (GPUs, model, CPUs, memory, nodes), user and account: a replay asks it once per such key."""
    holders = [n for n in nodes if capacity.could_ever_hold(job, n)]
    if not holders:
        biggest = max(nodes, key=lambda n: (len(n.gpus), n.cpus, n.mem), default=None)
        have = (f"largest node {biggest.name} has {len(biggest.gpus)} GPUs, {biggest.cpus} CPUs, "
                f"{biggest.mem >> 30}G" if biggest else "no node is registered")
        each = " on each node" if job.nodes > 1 else ""
        return f"no node could ever hold {request_text(job)}{each}: {have}", ""
    if not any(n.runs_jobs_of(job.user) for n in holders):
        return _who_runs(job.user, holders), ""
    if job.nodes > 1:
        mine = [n for n in holders if n.runs_jobs_of(job.user)]
        if len(mine) < job.nodes:
            return (f"no set of {job.nodes} nodes could ever hold {request_text(job)} on each node: "
                    f"{len(mine)} node(s) could ({', '.join(sorted(n.name for n in mine))})"), ""
    capped = over_alone(job, cfg, running)
    if capped:
        return capped, ""
    models = dict.fromkeys(g.model for n in holders for g in n.gpus if not job.gpu_type or g.model == job.gpu_type)
    cheapest = min(models, key=cfg.rates.gpu_rate, default="")
    return None, cheapest


def _who_runs(user: str, nodes: Iterable[Node]) -> str:
    if user == "root":
        return ("no node runs jobs as root: every worker has worker.allow_root = false "
                "(set it to true on a node, or submit as another user)")
    agents = sorted({n.runs for n in nodes})
    return (f"no node runs jobs as {user}: the workers run as {', '.join(agents)}, not root, and can run only "
            f"their own user's jobs (run the worker as root, or set worker.run_as = \"self\")")
