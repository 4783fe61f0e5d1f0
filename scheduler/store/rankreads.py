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
        """(the published ranking or None, `user`'s jobs changed since, all users': store/ranking.py).
        None too where the leader that published it no longer leads (Keys.ranking_by: a labq older than
        the ranking, after a downgrade, leaves it as it was and counts no change), none leads this
        instant, or the Redis roles predate that key (NOPERM)."""
        from ..errors import RefusedError
        try:
            got, mine, since, by, leader = self._multi(
                ("GET", self.k.ranking), ("HGET", self.k.ranking_since, user), ("HVALS", self.k.ranking_since),
                ("GET", self.k.ranking_by), ("GET", self.k.leader))
        except RefusedError:
            return None, 0, 0
        if by is None or by != leader:
            return None, 0, 0
        return (got.decode() if isinstance(got, bytes) else got), int(mine or 0), sum(map(int, since))

    def ranking_patch(self, user: str) -> tuple | None:
        """(the ranking's index: its parameters and keys, `user`'s jobs in it; (id, submit time) of each
        job of theirs the commits since changed; the `stat` rows of those; (array id, submit time) of
        each rest of theirs they changed; those rests' rows, None where gone) for priopatch.patch;
        None where the ids are past ranking.CAP, there is no index, or the Redis roles predate these
        keys (NOPERM)."""
        from ..errors import RefusedError
        from .ranking import ARRAYS
        from .statrows import parse
        try:
            head, entries, mine, both = self._multi(
                ("HGET", self.k.ranking_index, ""), ("HGET", self.k.ranking_index, user),
                ("HGET", self.k.ranking_mine, user), ("HGET", self.k.ranking_mine, ARRAYS + user))
        except RefusedError:
            return None
        jobs, _, arrays = (both or mine or "*").partition("\n")
        if not head or jobs == "*":
            return None
        changed, rests = _pairs(jobs), _pairs(arrays)
        cmds = [("HMGET", self.k.stat_rows, *[i for i, _ in changed])] if changed else []
        cmds += [("HMGET", self.k.rests, *[a for a, _ in rests])] if rests else []
        got = self._pipe(cmds) if cmds else []
        texts = got[0] if changed else []
        return head, entries or "", changed, parse([t for t in texts if t]), rests, got[-1] if rests else []


def _pairs(text: str) -> list[tuple[int, float]]:
    """"id:submit time,…" as pairs."""
    return [(int(i), float(s)) for i, _, s in map(str.partition, text.split(","), repeat(":"))] if text else []
