"""The published ranking (Keys.ranking): `labq prio`'s text as the leader rendered it on a quiet pass
(daemon/ranking.py), and its removal by the first commit that changes a job or a rest after it, in
that commit's own transaction, so that no `labq prio` prints a ranking older than the rows it is of."""


class Published:
    """What the leader's store knows of its published ranking (composed by state.SchedulerStore)."""

    def __init__(self, keys) -> None:
        self.k = keys
        self.ranked = False     # published, and no commit changed a job since
        self.touched = 0        # commits that changed a job or a rest so far: a pass without is quiet

    def stale(self, p) -> None:
        """A commit (pipeline `p`) changes a job or a rest: the ranking goes with it, if there is one."""
        self.touched += 1
        if self.ranked:
            p.delete(self.k.ranking)
            self.ranked = False

    def publish(self, txn, text: str, at: float) -> None:
        """Write `text`, rendered at `at`, by the store's fenced transaction `txn`."""
        txn(lambda p: p.set(self.k.ranking, f"{at!r}\n{text}"))
        self.ranked = True
