"""`labq prio`'s ranking, published by the leader (issue 39 item 4). At 10,000 pending jobs a client
that ranks the jobs itself spends ~3x a `labq sub` (reading the rows, ranking, formatting every line);
the scheduler has the jobs in memory and renders the same text (priotable.py) once for all the
`labq prio` that follow, which then read one string (SLURM likewise recomputes priorities every
PriorityCalcPeriod).

When: after a pass where jobs changed since the last one (store/ranking.py counts the commits), at
most every GAP seconds (at once where a user went past ranking.CAP since: their `prio` ranks the rows
until then) and COST_GAP times the last render's own time apart (~45 ms with its index at 10,000 pending
jobs: under 1 % of the scheduler's time); a ranking of a queue that stays as it is is redone after
REFRESH (its ages and the decayed usage move); never while requests wait (a pass that finds wake-ups
queued: a stream of submits is answered first, and the live bench's drains pay nothing). The commits after
it count and list each user's jobs they change beside it (Keys.ranking_since, ranking_mine): `labq
prio` shows it to a user none of whose jobs changed since (and says how many of the others' did),
and to one whose did with their own jobs patched in from their `stat` rows (priopatch.py, beside the
text its index: the sort keys and each user's jobs), so that a user's own submit, start or cancel
shows at once. A rest's pending tasks (a big or held array's tasks not yet records) are ranked as the
client spreads them from their one row (`spread`), and a change to a rest counts as a change of its
owner's (store/ranking.py); nor of more than MOST pending jobs.
"""
import time
from collections.abc import Iterable
from typing import NamedTuple

from .. import priopatch
from ..jobs import states
from ..jobs.model import Job
from ..jobs.rest import Rest
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
        if now - self.at < max(0 if published.starred else GAP, COST_GAP * self.cost):
            return False        # a user past ranking.CAP: at once (but COST_GAP), their `prio` ranks the rows till then
        if published.ranked and published.touched == self.touched and now - self.at < REFRESH:
            return False
        if self.shell.store.wakes_waiting():    # requests wait: answered first, rendered on a pass with none
            return False
        began, touched = time.perf_counter(), published.touched
        pending: list[Job | Task] = [j for j in st.jobs.values() if j.state == states.PENDING]
        if len(pending) + sum(r.left for r in st.rests.values() if r.template.state == states.PENDING) > MOST:
            published.withdraw(self.shell.store.txn)
            self.at, self.touched = now, touched
            return False
        resting = spread(st.rests.values())
        pending += resting
        pending.sort(key=_id)
        running = [j for j in st.jobs.values() if j.state in states.ON_NODE]
        usage = fairshare.current(st.usage, running, now, st.cfg.priority.fairshare_half_life)
        text, index = priopatch.render(pending, now, usage, st.cfg, set(map(_id, resting)))
        published.publish(self.shell.store.txn, text, now, index,
                          {a: (r.user, r.template.submit_time) for a, r in st.rests.items()})
        self.at, self.cost, self.touched = now, time.perf_counter() - began, touched
        return True


class Task(NamedTuple):
    """A resting task as priotable ranks it: the fields its `stat` row, spread from the rest's one row
    (statrows.rest_texts), gives the client (cli/prio.Pending)."""
    id: int
    array_id: int
    array_index: int
    user: str
    account: str
    qos: str
    submit_time: float
    time_limit: float
    learned_est: float | None
    est: float | None

    @property
    def display_id(self) -> str:
        return f"{self.array_id}_{self.array_index}"


def spread(rests: Iterable[Rest]) -> list[Task]:
    """The pending tasks of `rests` (a held array's are pending too, held), as the client spreads them."""
    out: list[Task] = []
    for r in rests:
        t = r.template
        if t.state == states.PENDING:
            a, lo, step = r.array_id, r.lo, r.step
            out += [Task(a + p, a, lo + p * step, t.user, t.account, t.qos, t.submit_time, t.time_limit,
                         t.learned_est, t.est) for p in r.positions()]
    return out


def _id(j: Job | Task) -> int:
    return j.id
