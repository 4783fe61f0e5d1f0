"""`labq budget`'s balances through the thin client (no job model, no dataclasses, no config: the
budgets as the client's settings cache keeps them, clientcache.books) equal the full client's
(Client.balances, ledger.Budget and model.Job) on one real Redis: a monthly budget in another time
zone with a job running across its midnight, a budget without periods, an active override, a limit
set by `labq budget set`, and a past period (issue 39 item 4). The thin client decodes only the
records that hold a commitment: at 10,000 held jobs, decoding every active one cost ~70 ms."""
import json
from datetime import datetime, timezone

import pytest

from labq.scheduler import cjson
from labq.scheduler.client import Client
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import clientconf, config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.thinclient import ThinClient
from tests.harness import FROZEN, K, push

pytestmark = pytest.mark.redis
T0 = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc).timestamp()

CONFIG = """
[scheduler]
kill_wait = "0s"
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["alice"]
[accounts.zeta]
users = ["alice"]
[security]
admins = ["root"]
[[budgets]]
name = "m"
account = "eta"
limit = 100.0
period = "month"
timezone = "Europe/Berlin"
[[budgets]]
name = "z"
account = "zeta"
limit = 50.0
reserve = 0.1
"""
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 3 * 3600, "account": "eta"}


json_loads = json.loads


def _request(r, user, op, body, rid):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps(body)})
    r.lpush(K.wake, f"user:{user}")


def _woke(r):
    return r.lrange(K.wake, 0, -1)


def test_thin_balances_are_the_full_clients(redis_server, tmp_path, monkeypatch):
    r = redis_server.client()
    r.flushall()
    path = tmp_path / "labq.toml"
    path.write_text(CONFIG)
    cfg = config.load(str(path))
    AgentStore(r, K).register("n1", 64, 256 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(8)], "h", 1, 10 ** 9)
    s = Scheduler(r, cfg, me="s1", clock=FROZEN)
    s.tick(T0)
    _request(r, "alice", "submit", BODY, "a")                          # runs across Berlin's midnight
    _request(r, "alice", "submit", {**BODY, "account": "zeta", "gpus": 2}, "b")   # dispatched, start unknown
    s.tick(T0, _woke(r))
    AgentStore(r, K).post("started", 1, 1, "n1", {"pid": 7, "start_time": T0 + 2})
    s.tick(T0 + 3, _woke(r))
    _request(r, "root", "budget_override", {"budget": "z", "amount": 5, "approver": "pi", "expires": 7200,
                                            "reason": "deadline"}, "o")
    _request(r, "root", "budget_set", {"budget": "m", "limit": 80}, "l")
    s.tick(T0 + 4, _woke(r))
    for i, name in enumerate(("held", 'x"commit":[1]', "held")):     # never run: no commitment, not decoded
        _request(r, "alice", "submit", {**BODY, "hold": True, "name": name}, f"h{i}")
    s.tick(T0 + 4, _woke(r))
    full = Client(cfg, r=r, user="alice")
    thin = ThinClient(redis_server.url, "labq", user="alice")
    decoded = []

    def counted(real):
        def loads(text, *a, **kw):
            decoded.append(text)
            return real(text, *a, **kw)
        return loads
    monkeypatch.setattr(json, "loads", counted(json_loads))
    monkeypatch.setattr(cjson, "loads", counted(cjson.loads))
    assert len(thin.read.holdings()) == 2 and len(thin.read.active()) == 5
    records = [t for t in decoded if t.startswith('{"id":')]
    assert len(records) == 5 + 2, "holdings() decoded the two records with a commitment only"
    monkeypatch.undo()
    books = clientconf.books_of(cfg)
    for now, period in [(T0 + 5, None), (T0 + 1800, None), (T0 + 3605, None), (T0 + 3 * 3600, None),
                        (T0 + 8000, None), (T0 + 3605, "2026-11"), (T0 + 3605, "2026-12"), (T0 + 3605, "2026-W49")]:
        want = full.balances(now, period)
        got = thin.budget_balances(books["budgets"], now, period)
        assert [tuple(_fields(b)) for b in got] == [tuple(_fields(b)) for b in want], (now, period)
    assert any(b.committed and b.accrued for b in full.balances(T0 + 1800)), "the running jobs hold commitments"
    assert any(b.overrides for b in full.balances(T0 + 1800)), "the override is active"


def _fields(b):
    return (b.name, b.unit, b.limit, b.spent, b.committed, b.accrued, b.overrides, b.period, b.available)
