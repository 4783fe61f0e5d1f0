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
