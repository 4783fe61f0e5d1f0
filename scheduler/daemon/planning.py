"""The tick's policy pass, composed by the shell (loop.Scheduler) as the inboxes (requests.py) and the
node events (events.py) are: whether a pass is due, what plan() sees (the state's snapshot, with the
budgets' spend and the states of the ended jobs that dependencies name, read here and kept), plan(),
the applier's verdicts (applier.py) and their Changes committed through the shell."""
import logging
import time

from .. import policy
from ..jobs.model import Job, Snapshot
from ..store.commit import BIG_COMMIT, release_memory
from . import applier
from .bookkeeper import Bookkeeper
from .change import Change
from .ranking import Ranking
from .shell import Shell

log = logging.getLogger("labq.scheduler")

REASON_CHUNK = 2000        # jobs per transaction when a pass gives many jobs a new reason


class Planner:
    def __init__(self, shell: Shell, books: Bookkeeper) -> None:
        self.shell, self.books = shell, books
        self.plan_done, self.plan_cost = float("-inf"), 0.0    # monotonic end and length of the last plan
        self.ranking = Ranking(shell)       # `labq prio`'s text, published on a quiet pass

    def due(self, now: float) -> bool:
        """While requests keep streaming in, answer them first and plan at most once a tick; a lone submit on
        an idle queue is planned at once, a tick of no news (state._news) waits for the tick's plan. An
        attempt's end freed room: plan again at once, unless planning would take more than a third of the
        loop (at most every 2 x the last plan's own time), or a busy node drains at one job per slot per tick."""
        st = self.shell.state
        refill = st.freed and time.monotonic() - self.plan_done >= 2 * self.plan_cost
        return now - st.last_plan >= st.cfg.tick or refill or (st.news and not self.shell.store.wakes_waiting())

    def plan(self, now: float) -> None:
        # `now` is the tick's only clock: the ends processed in this tick were capped at it
        # (transitions.finished), so an admission at `now` never precedes them.
        st, began = self.shell.state, time.monotonic()
        reasons = now - st.last_reasons >= st.cfg.tick
        self._schedule(now, reasons)
        st.last_plan, st.freed, st.news = now, False, False
        st.last_reasons = now if reasons else st.last_reasons
        self.plan_done = time.monotonic()
        self.plan_cost = self.plan_done - began
        self.ranking.after_pass(now)

    def snapshot(self, now: float) -> Snapshot:
        return self.shell.state.snapshot(now, self.books.spent_now(now, self.shell.store.spent()), self.ended_states())

    def ended_states(self, extra: Job | None = None) -> tuple[tuple[int, str], ...]:
        """(id, state) of each ended job a pending job (and `extra`, a --test-only probe) depends on.
        An ended job never changes, so each is read from Redis once and kept while some pending job
        still depends on it."""
        st = self.shell.state
        missing, resting = st.ended_wanted(extra)
        if missing:
            st.ended_found(missing, self.shell.ended_jobs(missing))
        return tuple(sorted({**st.ended, **resting}.items()))

    def _schedule(self, now: float, reasons: bool = True) -> None:
        """One policy pass over the snapshot, applied (applier.py) and committed: admissions with
        their dispatch, expiries and preemptions in one transaction; new reasons after. Without
        `reasons` (a pass that refills room freed within the tick) a waiting job's flip between
        Resources and Priority is not written: whether the pass placed anything decides which of
        the two every pending job gets, and writing them all at each job's end was most of the
        scheduler's work per trivial job (issue 12). The next pass with `reasons`, at most a tick
        later, writes them."""
        started, st, metrics = time.monotonic(), self.shell.state, self.shell.metrics
        if (window := st.windows()) is not None:    # an array kept as a rest: the tasks this pass must see
            self.shell.commit(window)
        snap, told = st.pass_snapshot(now, self.books.spent_now(now, self.shell.store.spent()), self.ended_states())
        p = applier.without(policy.plan(snap, st.cfg, **st.kept.inputs(snap, st.cfg, told)), st.tails)
        if metrics:
            metrics.plan_seconds.observe(time.monotonic() - started)
        if not reasons:     # drop the flips before they are applied (a new record each) only to be discarded
            p = applier.without_flips(p, st.jobs)
        # Checked against the jobs on nodes as the tally keeps them: with every active job there, a
        # pass that placed read each pending record to find the jobs on the nodes it placed on.
        done = applier.apply_plan(p, st.jobs, st.tally.on_node, st.nodes, now, confirmed=st.confirmed)
        for r in done.rejected:
            log.warning("plan not applied: %s", r.why)
            if metrics:
                metrics.plan_rejected.labels(type(r.decision).__name__).inc()
        for j in done.stopping:
            log.info("job %s preempted: %s", j.display_id, j.detail)
        out = applier.changes(done, REASON_CHUNK)
        blocker = st.jobs[p.blocker].display_id if p.blocker is not None and p.blocker in st.jobs else ""
        # Written with the reasons it stands for, and only when it changed: O(1) a pass, where naming
        # it in each detail behind it rewrote every one of those records whenever it changed (issue 41).
        if reasons and blocker != st.blocker:
            out = out or [Change()]
            out[0].blocker = blocker
        for change in out:
            self.shell.commit(change)
        if len(done.pended) >= BIG_COMMIT:
            release_memory()
        for j in done.started:
            log.info("job %s -> %s gpus=%s", j.display_id, j.node, ",".join(j.gpu_uuids) or "-")
