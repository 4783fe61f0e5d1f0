"""`labq prio`'s ranking, published by the leader (issue 39 item 4). At 10,000 pending jobs a client
that ranks the jobs itself spends ~3x a `labq sub` (reading the rows, ranking, formatting every line);
the scheduler has the jobs in memory and renders the same text (priotable.py) once for all the
`labq prio` that follow, which then read one string (SLURM likewise recomputes priorities every
PriorityCalcPeriod).

When: after a pass where jobs changed since the last one (store/ranking.py counts the commits), at
most every GAP seconds and COST_GAP times the last render's own time apart (~45 ms with its index at 10,000 pending
jobs: under 1 % of the scheduler's time); a ranking of a queue that stays as it is is redone after
REFRESH (its ages and the decayed usage move); never while requests wait (a pass that finds wake-ups
queued: a stream of submits is answered first, and the live bench's drains pay nothing). The commits after
it count and list each user's jobs they change beside it (Keys.ranking_since, ranking_mine): `labq
prio` shows it to a user none of whose jobs changed since (and says how many of the others' did),
and to one whose did with their own jobs patched in from their `stat` rows (priopatch.py, beside the
text its index: the sort keys and each user's jobs), so that a user's own submit, start or cancel
shows at once. Not while a held array
rests (its tasks are no records here; the client spreads them from their one row), and a change to a
rest deletes it; nor of more than MOST pending jobs.
"""
import time

from .. import priopatch
from ..jobs import states
from ..jobs.model import Job
from ..money import fairshare
from .shell import Shell

GAP = 5.0           # seconds between two renders at least
COST_GAP = 50       # and at least this many times the last render's own time (≤ 2 % of the scheduler's time)
REFRESH = 60.0      # a quiet queue's ranking is rendered again after this long
# No ranking of more pending jobs: a render is ~3 µs a job (0.46 s and a 7 MB text at 100,000), all of
# it a stall of the loop, and a client ranking that many costs ~10x `labq sub` either way.
MOST = 20_000


class Ranking:
    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.touched = -1               # the store's count of changing commits when the last one was rendered
        self.at = float("-inf")         # the tick's clock then
        self.cost = 0.0                 # that render's own time, seconds

    def after_pass(self, now: float) -> bool:
        """Publish the ranking at `now` where it is due (above); whether it did."""
        st, published = self.shell.state, self.shell.store.ranking
        if st.rests or now - self.at < max(GAP, COST_GAP * self.cost):
            return False
        if published.ranked and published.touched == self.touched and now - self.at < REFRESH:
            return False
        if self.shell.store.wakes_waiting():    # requests wait: answered first, rendered on a pass with none
            return False
        began, touched = time.perf_counter(), published.touched
        pending = sorted((j for j in st.jobs.values() if j.state == states.PENDING), key=_id)
        if len(pending) > MOST:
            published.withdraw(self.shell.store.txn)
            self.at, self.touched = now, touched
            return False
        running = [j for j in st.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(st.usage, running, now, st.cfg.priority.fairshare_half_life)
        text, index = priopatch.render(pending, now, usage, st.cfg)
        published.publish(self.shell.store.txn, text, now, index)
        self.at, self.cost, self.touched = now, time.perf_counter() - began, touched
        return True

def _id(j: Job) -> int:
    return j.id
