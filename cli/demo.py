"""`labq demo`: a team with 4 GPUs, 16 CPUs, 64 GiB and a $120 budget at $2 per GPU-hour runs a sweep
of 12 training jobs (1 GPU, 4 CPUs, 12 GiB, 2 h limit each) — for real, on fake GPUs, on a private
Redis, with the real scheduler and worker processes."""
import os
import shutil
import sys
import tempfile
import time
from functools import partial

import click

from labq.scheduler.jobs import states
from labq.scheduler.settings import config as config_mod
from labq.scheduler.units import fmt_money as money

from . import render, statview
from .embedded import ROOT, Stack

DEMO_CONFIG = """\
# The demo's embedded configuration (see config.example.toml for every key).
[scheduler]
tick = "1s"
kill_wait = "5s"

[rates]
gpu_hour = 2.0

[accounts.eta]
users = ["{user}"]

[[budgets]]
name = "eta-sweep"
account = "eta"
unit = "usd"
limit = 120.0
reserve = 0.1
on_exhaust = "hold"

[worker]
name = "demo-node"
gpus = 4
gpu_model = "fake"
cpus = 16
mem = "64G"
# 6 job slots (slot runner processes): the 4 GPUs, not the slots, are what limits the sweep.
slots = 6
spool = "{spool}"
run_as = "self"
"""

LRS = [0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.2, 0.05, 0.02, 0.005, 0.002, 0.0005]


@click.command()
@click.option("--seconds", default=4, show_default=True, help="Training time of each job.")
@click.option("--keep", is_flag=True, help="Keep the demo's state directory.")
def demo(seconds, keep):
    """Run the 12-job sweep demo end to end and show waves, costs and the budget."""
    from labq.scheduler.client import Client, current_user
    d = tempfile.mkdtemp(prefix="labq-demo-", dir="/tmp")
    cfg_path = os.path.join(d, "labq.toml")
    with open(cfg_path, "w") as f:
        f.write(DEMO_CONFIG.format(user=current_user(), spool=os.path.join(d, "spool")))
    cfg = config_mod.load(cfg_path)
    log = open(os.path.join(d, "daemons.log"), "w")
    stack = Stack(d, cfg_path, log=log)
    click.echo(f"labq demo — state in {d}")
    try:
        stack.start_all()
        client = Client(cfg, url=stack.url)
        _wait_for_node(client, stack)
        click.echo(statview.capacity_line(client.nodes(), []))
        click.echo("budget eta-sweep: $120.00 (10% reserve), $2.00 per GPU-hour; each job commits "
                   "1 GPU × 2 h × $2 = $4.00 while it runs\n")
        work = os.path.join(d, "work")
        os.makedirs(work)
        ids = _submit(client, seconds, work)
        _watch(client, ids)
        _report(client, ids, os.path.join(d, "spool", "checkpoints"))
    finally:
        stack.stop_all()
        log.close()
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def _wait_for_node(client, stack, timeout=60):
    end = time.monotonic() + timeout
    while not [n for n in client.nodes() if n.state == "up"]:
        if stack.dead() or time.monotonic() > end:
            raise click.ClickException(f"the demo worker did not come up (see {stack.state_dir}/daemons.log)")
        time.sleep(0.1)


def _submit(client, seconds, workdir):
    from .subcore import build_body
    train = os.path.join(ROOT, "examples", "train.py")
    ids = []
    for i, lr in enumerate(LRS):
        argv = [sys.executable, train, "--seconds", str(seconds), "--lr", str(lr), "--seed", str(i)]
        opts = {"name": f"sweep-lr{lr}", "account": "eta", "gpus": "1", "cpus": "4", "mem": "12G", "time_": "2h",
                "chdir": workdir}
        reply = client.submit(build_body(opts, argv, None))
        ids.append(reply["job_id"])
    click.echo(f"$ labq sub -J sweep-lr<LR> -A eta -G 1 -c 4 --mem 12G -t 2h -- python examples/train.py --lr <LR>"
               f"   × 12  → jobs {ids[0]}–{ids[-1]}\n")
    return ids


def waves_of(jobs, gap: float = 1.0):
    """Jobs grouped by start: a new wave begins after a pause of more than `gap` seconds."""
    starts = sorted((j.attempts[0].dispatch_time, j.id) for j in jobs if j.attempts)
    waves = []
    for i, (t, jid) in enumerate(starts):
        if not waves or t - starts[i - 1][0] > gap:
            waves.append([])
        waves[-1].append(jid)
    return waves


def _watch(client, ids, timeout=900):
    """Print the queue as it changes, until every job has ended."""
    end, last = time.monotonic() + timeout, None
    t0 = time.monotonic()
    while time.monotonic() < end:
        jobs = client.read.jobs(ids)
        by = {s: [j for j in jobs if j.state == s] for s in (states.PENDING, states.RUNNING)}
        done = [j for j in jobs if j.state in states.TERMINAL]
        line = (f"[{time.monotonic() - t0:5.1f}s] running {len(by[states.RUNNING]):2d} "
                f"{[j.id for j in by[states.RUNNING]]}  pending {len(by[states.PENDING]):2d}  done {len(done):2d}")
        if line.split("]", 1)[1] != last:
            click.echo(line)
            last = line.split("]", 1)[1]
        if len(done) == len(ids):
            return
        time.sleep(0.25)
    raise click.ClickException("the sweep did not finish in time")


def _report(client, ids, checkpoints):
    fmt_money = partial(money, currency=client.currency)
    jobs = sorted(client.read.jobs(ids), key=lambda j: j.id)
    waves = waves_of(jobs)
    click.echo(f"\n{len(waves)} waves (never more than 4 running): " + "  ".join(f"{w}" for w in waves))
    rows = [[j.display_id, j.name, j.state, j.exit_code, f"{render.elapsed(j, j.end_time):.1f}s",
             ",".join(j.gpu_uuids), fmt_money(j.cost)] for j in jobs]
    click.echo(statview.table(rows, ["JOBID", "NAME", "ST", "EXIT", "ELAPSED", "GPU", "COST"]))
    total = sum(j.cost for j in jobs)
    saved = sorted(os.listdir(checkpoints)) if os.path.isdir(checkpoints) else []
    click.echo(f"total cost {fmt_money(total)} (billed from each process's start to its end, 1 GPU × $2/h each); "
               f"checkpoints written for {len(saved)} jobs under $LABQ_CHECKPOINT_DIR")
    for b in client.balances():
        click.echo(f"budget {b.name}: limit {fmt_money(b.limit)}, spent {fmt_money(b.spent)}, "
                   f"committed {fmt_money(b.committed)}, available {fmt_money(b.available)}")
    from labq.scheduler.jobs.logpath import out_path
    with open(out_path(jobs[0])) as f:
        tail = f.read().strip().splitlines()[-1:]
    click.echo(f"$ labq logs {jobs[0].display_id} | tail -1\n{tail[0] if tail else '(empty)'}")
    ok = all(j.state == states.COMPLETED for j in jobs)
    click.echo("demo finished: all 12 jobs completed" if ok else "demo finished with failures (see above)")
    if not ok:
        sys.exit(1)
