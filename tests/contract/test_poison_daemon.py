"""The daemon and poison entries, on fakeredis and on a real redis-server (the `conns` fixture):
a handler that raises answers its one entry, an entry the leader died on twice is never handled a
third time, and `labq admin dead` lists what was dead-lettered."""
import json
import time

from click.testing import CliRunner

from labq.scheduler.daemon import Scheduler
from labq.scheduler.store.keys import CONSUMER, GROUP
from tests.harness import BODY, CFG, FROZEN, K, reply, setup, submit, woke


def test_a_handler_that_raises_answers_its_entry_only(conns, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    real = s.handlers.handle

    def flaky(user, op, body, now):
        if body.get("name") == "boom":
            raise KeyError("a bug")
        return real(user, op, body, now)
    monkeypatch.setattr(s.handlers, "handle", flaky)
    submit(r, "alice", {**BODY, "name": "boom"}, "bad")
    submit(r, "alice", BODY, "good")
    s.tick(time.time(), woke(r))
    bad = reply(r, "bad")
    assert not bad["ok"] and "internal error: KeyError" in bad["error"]
    assert reply(r, "good")["ok"] and r.zcard(K.active) == 1
    dead = r.xrange(K.dead)
    assert len(dead) == 1 and "KeyError" in dead[0][1]["reason"] and dead[0][1]["source"] == K.inbox("alice")
    assert r.xpending(K.inbox("alice"), GROUP)["pending"] == 0


def test_an_entry_the_leader_died_on_twice_is_not_run_again(conns, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", BODY, "killer")
    submit(r, "alice", {**BODY, "name": "fine"}, "fine")
    r.xadd(K.events, {"kind": "started", "job": "1", "attempt": "1", "body": "{}"})
    s.store.ensure_group(K.inbox("alice"))
    r.sadd(K.inboxes, "alice")
    # Two leaders read these and died before acknowledging (delivered twice, never acked).
    for ident in (">", "0"):
        r.xreadgroup(GROUP, CONSUMER, {K.inbox("alice"): ident, K.events: ident})
    s2 = Scheduler(r, raw, CFG, me="s2", clock=FROZEN)   # a new process: it recovers what is pending
    calls = []
    real = s2.handlers.handle
    monkeypatch.setattr(s2.handlers, "handle", lambda *a: calls.append(a[2].get("name")) or real(*a))
    r.delete(K.leader)
    s2.tick(time.time() + 1)
    assert calls == []      # neither was handled a third time
    for rid in ("killer", "fine"):
        got = reply(r, rid)
        assert not got["ok"] and "stopped the scheduler twice" in got["error"]
    reasons = [f["reason"] for _, f in r.xrange(K.dead)]
    assert len(reasons) == 3 and all("twice" in x for x in reasons)
    for stream in (K.inbox("alice"), K.events):
        assert r.xpending(stream, GROUP)["pending"] == 0
    # An entry delivered once before a crash (an ordinary kill -9) is handled as usual.
    submit(r, "alice", BODY, "once")
    r.xreadgroup(GROUP, CONSUMER, {K.inbox("alice"): ">"})
    s3 = Scheduler(r, raw, CFG, me="s3", clock=FROZEN)
    r.delete(K.leader)
    s3.tick(time.time() + 2)
    assert reply(r, "once")["ok"]


def test_admin_dead_lists_the_dead_letters(conns, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    r.xadd(K.events, {"kind": "finished", "job": "1", "attempt": "1", "body": '{"end_time": "abc"}'})
    s.tick(time.time())
    from labq.cli import admin
    from labq.cli.common import Ctx
    ctx = Ctx(None)
    monkeypatch.setattr(Ctx, "client", property(lambda self: type("C", (), {"r": r, "k": K})()))
    out = CliRunner().invoke(admin.admin, ["dead", "--json"], obj=ctx)
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert len(rows) == 1 and rows[0]["source"] == K.events and "end_time" in rows[0]["reason"]
    assert json.loads(rows[0]["entry"])["kind"] == "finished"
    text = CliRunner().invoke(admin.admin, ["dead"], obj=ctx)
    assert text.exit_code == 0 and "end_time" in text.output and K.events in text.output
