"""One request must not freeze the scheduler (issue 34): job ids per request are bounded and read in
bulk, and a refused request leaves nothing in Redis; on fakeredis and a real redis-server."""
import json
import time
from dataclasses import replace

from labq.scheduler.daemon.loop import Scheduler
from tests.harness import BODY, CFG, FROZEN, K, push, reply, setup, taken, woke


def send(r, user, op, body, rid):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps(body)})
    r.lpush(K.wake, f"user:{user}")


def gets(r, conns_kind) -> int:
    return int(r.info("commandstats").get("cmdstat_get", {}).get("calls", 0)) if conns_kind == "real" else 0


def test_a_cancel_of_200000_ids_is_refused_in_one_line(conns):
    r, raw = conns
    setup(r, raw, time.time())
    # A site that takes big scripts takes a 2 MB cancel too: the id count is what bounds it.
    s = Scheduler(r, replace(CFG, max_request_bytes=8 << 20), me="s1", clock=FROZEN)
    send(r, "alice", "cancel", {"ids": [str(i) for i in range(1, 200_001)]}, "huge")
    started = time.monotonic()
    s.tick(time.time(), woke(r))
    got = reply(r, "huge")
    assert not got["ok"] and got["code"] == 3 and "200000 job ids" in got["error"] and "10000" in got["error"]
    assert time.monotonic() - started < 60     # generous: it used to take minutes


def test_ten_thousand_ended_jobs_are_read_in_bulk(conns, request):
    r, raw = conns
    s = setup(r, raw, time.time())
    send(r, "alice", "submit", {**BODY, "array": [0, 199, 1], "hold": True}, "arr")
    s.tick(time.time(), woke(r))
    first = reply(r, "arr")["job_id"]
    send(r, "alice", "cancel", {"ids": [str(first)]}, "c1")
    s.tick(time.time(), woke(r))
    ids = [str(first + i) for i in range(200)] + [str(10 ** 6 + i) for i in range(9_800)]
    kind = request.node.callspec.params["conns"]
    before = gets(r, kind)
    send(r, "alice", "cancel", {"ids": ids}, "again")
    s.tick(time.time(), woke(r))
    got = reply(r, "again")
    assert len(got["results"]) == 10_000 and not got["ok"]
    assert sum("already ended" in x["error"] for x in got["results"]) == 200
    assert sum("no such job" in x["error"] for x in got["results"]) == 9_800
    assert gets(r, kind) - before < 20     # bulk reads, not a GET per id


def test_a_range_naming_millions_of_tasks_is_refused(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    send(r, "alice", "cancel", {"ids": ["5_[0-99999]"] * 5_000}, "many")
    s.tick(time.time(), woke(r))
    got = reply(r, "many")
    assert not got["ok"] and got["code"] == 3 and "tasks" in got["error"]


def test_a_refused_20mb_body_does_not_stay_in_redis(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    send(r, "alice", "submit", {**BODY, "script": "x" * (20 << 20)}, "big")
    s.tick(time.time(), woke(r))
    assert "max_request_bytes" in reply(r, "big")["error"]
    send(r, "alice", "submit", BODY, "fine")
    s.tick(time.time(), woke(r))
    assert reply(r, "fine")["ok"]
    assert taken(r) == 0 and not r.keys("labq:inbox*")
