"""store/ranking.Published's flags (`ranked`, `touched`) move once a commit's transaction is in, not
while it is built (issue 39 item 4): a transaction built twice counts once, one that fails leaves the
ranking counted against (its DEL did not happen: the ranking is still readable), and a new leader's
rebuild, which deletes the ranking, says there is none."""
import pytest

from labq.scheduler.errors import StalePlanError
from labq.scheduler.jobs.model import Job
from labq.scheduler.store.batch import Batch
from labq.scheduler.store.commit import Committer
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.ranking import Published


class Recorder:
    """A pipeline that records each command by name."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **kw: self.calls.append((name, a))


class Store:
    """What Committer.write reaches of a SchedulerStore, its transaction built `builds` times into
    Recorders (the last one kept), then refused where `fails`."""

    def __init__(self, builds=1, fails=False):
        self.k, self.builds, self.fails = Keys(), builds, fails
        self.ranking = Published(self.k)
        self.ranking.ranked = True
        self.pipes = []

    def txn(self, build, replicas=0):
        for _ in range(self.builds):
            self.pipes.append(Recorder())
            build(self.pipes[-1])
        if self.fails:
            raise StalePlanError("the leader lease changed during a transaction")
        return []

    def wrote(self, *a):
        pass


def _write(store, rests=None) -> None:
    b = Batch()
    b.jobs[7] = Job(id=7, user="alice", account="eta", argv=["true"], workdir="/tmp", submit_time=1.0)
    b.rests = rests or {}
    Committer().write(store, b, 2.0, {}, {}, None, lambda budget, now: "p", 0)


def test_a_transaction_built_twice_counts_once():
    store = Store(builds=2)
    _write(store)
    assert store.ranking.touched == 1
    assert [c for c in store.pipes[-1].calls if c[0] == "hincrby"] == [("hincrby", (Keys().ranking_since, "alice", 1))]


def test_a_failed_commit_leaves_the_flags_and_the_next_one_counts_against_the_ranking():
    store = Store(fails=True)
    with pytest.raises(StalePlanError):
        _write(store, rests={9: None})
    assert ("delete", store.ranking.keys()) in store.pipes[-1].calls, "the DEL was sent, and failed"
    assert store.ranking.ranked and store.ranking.touched == 0, "the ranking is still there: still counted against"
    store.fails = False
    _write(store)
    assert ("hincrby", (Keys().ranking_since, "alice", 1)) in store.pipes[-1].calls
    _write(store, rests={9: None})
    assert not store.ranking.ranked and store.ranking.touched == 2


def test_a_new_leaders_rebuild_says_there_is_no_ranking(fake_redis, monkeypatch):
    from labq.scheduler.store.state import SchedulerStore
    store = SchedulerStore(fake_redis, Keys(), "s1")
    monkeypatch.setattr(store, "txn", lambda build, replicas=0: build(Recorder()))
    store.ranking.ranked = True
    store.rebuild_stat_rows([])
    assert not store.ranking.ranked, "deleted with the rows: the next quiet pass publishes at once"


def test_the_commits_list_each_users_changed_ids_once_up_to_cap(monkeypatch):
    from labq.scheduler.store import ranking
    monkeypatch.setattr(ranking, "CAP", 2)
    store = Store()
    _write(store)
    _write(store)
    assert ("hset", (Keys().ranking_mine, "alice", "7:1.0")) in store.pipes[-1].calls and store.ranking.mine == {"alice": [(7, 1.0)]}
    store.fails = True
    b = Batch()
    b.jobs = {i: Job(id=i, user="alice", account="eta", argv=["true"], workdir="/tmp", submit_time=1.0) for i in (8, 9)}
    with pytest.raises(StalePlanError):
        Committer().write(store, b, 2.0, {}, {}, None, lambda budget, now: "p", 0)
    assert ("hset", (Keys().ranking_mine, "alice", "*")) in store.pipes[-1].calls, "past CAP: prio ranks the rows"
    assert store.ranking.mine == {"alice": [(7, 1.0)]}, "not in: the list as it was"
    store.fails = False
    Committer().write(store, b, 2.0, {}, {}, None, lambda budget, now: "p", 0)
    assert store.ranking.mine == {"alice": None}
    store.ranking.publish(lambda build: build(Recorder()), "t", 3.0, {})
    assert store.ranking.mine == {}


def test_a_rests_change_counts_as_its_owners_and_only_an_unknown_owner_deletes_the_ranking():
    store = Store()
    store.ranking.owners = {9: ("bob", 5.0)}
    _write(store, rests={9: None})          # bob's array: gone (cancelled whole)
    calls = store.pipes[-1].calls
    assert ("hincrby", (Keys().ranking_since, "bob", 1)) in calls
    assert ("hset", (Keys().ranking_mine, "bob", "*", {"\nbob": "\n9:5.0"})) in calls, \
        "'*' for an older client; the array listed for bob's prio to patch"
    assert store.ranking.ranked and store.ranking.owners == {} and store.ranking.mine["bob"] == []
    assert store.ranking.arrays == {"bob": {9: 5.0}}
    b = Batch()
    b.jobs[8] = Job(id=8, user="bob", account="eta", argv=["true"], workdir="/tmp", submit_time=3.0)
    Committer().write(store, b, 2.0, {}, {}, None, lambda budget, now: "p", 0)
    assert ("hset", (Keys().ranking_mine, "bob", "*", {"\nbob": "8:3.0\n9:5.0"})) in store.pipes[-1].calls, \
        "a later job of bob's: both fields again (his prio reads the arrays' one first)"
    _write(store, rests={10: None})         # an array no ranking or commit since knew of
    assert ("delete", store.ranking.keys()) in store.pipes[-1].calls and not store.ranking.ranked
