"""Issue 34: a Redis whose AOF is synced once a second (`appendfsync everysec`) was led silently. The
scheduler's durability check (the one `labq scheduler` runs before leading) now says so, once, in
its log; `always` says nothing. On a real redis-server, whose settings a test may change."""
import logging

import pytest

from labq.scheduler.daemon.durability import Durability
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.state import SchedulerStore

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("policy, warned", [("everysec", True), ("no", True), ("always", False)])
def test_an_aof_not_synced_at_every_write_is_a_warning(redis_server, tmp_path, caplog, policy, warned):
    r = redis_server.client()
    r.flushall()
    before = r.config_get("appendfsync")["appendfsync"]
    r.config_set("appendfsync", policy)
    try:
        with caplog.at_level(logging.WARNING, logger="labq.scheduler"):
            Durability(SchedulerStore(r, Keys(), "t"), redis_server.url, False, str(tmp_path / "state")).check()
    finally:
        r.config_set("appendfsync", before)
    lines = [rec.getMessage() for rec in caplog.records if "appendfsync" in rec.getMessage()]
    assert lines == ([f"Redis at {redis_server.url} syncs its AOF with appendfsync {policy}, not always: a crash "
                      "of the machine can lose the last second of acknowledged submits and charges"]
                     if warned else [])
