"""The thin client's reads of the published ranking (store/ranking.py, priopatch.py), for `labq prio`
(cli/prio.py): composed into thinreads.ThinReader, whose round trips (`_multi`, `_pipe`) they use."""
from itertools import repeat

from .keys import Keys


class RankingReads:
    k: Keys

    def _multi(self, *cmds) -> list:
        raise NotImplementedError

    def _pipe(self, cmds) -> list:
        raise NotImplementedError

    def ranking(self, user: str) -> tuple:
        """(the published ranking or None, `user`'s jobs changed since, all users': store/ranking.py)."""
        got, mine, since = self._multi(("GET", self.k.ranking), ("HGET", self.k.ranking_since, user),
                                       ("HVALS", self.k.ranking_since))
        return (got.decode() if isinstance(got, bytes) else got), int(mine or 0), sum(map(int, since))

    def ranking_patch(self, user: str) -> tuple | None:
        """(the ranking's index: its parameters and keys, `user`'s jobs in it; (id, submit time) of each
        job of theirs the commits since changed; the `stat` rows of those) for priopatch.patch; None where the ids are
        past ranking.CAP, there is no index, or the Redis roles predate these keys (NOPERM)."""
        from ..errors import RefusedError
        from .statrows import parse
        try:
            head, entries, mine = self._multi(("HGET", self.k.ranking_index, ""), ("HGET", self.k.ranking_index, user),
                                              ("HGET", self.k.ranking_mine, user))
        except RefusedError:
            return None
        if not head or not mine or mine == "*":
            return None
        changed = [(int(i), float(s)) for i, _, s in map(str.partition, mine.split(","), repeat(":"))]
        texts = self._pipe([("HMGET", self.k.stat_rows, *[i for i, _ in changed])])[0]
        return head, entries or "", changed, parse([t for t in texts if t])
