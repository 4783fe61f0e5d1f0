"""A runner posts `finished` until Redis has it (an outage delays the record, never changes it) -
unless its agent is gone and the result is kept on the spool: then the next runner of the slot
posts it, and this one must not retry for good (an orphan of a killed agent, Redis gone with its
test, was still retrying 90 minutes later)."""
import os
import threading
import types

import pytest

from labq.scheduler.store import faults
from labq.worker import ending


class _Away:
    def __init__(self, fail: int):
        self.fail, self.posts = fail, 0

    def post(self, *_):
        self.posts += 1
        if self.posts <= self.fail:
            raise faults.AWAY[0]("Redis is away")


def _run(orphaned: bool, kept: bool, fail: int, monkeypatch):
    monkeypatch.setattr(ending, "POST_WAIT", (0.001, 0.001))
    store = _Away(fail)
    st = types.SimpleNamespace(proc=object(), announced=True, store=store, job=types.SimpleNamespace(id=7), n=1,
                               s=types.SimpleNamespace(node="n1"), body={}, slot=None, kept=kept,
                               term=types.SimpleNamespace(orphaned=orphaned), ppid=os.getppid())
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("posted", ending.Ending(st).post_finished()), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), f"still retrying after {store.posts} posts"
    return out["posted"], store.posts


@pytest.mark.parametrize("kept", [True, False])
def test_a_runner_with_its_agent_retries_until_redis_has_it(kept, monkeypatch):
    assert _run(orphaned=False, kept=kept, fail=50, monkeypatch=monkeypatch) == (True, 51)


def test_an_orphan_holding_a_kept_result_leaves_it_on_the_spool(monkeypatch):
    assert _run(orphaned=True, kept=True, fail=10 ** 9, monkeypatch=monkeypatch) == (False, 1)


def test_an_orphan_without_a_kept_result_still_posts_it(monkeypatch):
    """Nothing on the spool (it could not be written): the post is the only copy."""
    assert _run(orphaned=True, kept=False, fail=50, monkeypatch=monkeypatch) == (True, 51)


def _kept_run(tmp_path, fail: int, monkeypatch) -> list[str]:
    """A slot's runner with its result kept on a real spool; the paths fsync'd while it posts."""
    from labq.worker import results
    spool = str(tmp_path / "spool")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(results.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                         real_fsync(fd))[1])
    results.keep(spool, 0, "7:1", 0, {"outcome": "completed"})
    monkeypatch.setattr(ending, "POST_WAIT", (0.001, 0.001))
    st = types.SimpleNamespace(proc=object(), announced=True, store=_Away(fail), job=types.SimpleNamespace(id=7),
                               n=1, s=types.SimpleNamespace(node="n1", spool=spool), body={},
                               slot=types.SimpleNamespace(index=0, entry="7:1"), kept=True,
                               term=types.SimpleNamespace(orphaned=False), ppid=os.getppid())
    assert ending.Ending(st).post_finished() is True
    assert results.kept(spool, 0, "7:1", 0) == {"outcome": "completed"}
    return synced


def test_a_result_posted_at_once_costs_no_fsync(tmp_path, monkeypatch):
    """The common path: Redis has the result within one post, so the spool copy is never synced
    (an fsync per job was 10 ms of each trivial job's slot time)."""
    assert _kept_run(tmp_path, fail=0, monkeypatch=monkeypatch) == []


def test_a_failed_post_syncs_the_kept_result_once(tmp_path, monkeypatch):
    """Redis away: the outage may outlast the host, so the kept copy (file and directory entry) is
    synced before the first wait, and only once however long the retries go on."""
    from labq.worker import results
    synced = _kept_run(tmp_path, fail=5, monkeypatch=monkeypatch)
    spool = str(tmp_path / "spool")
    assert synced == [results.path(spool, 0), os.path.join(spool, results.DIR)]
