"""Intake that no client can block or trim (issue 34): one request list that clients only LPUSH onto,
moved by the scheduler into its own list until answered; a user's flood is bounded per tick; a
full Redis is one clear line. On fakeredis and a real redis-server (the OOM case: real only)."""
import json
import time

import pytest

from labq.scheduler.client import Client
from labq.scheduler.daemon.triage import MAX_USER_REQUESTS_PER_TICK
from labq.scheduler.errors import UnreachableError
from labq.scheduler.settings import config
from labq.scheduler.store.keys import Keys
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, K, push, reply, setup, submit, taken


def test_one_users_flood_is_refused_beyond_its_share_and_others_are_answered(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    p = r.pipeline(transaction=False)
    for i in range(MAX_USER_REQUESTS_PER_TICK + 50):
        p.lpush(K.requests, json.dumps({"rid": f"m{i}", "op": "hold", "user": "mallory",
                                        "body": json.dumps({"ids": ["999999"]})}))
    p.execute()
    submit(r, "alice", BODY, "alice")
    s.tick(time.time())
    assert reply(r, "alice")["ok"]
    last = reply(r, f"m{MAX_USER_REQUESTS_PER_TICK + 49}")
    assert not last["ok"] and last["code"] == 3 and "in one tick" in last["error"]
    assert "no such job" in reply(r, "m0")["error"]
    assert taken(r) == 0
    # The next tick, mallory's share is whole again.
    push(r, "mallory", {"rid": "later", "op": "hold", "body": json.dumps({"ids": ["999999"]})})
    s.tick(time.time() + 1)
    assert "no such job" in reply(r, "later")["error"]


def test_what_clients_did_to_the_old_inboxes_touches_no_one(conns):
    """The attacks of issue 34 on the old per-user streams: the scheduler no longer reads them."""
    r, raw = conns
    s = setup(r, raw, time.time())
    r.xadd("labq:inbox:bob", {"op": "x"}, id="18446744073709551615-18446744073709551615")
    r.xadd("labq:inbox:alice", {"op": "x"}, maxlen=0)
    for who in ("bob", "alice", "root"):
        submit(r, who, BODY, f"r-{who}")
    s.tick(time.time())
    assert all(reply(r, f"r-{who}")["ok"] for who in ("bob", "alice", "root"))


def test_requests_a_leader_took_and_never_answered_are_answered_by_the_next(conns):
    r, raw = conns
    setup(r, raw, time.time())
    for i in range(3):
        submit(r, "alice", {**BODY, "name": f"j{i}"}, f"r{i}")
    r.lmove(K.requests, K.taken, "RIGHT", "LEFT")     # a leader took one and died
    r.delete(K.leader)
    from labq.scheduler.daemon.loop import Scheduler
    from tests.harness import CFG, FROZEN
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    s2.tick(time.time())
    got = [reply(r, f"r{i}") for i in range(3)]
    assert all(g and g["ok"] for g in got) and sorted(g["job_id"] for g in got) == [1, 2, 3]
    assert taken(r) == 0


def test_a_batch_is_acknowledged_by_one_trim_and_no_one_elses_request_goes_with_it(conns, monkeypatch):
    """The requests a commit answers leave `taken` by one LTRIM of its oldest (store/requestq.ack)
    only where `taken` holds nothing but what this leader moved. A request another client moved
    there (a deposed leader resumed, issue 35) before the commit's fence (its WATCH, opened with the
    round's done keys: requestq.replies_done) stays, and one moved after it (while the round is
    handled or its commit built) fails the commit: the next tick answers every request, that one too."""
    r, raw = conns
    s = setup(r, raw, time.time())
    trimmed = []
    real = s.store._oldest_held
    monkeypatch.setattr(s.store, "_oldest_held", lambda eids: trimmed.append(real(eids)) or trimmed[-1])
    for i in range(3):
        submit(r, "alice", {**BODY, "name": f"j{i}"}, f"r{i}")
    s.tick(time.time())
    assert all(reply(r, f"r{i}")["ok"] for i in range(3)) and taken(r) == 0 and trimmed == [True]
    foreign = json.dumps({"rid": "f", "op": "submit", "body": json.dumps(BODY), "user": "bob"})
    real_done = s.store.replies_done

    def older_one_first(rids, *a, **kw):     # moved in after this tick took its own, older than them
        r.rpush(K.taken, foreign)
        monkeypatch.setattr(s.store, "replies_done", real_done)
        return real_done(rids, *a, **kw)
    monkeypatch.setattr(s.store, "replies_done", older_one_first)
    submit(r, "alice", BODY, "a1")
    submit(r, "alice", BODY, "a2")
    s.tick(time.time())
    assert reply(r, "a1")["ok"] and reply(r, "a2")["ok"]
    assert r.lrange(K.taken, 0, -1) == [foreign] and reply(r, "f") is None and trimmed[-1] is False
    s.tick(time.time())                 # left behind: handled by the recovery, not lost
    assert reply(r, "f")["ok"] and taken(r) == 0
    real_ack = s.store.ack

    def moved_meanwhile(p, stream, *eids):
        r.lpush(K.taken, foreign.replace('"f"', '"g"'))
        monkeypatch.setattr(s.store, "ack", real_ack)
        return real_ack(p, stream, *eids)
    monkeypatch.setattr(s.store, "ack", moved_meanwhile)
    submit(r, "alice", BODY, "b1")
    s.tick(time.time())                 # the commit fails: nothing of it is written
    assert reply(r, "b1") is None
    for _ in range(3):
        s.tick(time.time())
    assert reply(r, "b1")["ok"] and reply(r, "g")["ok"] and taken(r) == 0
    real_txn = s.store.txn

    def moved_while_handled(build, *a):     # after the fence, before the commit is built
        r.lpush(K.taken, foreign.replace('"f"', '"h"'))
        monkeypatch.setattr(s.store, "txn", real_txn)
        return real_txn(build, *a)
    monkeypatch.setattr(s.store, "txn", moved_while_handled)
    submit(r, "alice", BODY, "c1")
    s.tick(time.time())                 # the commit fails on the fence: nothing of it is written
    assert reply(r, "c1") is None
    for _ in range(3):
        s.tick(time.time())
    assert [len(r.lrange(K.reply(x), 0, -1)) for x in ("c1", "h")] == [1, 1] and taken(r) == 0


@pytest.mark.redis
def test_a_full_redis_is_one_line_and_nothing_submitted(redis_server):
    r = redis_server.client()
    r.flushall()
    cfg = config.loads("")
    before = r.config_get("maxmemory")["maxmemory"], r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        for client in (Client(cfg, url=redis_server.url, user="alice"),
                       ThinClient(redis_server.url, "labq", user="alice")):
            with pytest.raises(UnreachableError) as e:
                client.request("submit", BODY, timeout=2, tries=1)
            text = str(e.value)
            assert text.startswith("Redis is full (maxmemory reached): request ") and "was not submitted" in text
            assert "\n" not in text
    finally:
        r.config_set("maxmemory", before[0])
        r.config_set("maxmemory-policy", before[1])
    assert r.llen(Keys().requests) == 0


@pytest.mark.redis
def test_a_full_redis_pauses_the_scheduler_and_it_goes_on_once_there_is_room(redis_server, caplog):
    import threading

    import redis as redis_py

    from labq.scheduler.daemon.loop import Scheduler
    from tests.harness import CFG, wait_for
    r = redis_server.client()
    r.flushall()
    raw = redis_py.Redis(unix_socket_path=redis_server.sock)
    setup(r, raw, time.time())
    r.delete(K.leader)
    submit(r, "alice", BODY, "waits")
    before = r.config_get("maxmemory")["maxmemory"], r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    done = threading.Event()
    s = Scheduler(r, CFG, me="full")
    t = threading.Thread(target=s.run, kwargs={"stop": done.is_set})
    try:
        t.start()
        wait_for(lambda: "Redis is full" in caplog.text, 30, what="the scheduler to say Redis is full")
        assert t.is_alive() and reply(r, "waits") is None
    finally:
        r.config_set("maxmemory", before[0])
        r.config_set("maxmemory-policy", before[1])
    try:
        got = wait_for(lambda: reply(r, "waits"), 30, what="the answer once there is room")
        assert got["ok"] and taken(r) == 0
    finally:
        done.set()
        t.join(30)
