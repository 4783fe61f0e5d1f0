"""The published ranking (Keys.ranking): `labq prio`'s text as the leader rendered it (daemon/ranking.py),
its index (Keys.ranking_index, priopatch.py), and what changed since, written by the commits after it
in their own transactions: each user's count of jobs changed (Keys.ranking_since), so that a `labq
prio` shows the ranking as of its time to a user none of whose jobs changed since, and says how many
of the others' did; and the ids and submit times of those jobs (Keys.ranking_mine), so that a user whose did gets the
ranking with their own jobs patched in (priopatch.patch). A change to a rest (an array's tasks not yet
records) counts as its owner's (whose `prio` then ranks the rows: priopatch does not patch array lines);
the ranking is deleted only where a gone rest's owner is not known."""
from collections import Counter

CAP = 256       # a user's changed ids listed beside the ranking; past it "*": that user's `prio` ranks the rows


class Published:
    """What the leader's store knows of its published ranking (composed by state.SchedulerStore)."""

    def __init__(self, keys) -> None:
        self.k = keys
        self.ranked = False     # published by this leader and not deleted since
        self.touched = 0        # commits that changed a job or a rest so far
        self.owners: dict[int, str] = {}   # array id -> user of each rest this leader knows of
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
        owners = self._owners(rests)
        if owners is None:
            p.delete(*self.keys())
            return
        for user, n in (Counter(j.user for j in jobs) + Counter(owners.values())).items():
            p.hincrby(self.k.ranking_since, user, n)
        for user, ids in self._listed(jobs, owners).items():
            p.hset(self.k.ranking_mine, user, "*" if ids is None else ",".join(map("%d:%r".__mod__, ids)))

    def _owners(self, rests) -> dict[int, str] | None:
        """array id -> owner of each changed rest (a rest gone: as the ranking or a commit since
        knew it); None where one is not known (the ranking is then deleted)."""
        out = {a: r.user if r is not None else self.owners.get(a) for a, r in rests.items()}
        return None if None in out.values() else out   # type: ignore[return-value]

    def _listed(self, jobs, owners=None) -> dict[str, list[tuple[int, float]] | None]:
        """Each user's changed jobs with `jobs`' (None: past CAP, or a rest of theirs changed: its
        tasks share lines, which priopatch does not patch)."""
        out: dict[str, list[tuple[int, float]] | None] = dict.fromkeys((owners or {}).values())
        for j in jobs:
            ids = out[j.user] if j.user in out else self.mine.get(j.user, [])
            job = (j.id, j.submit_time)
            out[j.user] = ids if ids is None or job in ids else None if len(ids) >= CAP else [*ids, job]
        return out

    def settle(self, jobs, rests) -> None:
        """The commit that `stale` wrote into is in."""
        self.touched += 1
        owners = self._owners(rests)
        if owners is None:
            self.ranked, self.mine = False, {}
        elif self.ranked:
            self.mine.update(self._listed(jobs, owners))
        for a, r in rests.items():
            if r is None:
                self.owners.pop(a, None)
            else:
                self.owners[a] = r.user

    def publish(self, txn, text: str, at: float, index: dict[str, str], owners: dict[int, str] | None = None) -> None:
        """Write `text`, rendered at `at`, and its `index` by the store's fenced transaction `txn`;
        nothing changed since; `owners`: the rests' (array id -> user) as ranked."""
        def build(p) -> None:
            p.set(self.k.ranking, f"{at!r}\n{text}")
            p.delete(self.k.ranking_since, self.k.ranking_index, self.k.ranking_mine)
            if index:
                p.hset(self.k.ranking_index, mapping=index)
        txn(build)
        self.ranked, self.mine, self.owners = True, {}, dict(owners or {})

    def dropped(self) -> None:
        """A new leader's transaction deleted the ranking (SchedulerStore.rebuild_stat_rows)."""
        self.ranked, self.mine = False, {}

    def withdraw(self, txn) -> None:
        """No ranking (the queue is too long to render one): the last one goes."""
        if self.ranked:
            txn(lambda p: p.delete(*self.keys()))
            self.ranked, self.mine = False, {}
