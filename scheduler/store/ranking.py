"""The published ranking (Keys.ranking): `labq prio`'s text as the leader rendered it (daemon/ranking.py),
its index (Keys.ranking_index, priopatch.py), and what changed since, written by the commits after it
in their own transactions: each user's count of jobs changed (Keys.ranking_since), so that a `labq
prio` shows the ranking as of its time to a user none of whose jobs changed since, and says how many
of the others' did; and the ids and submit times of those jobs (Keys.ranking_mine), so that a user whose did gets the
ranking with their own jobs patched in (priopatch.patch); a change to a rest (a held array's tasks,
no records here) deletes the ranking."""
from collections import Counter

CAP = 256       # a user's changed ids listed beside the ranking; past it "*": that user's `prio` ranks the rows


class Published:
    """What the leader's store knows of its published ranking (composed by state.SchedulerStore)."""

    def __init__(self, keys) -> None:
        self.k = keys
        self.ranked = False     # published by this leader and not deleted since
        self.touched = 0        # commits that changed a job or a rest so far
        self.mine: dict[str, list[tuple[int, float]] | None] = {}   # user -> (id, submit time) of their
                                                                     # changed jobs since (None: past CAP)

    def keys(self) -> tuple[str, ...]:
        return self.k.ranking, self.k.ranking_since, self.k.ranking_index, self.k.ranking_mine

    def stale(self, p, jobs, rests) -> None:
        """A commit (pipeline `p`) changes `jobs` and `rests`: counted by user beside the ranking, and
        their ids listed, or the ranking deleted where a rest changes. Only writes: the flags and
        lists move by `settle`, once the transaction is in (a transaction built again would count
        twice; one that failed would leave `ranked` False over a ranking still readable, and the
        commits after it would not count)."""
        if not self.ranked:
            return
        if rests:
            p.delete(*self.keys())
            return
        for user, n in Counter(j.user for j in jobs).items():
            p.hincrby(self.k.ranking_since, user, n)
        for user, ids in self._listed(jobs).items():
            p.hset(self.k.ranking_mine, user, "*" if ids is None else ",".join(map("%d:%r".__mod__, ids)))

    def _listed(self, jobs) -> dict[str, list[tuple[int, float]] | None]:
        """Each user's changed jobs with `jobs`' (None: past CAP)."""
        out: dict[str, list[tuple[int, float]] | None] = {}
        for j in jobs:
            ids = out[j.user] if j.user in out else self.mine.get(j.user, [])
            job = (j.id, j.submit_time)
            out[j.user] = ids if ids is None or job in ids else None if len(ids) >= CAP else [*ids, job]
        return out

    def settle(self, jobs, rests) -> None:
        """The commit that `stale` wrote into is in."""
        self.touched += 1
        if rests:
            self.ranked, self.mine = False, {}
        elif self.ranked:
            self.mine.update(self._listed(jobs))

    def publish(self, txn, text: str, at: float, index: dict[str, str]) -> None:
        """Write `text`, rendered at `at`, and its `index` by the store's fenced transaction `txn`;
        nothing changed since."""
        def build(p) -> None:
            p.set(self.k.ranking, f"{at!r}\n{text}")
            p.delete(self.k.ranking_since, self.k.ranking_index, self.k.ranking_mine)
            if index:
                p.hset(self.k.ranking_index, mapping=index)
        txn(build)
        self.ranked, self.mine = True, {}

    def dropped(self) -> None:
        """A new leader's transaction deleted the ranking (SchedulerStore.rebuild_stat_rows)."""
        self.ranked, self.mine = False, {}

    def withdraw(self, txn) -> None:
        """No ranking (the queue is too long to render one): the last one goes."""
        if self.ranked:
            txn(lambda p: p.delete(*self.keys()))
            self.ranked, self.mine = False, {}
