"""`labq prio`'s ranking, published by the leader (issue 39 item 4). At 10,000 pending jobs a client
that ranks the jobs itself spends ~3x a `labq sub` (reading the rows, ranking, formatting every line);
the scheduler has the jobs in memory and renders the same text (priotable.py) once for all the
`labq prio` that follow, which then read one string. SLURM's priorities are likewise recomputed every
PriorityCalcPeriod, not per `sprio`.

When: on a quiet pass (no commit changed a job or a rest since the previous pass, store/ranking.py
counts them), so that a queue that changes at every tick pays nothing; at most every GAP seconds
and COST_GAP times the last render's own time; a quiet queue's ranking is redone after REFRESH (its
ages and the decayed usage move). The first commit that changes a job deletes it in its own
transaction, so `labq prio` never prints a ranking of jobs that changed since: it ranks the rows
itself until the next quiet pass. Not while a held array rests (its tasks are no records here; the
client spreads them from their one row): `prio` ranks the rows then."""
import time

from .. import priotable
from ..jobs import states
from ..jobs.model import Job
from ..money import fairshare
from .shell import Shell

GAP = 5.0           # seconds between two renders at least
COST_GAP = 50       # and at least this many times the last render's own time (2 % of the scheduler's time)
REFRESH = 60.0      # a quiet queue's ranking is rendered again after this long


class Ranking:
    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.touched = -1               # the store's count of changing commits as the last pass left it
        self.at = float("-inf")         # the tick's clock when the last one was rendered
        self.cost = 0.0                 # that render's own time, seconds

    def after_pass(self, now: float) -> bool:
        """Publish the ranking at `now` where it is due (above); whether it did."""
        st, published = self.shell.state, self.shell.store.ranking
        quiet, self.touched = published.touched == self.touched, published.touched
        if not quiet or st.rests or now - self.at < max(GAP, COST_GAP * self.cost):
            return False
        if published.ranked and now - self.at < REFRESH:
            return False
        began = time.perf_counter()
        pending = sorted((j for j in st.jobs.values() if j.state == states.PENDING), key=_id)
        running = [j for j in st.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(st.usage, running, now, st.cfg.priority.fairshare_half_life)
        published.publish(self.shell.store.txn, priotable.text(pending, now, usage, st.cfg), now)
        self.at, self.cost = now, time.perf_counter() - began
        return True


def _id(j: Job) -> int:
    return j.id
