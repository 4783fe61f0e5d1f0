"""The published ranking (Keys.ranking): `labq prio`'s text as the leader rendered it (daemon/ranking.py),
its index (Keys.ranking_index, priopatch.py), and what changed since, written by the commits after it
in their own transactions: each user's count of jobs changed (Keys.ranking_since), so that a `labq
prio` shows the ranking as of its time to a user none of whose jobs changed since, and says how many
of the others' did; and the ids and submit times of those jobs (Keys.ranking_mine), so that a user whose did gets the
ranking with their own jobs patched in (priopatch.patch). A change to a rest (an array's tasks not yet
records) counts as its owner's and lists the array (id and submit time) in the field ARRAYS + user:
"jobs\narrays" (the owner's `prio` takes its lines out and puts back its tasks as the rest's row now
spreads them); the user's own field then says "*", which a client older than that field declines
(it would leave the array's lines as they were). The ranking is deleted only where a gone rest's
owner is not known. Keys.ranking_by names the leader that published it: a labq older than the ranking
that leads after a downgrade neither deletes it nor counts changes beside it, and readers, which read
it with Keys.leader in one MULTI, then rank the rows (as Keys.ran_by, 5c8e44a)."""
from collections import Counter

CAP = 256       # a user's changed ids and arrays listed beside the ranking; past it "*": that user's `prio` ranks the rows
ARRAYS = "\n"   # ranking_mine's field ARRAYS + user: no user name holds a newline (nor is "": the index's HEAD)


class Published:
    """What the leader's store knows of its published ranking (composed by state.SchedulerStore)."""

    def __init__(self, keys, me: str = "") -> None:
        self.k, self.me = keys, me      # `me`: this leader's Keys.leader value, written beside the ranking
        self.ranked = False     # published by this leader and not deleted since
        self.touched = 0        # commits that changed a job or a rest so far
        self.owners: dict[int, tuple[str, float]] = {}   # array id -> (user, submit time) of each rest known
        self.mine: dict[str, list[tuple[int, float]] | None] = {}   # user -> (id, submit time) of their
                                                                     # changed jobs since (None: past CAP)
        self.arrays: dict[str, dict[int, float]] = {}   # user -> array id -> submit time of their changed rests
        self.starred = False    # a user went past CAP since: their `prio` ranks the rows until the next ranking

    def keys(self) -> tuple[str, ...]:
        return self.k.ranking, self.k.ranking_since, self.k.ranking_index, self.k.ranking_mine, self.k.ranking_by

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
        for user, n in (Counter(j.user for j in jobs) + Counter(u for u, _ in owners.values())).items():
            p.hincrby(self.k.ranking_since, user, n)
        listed, arrays = self._listed(jobs, owners)
        for user, ids in listed.items():
            text = "*" if ids is None else ",".join(map("%d:%r".__mod__, ids))
            if user in arrays:
                both = "*" if ids is None else text + "\n" + ",".join(map("%d:%r".__mod__, arrays[user].items()))
                p.hset(self.k.ranking_mine, user, "*", {ARRAYS + user: both})
            else:
                p.hset(self.k.ranking_mine, user, text)

    def _owners(self, rests) -> dict[int, tuple[str, float]] | None:
        """array id -> (owner, submit time) of each changed rest (a rest gone: as the ranking or a
        commit since knew it); None where one is not known (the ranking is then deleted)."""
        out = {a: (r.user, r.template.submit_time) if r is not None else self.owners.get(a) for a, r in rests.items()}
        return None if None in out.values() else out   # type: ignore[return-value]

    def _listed(self, jobs, owners=None) -> tuple[dict[str, list[tuple[int, float]] | None], dict[str, dict[int, float]]]:
        """(each user's changed jobs with `jobs`' (None: past CAP), each user's changed rests with
        `owners`' where they have some)."""
        arrays: dict[str, dict[int, float]] = {}
        for a, (user, submit) in (owners or {}).items():
            arrays.setdefault(user, dict(self.arrays.get(user, {})))[a] = submit
        arrays.update({u: self.arrays[u] for j in jobs if (u := j.user) in self.arrays and u not in arrays})
        out: dict[str, list[tuple[int, float]] | None] = {u: self.mine.get(u, []) for u in arrays}
        for j in jobs:
            ids = out[j.user] if j.user in out else self.mine.get(j.user, [])
            job = (j.id, j.submit_time)
            out[j.user] = ids if ids is None or job in ids else None if len(ids) >= CAP else [*ids, job]
        for u, ids in out.items():
            if ids is not None and len(ids) + len(arrays.get(u, ())) > CAP:
                out[u] = None
        return out, arrays

    def settle(self, jobs, rests) -> None:
        """The commit that `stale` wrote into is in."""
        self.touched += 1
        owners = self._owners(rests)
        if owners is None:
            self.ranked, self.mine, self.arrays = False, {}, {}
        elif self.ranked:
            listed, arrays = self._listed(jobs, owners)
            self.starred |= any(ids is None and self.mine.get(u, ()) is not None for u, ids in listed.items())
            self.mine.update(listed)
            self.arrays.update(arrays)
        for a, r in rests.items():
            if r is None:
                self.owners.pop(a, None)
            else:
                self.owners[a] = (r.user, r.template.submit_time)

    def publish(self, txn, text: str, at: float, index: dict[str, str],
                owners: dict[int, tuple[str, float]] | None = None) -> None:
        """Write `text`, rendered at `at`, and its `index` by the store's fenced transaction `txn`;
        nothing changed since; `owners`: the rests' (array id -> (user, submit time)) as ranked."""
        def build(p) -> None:
            p.set(self.k.ranking, f"{at!r}\n{text}")
            p.set(self.k.ranking_by, self.me)       # readers trust it while this leader leads
            p.delete(self.k.ranking_since, self.k.ranking_index, self.k.ranking_mine)
            if index:
                p.hset(self.k.ranking_index, mapping=index)
        txn(build)
        self.ranked, self.mine, self.arrays, self.owners, self.starred = True, {}, {}, dict(owners or {}), False

    def dropped(self) -> None:
        """A new leader's transaction deleted the ranking (SchedulerStore.rebuild_stat_rows)."""
        self.ranked, self.mine, self.arrays = False, {}, {}

    def withdraw(self, txn) -> None:
        """No ranking (the queue is too long to render one): the last one goes."""
        if self.ranked:
            txn(lambda p: p.delete(*self.keys()))
            self.ranked, self.mine, self.arrays = False, {}, {}
