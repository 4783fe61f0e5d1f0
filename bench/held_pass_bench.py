"""The daemon's plan pass (planning.Planner._schedule: windows, snapshot, plan(), the applier, the
commits) over a deep queue of held jobs that changes by a few jobs a pass: what one tick's pass costs
during a drain of held submits onto that queue (the live bench's drain, bench/live_bench.py).

A SchedulerState as the daemon keeps it: one 2-slot node, HELD held pending jobs (the drain's
submits: `sub --hold -A parked`), each already given its reason by an earlier pass. Each timed pass
first commits NEW new held jobs (and, with --churn, releases one held job and cancels one), then
plans. Commits go straight into the state (the shell's commit without Redis). CPU time
(time.process_time) per pass, min and median over PASSES passes.

    python bench/held_pass_bench.py [--held 60000] [--new 90] [--passes 40] [--churn]
"""
import argparse
import statistics
import time
from dataclasses import replace
from types import SimpleNamespace

from labq.scheduler.daemon.crashguard import CrashGuard
from labq.scheduler.daemon.planning import Planner
from labq.scheduler.daemon.state import SchedulerState
from labq.scheduler.jobs import states
from labq.scheduler.jobs.estimate import Estimator
from labq.scheduler.jobs.jobspec import HELD_DETAIL
from labq.scheduler.jobs.model import Job, Node
from labq.scheduler.settings import config
from labq.scheduler.store.commit import tune_gc

NOW = 1_800_000_000.0
G = 1 << 30


def held_job(jid: int, at: float) -> Job:
    """A held job as the submit builds it (jobspec.build): with the Held reason it is given there, so
    that a pass, which would give it that reason anyway, rewrites and refiles none of the new ones."""
    return Job(id=jid, user="alice", account="parked", argv=("true",), workdir="/tmp", cpus=1, mem=0,
               time_limit=600, submit_time=at, state=states.PENDING, held=True,
               reason=states.HELD, detail=HELD_DETAIL)


class _Store:
    def spent(self) -> dict[str, int]:
        return {}

    def wakes_waiting(self) -> bool:
        return True         # requests wait (a drain): the ranking is never rendered


def planner(held: int) -> tuple[Planner, SchedulerState]:
    cfg = config.loads("")
    st = SchedulerState(cfg, Estimator.from_config(cfg), CrashGuard.from_config(cfg))
    st.nodes = (Node("n1", 16, 64 * G, 2, (), "up", NOW + 3600, NOW),)
    st.loaded({i: held_job(i, NOW - 1000 + i * 1e-3) for i in range(1, held + 1)}, held, {})
    shell = SimpleNamespace(state=st, store=_Store(), metrics=None,
                            commit=lambda change, *a, **kw: st.apply(change, False, st.usage))
    books = SimpleNamespace(spent_now=lambda now, spent: {})
    return Planner(shell, books), st     # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held", type=int, default=60_000)
    ap.add_argument("--new", type=int, default=90)
    ap.add_argument("--passes", type=int, default=40)
    ap.add_argument("--churn", action="store_true", help="also release one held job and cancel one a pass")
    a = ap.parse_args()
    tune_gc()
    pl, st = planner(a.held)
    now = NOW
    pl._schedule(now)                   # the first pass gives every held job its reason
    pl._schedule(now + 0.1)
    cpu = []
    for k in range(a.passes):
        now += 1.0
        first = st.seq + 1
        st.seq += a.new
        from labq.scheduler.daemon.change import Change
        jobs = [held_job(i, now) for i in range(first, first + a.new)]
        if a.churn:
            pend = [j for j in (st.jobs.get(1 + 2 * k), st.jobs.get(2 + 2 * k)) if j is not None]
            jobs += [replace(pend[0], held=False)] if pend else []
            jobs += [replace(pend[1], state=states.CANCELLED, end_time=now)] if len(pend) > 1 else []
        st.apply(Change(jobs=jobs), False, st.usage)
        t = time.process_time()
        pl._schedule(now)
        cpu.append(time.process_time() - t)
    pend = sum(1 for j in st.jobs.values() if j.state == states.PENDING)
    print(f"held pass: {pend:,} pending, +{a.new} held a pass{' +churn' if a.churn else ''}: "
          f"min {min(cpu) * 1e3:.2f} ms, median {statistics.median(cpu) * 1e3:.2f} ms CPU over {a.passes} passes")


if __name__ == "__main__":
    main()
