"""The daemon and poison entries, on fakeredis and on a real redis-server (the `conns` fixture):
a handler that raises answers its one entry, an entry the leader died on twice is never handled a
third time, and `labq admin dead` lists what was dead-lettered."""
import json
import time

from click.testing import CliRunner

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.store.keys import GROUP
from labq.scheduler.store.reads import Reader
from tests.harness import BODY, CFG, FROZEN, K, reply, setup, submit, taken, woke


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
    assert len(dead) == 1 and "KeyError" in dead[0][1]["reason"] and dead[0][1]["source"] == K.taken
    assert taken(r) == 0


class Died(BaseException):
    """A leader's death in the middle of handling (what kill -9 or the watchdog does to a hung one)."""


def _dies_on(s, monkeypatch, name, calls):
    real = s.handlers.handle

    def handle(user, op, body, now):
        calls.append(body.get("name"))
        if body.get("name") == name:
            raise Died()
        return real(user, op, body, now)
    monkeypatch.setattr(s.handlers, "handle", handle)


def test_only_the_entry_in_hand_when_leaders_died_is_blamed(conns, monkeypatch):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", {**BODY, "name": "before"}, "before")
    submit(r, "alice", {**BODY, "name": "killer"}, "killer")
    submit(r, "alice", {**BODY, "name": "fine"}, "fine")
    r.xadd(K.events, {"kind": "started", "job": "1", "attempt": "1", "body": "{}"})
    calls: list = []
    leaders = [s]
    for n in range(3):     # the first dies reading a batch, two recovering leaders die on `killer` in hand
        _dies_on(leaders[-1], monkeypatch, "killer", calls)
        try:
            leaders[-1].tick(time.time() + n, woke(r))
            raise AssertionError("the leader did not die")
        except Died:
            pass
        r.delete(K.leader)
        leaders.append(Scheduler(r, CFG, me=f"s{n + 2}", clock=FROZEN))
    assert calls.count("killer") == 3
    calls.clear()
    _dies_on(leaders[-1], monkeypatch, "killer", calls)
    leaders[-1].tick(time.time() + 4)
    assert "killer" not in calls     # not handled a fourth time
    got = reply(r, "killer")
    assert not got["ok"] and "stopped the scheduler twice" in got["error"]
    assert reply(r, "fine")["ok"] and reply(r, "before")["ok"]    # read with it, never blamed
    reasons = [f["reason"] for _, f in r.xrange(K.dead)]
    assert len(reasons) == 1 and "twice" in reasons[0]
    assert taken(r) == 0 and r.xpending(K.events, GROUP)["pending"] == 0
    assert r.get(K.in_hand) is None


def test_an_entry_read_by_a_leader_that_was_killed_is_handled_as_usual(conns):
    r, raw = conns
    setup(r, raw, time.time())
    submit(r, "alice", BODY, "once")
    r.lmove(K.requests, K.taken, "RIGHT", "LEFT")    # taken by leaders, each killed before it answered
    s3 = Scheduler(r, CFG, me="s3", clock=FROZEN)
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
    monkeypatch.setattr(Ctx, "client", property(lambda self: type("C", (), {"read": Reader(r, K), "k": K})()))
    out = CliRunner().invoke(admin.admin, ["dead", "--json"], obj=ctx)
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert len(rows) == 1 and rows[0]["source"] == K.events and "end_time" in rows[0]["reason"]
    assert json.loads(rows[0]["entry"])["kind"] == "finished"
    text = CliRunner().invoke(admin.admin, ["dead"], obj=ctx)
    assert text.exit_code == 0 and "end_time" in text.output and K.events in text.output
