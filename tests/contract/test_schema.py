"""The schema version in Redis: written on first start, migrated forward, refused when newer."""
import os
import subprocess
import sys

import pytest

from labq.scheduler.errors import UsageError
from labq.scheduler.store import schema
from labq.scheduler.store.keys import Keys
from tests.harness import ROOT


@pytest.mark.parametrize("store", ["fake_redis", "real_redis"])
def test_first_start_writes_the_version_and_a_newer_layout_is_refused(store, request):
    r, k = request.getfixturevalue(store), Keys("sv")
    assert schema.check(r, k) == 1 and int(r.get(k.schema)) == schema.CURRENT
    r.set(k.schema, schema.CURRENT + 1)
    with pytest.raises(UsageError, match=rf"schema {schema.CURRENT + 1}, newer than this labq"):
        schema.check(r, k)
    assert int(r.get(k.schema)) == schema.CURRENT + 1, "a refusal changes nothing"


def test_older_data_is_migrated_one_step_at_a_time(real_redis, monkeypatch):
    k, seen = Keys("sv"), []
    real_redis.set(k.schema, 1)
    monkeypatch.setitem(schema.MIGRATIONS, 1, lambda r, keys: seen.append(1) or r.set("sv:moved", "yes"))
    monkeypatch.setitem(schema.MIGRATIONS, 2, lambda r, keys: seen.append(2))
    assert schema.check(real_redis, k, current=3) == 1
    assert seen == [1, 2] and real_redis.get("sv:moved") == "yes" and real_redis.get(k.schema) == "3"


def test_the_scheduler_refuses_to_start_on_newer_data(real_redis, redis_server, tmp_path):
    real_redis.set("labq:schema", 99)
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[redis]\nurl = "{redis_server.url}"\n')
    p = subprocess.run([sys.executable, "-m", "labq", "--config", str(cfg), "scheduler"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 2, p.stderr
    assert "schema 99, newer than this labq" in p.stderr and "Traceback" not in p.stderr
