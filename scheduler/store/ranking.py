"""The published ranking (Keys.ranking): `labq prio`'s text as the leader rendered it (daemon/ranking.py),
and what changed since, written by the commits after it in their own transactions: each user's count
of jobs changed (Keys.ranking_since), so that a `labq prio` shows the ranking as of its time to a user
none of whose jobs changed since, and says how many of the others' did; a change to a rest (a held
array's tasks, no records here) deletes the ranking."""
from collections import Counter


class Published:
    """What the leader's store knows of its published ranking (composed by state.SchedulerStore)."""

    def __init__(self, keys) -> None:
        self.k = keys
        self.ranked = False     # published by this leader and not deleted since
        self.touched = 0        # commits that changed a job or a rest so far

    def stale(self, p, jobs, rests) -> None:
        """A commit (pipeline `p`) changes `jobs` and `rests`: counted by user beside the ranking, or
        the ranking deleted where a rest changes. Only writes: the flags move by `settle`, once the
        transaction is in (a transaction built again would count twice; one that failed would leave
        `ranked` False over a ranking still readable, and the commits after it would not count)."""
        if not self.ranked:
            return
        if rests:
            p.delete(self.k.ranking, self.k.ranking_since)
            return
        for user, n in Counter(j.user for j in jobs).items():
            p.hincrby(self.k.ranking_since, user, n)

    def settle(self, rests) -> None:
        """The commit that `stale` wrote into is in."""
        self.touched += 1
        if rests:
            self.ranked = False

    def publish(self, txn, text: str, at: float) -> None:
        """Write `text`, rendered at `at`, by the store's fenced transaction `txn`; nothing changed since."""
        def build(p) -> None:
            p.set(self.k.ranking, f"{at!r}\n{text}")
            p.delete(self.k.ranking_since)
        txn(build)
        self.ranked = True

    def dropped(self) -> None:
        """A new leader's transaction deleted the ranking (SchedulerStore.rebuild_stat_rows)."""
        self.ranked = False

    def withdraw(self, txn) -> None:
        """No ranking (the queue is too long to render one): the last one goes."""
        if self.ranked:
            txn(lambda p: p.delete(self.k.ranking, self.k.ranking_since))
            self.ranked = False
