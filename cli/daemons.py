"""`labq up`, `labq scheduler`, `labq worker`: the processes, in the foreground."""
import fcntl
import os
import signal
import socket
import sys
import time

import click

from labq.scheduler.errors import RefusedError, UsageError
from labq.scheduler.settings.statedir import state_dir

from . import daemonlog
from .common import pass_ctx, redis_url


def _logging(verbose: bool) -> None:
    daemonlog.setup(verbose)


def _stop_flag():
    stopping = {"now": False}

    def handler(signum, frame):
        stopping["now"] = True
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return lambda: stopping["now"]


@click.command()
@click.option("-v", "--verbose", is_flag=True)
@pass_ctx
def scheduler(ctx, verbose):
    """The scheduler daemon (one is active; a second waits for the leader lease)."""
    _logging(verbose)
    from labq.scheduler.daemon.durability import Durability, default_path
    from labq.scheduler.daemon.loop import Scheduler
    from labq.scheduler.store import login
    cfg = ctx.cfg
    link = login.SchedulerLink(cfg, redis_url(cfg))
    archiver, history = link.history(cfg, ARCHIVE_PASS_S)
    durable = Durability(link.store("durability"), link.url, cfg.allow_volatile,
                         cfg.state_file or default_path(cfg.prefix, link.url))
    sched = Scheduler(None, cfg=cfg, store=link.store(login.scheduler_name()), durable=durable,
                      metrics=_metrics(cfg), archiver=archiver, history=history)
    sched.run(stop=_stop_flag())


def _metrics(cfg):
    """The Prometheus endpoint (scheduler.metrics), listening from now on; None when not set."""
    if not cfg.metrics:
        return None
    from labq.scheduler.daemon.metrics import Metrics
    try:
        return Metrics(cfg.metrics)
    except OSError as e:
        raise UsageError(f"scheduler.metrics: cannot listen on {cfg.metrics}: {e.strerror or e}") from None


# One archive pass holds the scheduler's loop (its next tick waits): a 1,000-job pass took ~0.6 s
# on a loaded 2-core machine (bench/archive_bench.py), so passes are sized to about this long.
ARCHIVE_PASS_S = 0.1


@click.command()
@click.option("-v", "--verbose", is_flag=True)
# `labq up` run by root: the machine is root's own, so root's jobs run (worker.allow_root for this run).
@click.option("--allow-root", is_flag=True, hidden=True)
# `labq up --gpus N`: this run's worker declares N fake GPUs (worker.gpus = N for this run).
@click.option("--fake-gpus", type=click.IntRange(0, 4096), hidden=True)
@pass_ctx
def worker(ctx, verbose, allow_root, fake_gpus):
    """The node agent: registers this machine and runs admitted jobs on it."""
    _logging(verbose)
    import dataclasses

    from labq.scheduler.store import login
    from labq.worker.agent import Agent
    cfg = ctx.cfg
    if allow_root:
        cfg = dataclasses.replace(cfg, worker=cfg.worker.with_(allow_root=True))
    if fake_gpus is not None:
        cfg = dataclasses.replace(cfg, worker=cfg.worker.with_(gpus=fake_gpus))
    if os.environ.get("STATE_DIRECTORY") and cfg.worker["spool"] == type(cfg.worker)().spool:
        # Under systemd the unit's StateDirectory=, not the home of the user running the worker.
        cfg = dataclasses.replace(cfg, worker=cfg.worker.with_(spool=os.path.join(state_dir(daemon=True), "spool")))
    from labq.worker.launch import start_refusal
    why = start_refusal(cfg.worker["run_as"], bool(cfg.worker["allow_root"]), cfg.security.auth == "munge")
    if why:
        raise RefusedError(why)
    # Runners get the address only: the role's password comes from the file.
    url = login.worker(cfg, redis_url(cfg), cfg.worker["name"] or socket.gethostname())
    Agent(cfg, url, ctx.config_path).run()


def _await_worker(stack, prefix: str, timeout: float = 60.0) -> tuple[int, int]:
    """Say "up" only once the worker has registered: a submit before that is refused ("no node is
    registered"), which is not what the first `labq sub` after `labq up` should meet. Returns the
    node's (GPUs, CPUs), (0, 0) if it never registered."""
    from labq.scheduler.store import login
    return login.first_node(stack.url, prefix, timeout, stack.dead)


def first_job(gpus: int, cpus: int) -> str:
    """The submit `labq up` suggests: one that this machine can run (no -G without GPUs)."""
    if gpus:
        return f"labq sub -G 1 -c 1 -t 10m -- python train.py    (then: labq stat; {gpus} GPUs, {cpus} CPUs here)"
    return (f"labq sub -c 1 -t 10m -- python train.py    (then: labq stat; no GPUs here, {cpus} CPUs: "
            "`labq up --gpus 2` pretends to have two)")


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Debug lines in the daemons' logs.")
@click.option("--gpus", "fake_gpus", type=click.IntRange(0, 4096),
              help="Pretend this machine has N GPUs (fake ones: to try -G on a laptop; nothing runs on a GPU).")
@pass_ctx
def up(ctx, verbose, fake_gpus):
    """Everything on this machine, in the foreground: a private Redis (unless redis.url is set), the
    scheduler and a worker. Ctrl-C stops all three. Their logs go to files in the state directory
    (printed at start)."""
    from .embedded import Stack
    cfg = ctx.cfg
    sdir = state_dir()
    os.makedirs(sdir, mode=0o700, exist_ok=True)
    lock = open(os.path.join(sdir, "up.lock"), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        pid = lock.read().strip() or "?"
        click.echo(f"labq is already up (pid {pid}, Redis at {redis_url(cfg)}); submit with: labq sub -- CMD")
        return
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    stopping = _stop_flag()
    logdir = os.path.join(sdir, "log")
    stack = Stack(sdir, ctx.config_path, cfg.redis_url, log_dir=logdir, verbose=verbose)
    if os.geteuid() == 0 and not cfg.worker["allow_root"]:
        # One-user mode on root's own machine: refusing root's jobs would refuse every job.
        click.echo("labq: warning: running as root: jobs submitted by root run as root "
                   "(worker.allow_root is taken as true for labq up)", err=True)
        stack.worker_args = ("--allow-root",)
    if fake_gpus is not None:
        stack.worker_args += ("--fake-gpus", str(fake_gpus))
    stack.start_all()
    gpus, cpus = _await_worker(stack, cfg.prefix)
    click.echo(f"labq is up: Redis {stack.url}, scheduler pid {stack.procs['scheduler'].pid}, "
               f"worker pid {stack.procs['worker'].pid}")
    if fake_gpus:
        click.echo(f"GPUs: {fake_gpus} FAKE GPUs (labq up --gpus): jobs get their ids in CUDA_VISIBLE_DEVICES, "
                   "but no GPU computes anything")
    click.echo(f"logs: {logdir}/{{scheduler,worker,redis}}.log")
    click.echo(f"submit with: {first_job(gpus, cpus)}")
    code = 0
    while not stopping():
        dead = stack.dead()
        if dead:
            click.echo(f"labq: {', '.join(dead)} exited unexpectedly (see {logdir}); stopping", err=True)
            code = 1
            break
        time.sleep(0.2)
    click.echo("stopping worker, scheduler and Redis…")
    stack.stop_all()
    sys.exit(code)
