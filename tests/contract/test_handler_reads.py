"""The request handlers read nothing themselves (issue 40 item 1): the round reads the ended records
its requests name in one bulk read (daemon/tickread.py), and a handler that needs one more raises
change.Unread, is handed it and asked again. Answers are as they were when the handlers read Redis."""
import json
import time

import pytest

from labq.scheduler.daemon import lookup
from labq.scheduler.daemon.change import Read, Unread
from labq.scheduler.daemon.tickread import TickRead
from tests.harness import BODY, act, push, reply, setup, submit, submit_ok, woke


def _ended(r, s, now, n):
    """`n` jobs submitted held and cancelled: ended records in Redis, none in the scheduler's table."""
    ids = [submit_ok(r, s, now, f"s{i}", {**BODY, "hold": True})["job_id"] for i in range(n)]
    assert act(r, s, now + 1, "del", "cancel", [str(i) for i in ids])["ok"]
    assert not set(ids) & s.jobs.keys()
    return ids


def test_a_rounds_requests_read_the_records_they_name_in_one_read(conns, monkeypatch):
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    ids = _ended(r, s, now, 3)
    reads = []
    real = s.store.jobs
    monkeypatch.setattr(s.store, "jobs", lambda want: reads.append(list(want)) or real(want))
    for i, jid in enumerate(ids):
        push(r, "alice", {"rid": f"c{i}", "op": "cancel", "body": json.dumps({"ids": [str(jid)]})})
    submit(r, "alice", {**BODY, "dependency": f"afterany:{ids[0]}:{ids[2]}"}, "dep")
    s.tick(now + 2, woke(r))
    assert reads == [sorted(ids)]      # one read for the round, not one per request
    for i, jid in enumerate(ids):
        assert reply(r, f"c{i}")["results"] == [{"id": str(jid), "ok": False, "error": f"job {jid} already ended"}]
    assert reply(r, "dep")["ok"]


def test_a_record_the_round_did_not_read_is_read_when_a_handler_asks(conns):
    """A dependency on a task of an ended array: its head is read with the round, its tasks when the
    handler asks for them (Unread); the answer is the same."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    a = submit_ok(r, s, now, "arr", {**BODY, "hold": True, "array": [0, 3, 1]})["job_id"]
    assert act(r, s, now + 1, "del", "cancel", [str(a)])["ok"]
    submit(r, "alice", {**BODY, "dependency": f"afterany:{a}_2"}, "dep")
    s.tick(now + 2, woke(r))
    assert reply(r, "dep")["ok"]
    submit(r, "alice", {**BODY, "dependency": f"afterany:{a}_9"}, "none")
    s.tick(now + 3, woke(r))
    assert "no such job" in reply(r, "none")["error"]


def test_named_guesses_the_ids_a_body_names_without_parsing_it():
    assert lookup.named("cancel", json.dumps({"ids": ["42", "43_1", "44_[1-3]", "x"]})) == [42, 43, 44]
    assert lookup.named("submit", json.dumps({**BODY, "dependency": "afterok:12:13_2,singleton"})) == [12, 13]
    assert lookup.named("submit", json.dumps(BODY)) == [] and lookup.named("drain", '{"node": "7"}') == []
    assert lookup.named("cancel", json.dumps({"ids": [str(i) for i in range(lookup.MAX_NAMED + 1)]})) == []


def test_named_reads_a_submits_dependency_as_jobspec_does_not_a_lookalike():
    """A submit's dependency ids are read from its parsed body (issue 40 item 1): an exported variable
    named `dependency` (`--export=ALL` in a shell that has one) names nothing; it did, by the body's text."""
    env = {"dependency": "afterok:77"}
    assert lookup.named("submit", json.dumps({**BODY, "env": env, "export": "ALL"})) == []
    assert lookup.named("submit", json.dumps({**BODY, "env": env, "dependency": "afterok:5_1:6"})) == [5, 6]
    assert lookup.named("submit", json.dumps({**BODY, "dependency": "afterok:5?afterok:6"})) == []   # refused
    parsed = []
    text = json.dumps({**BODY, "dependency": "afterany:9"})
    assert lookup.named("submit", text, lambda t: parsed.append(t) or json.loads(t)) == [9] and parsed == [text]


class _Holder:
    def __init__(self):
        self.read, self.jobs = Read(), {}


class _Store:
    def __init__(self):
        self.asked = []

    def jobs(self, ids):
        self.asked.append(("jobs", list(ids)))
        return []

    def spent(self):
        self.asked.append(("spent",))
        return {"lab": 5}

    def known_keys(self, keys):
        self.asked.append(("keys", list(keys)))
        return {"import:a"}


def test_a_decider_is_asked_again_with_what_it_asked_for():
    holder, store = _Holder(), _Store()
    reads = TickRead(holder, store, store.jobs)
    asks = iter([Unread([7, 8]), Unread(spent=True, keys=["import:a", "import:b"])])

    def decide():
        need = next(asks, None)
        if need is not None:
            raise need
        return "decided"
    assert reads.decided(decide) == "decided"
    assert store.asked == [("jobs", [7, 8]), ("spent",), ("keys", ["import:a", "import:b"])]
    assert holder.read.records == {7: None, 8: None} and holder.read.spent == {"lab": 5}
    assert holder.read.charged == {"import:a": True, "import:b": False}
    with pytest.raises(RuntimeError, match="asked for what was read already"):
        reads.read(Unread([7]))


def test_the_ended_jobs_dependencies_name_are_read_by_the_tick_once_a_round(conns, monkeypatch):
    """`sub --test-only` and `stat --start` see the ended jobs dependencies name as the policy pass does,
    read by the tick (change.Unread(ended=...): the shell's ended_jobs, the archive too), once for the
    round; the handlers keep nothing in the state (issue 40 item 1: no read through the shell)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    [jid] = _ended(r, s, now, 1)
    reads = []
    real = s.ended_jobs
    for holder in (s, s.inboxes.reads):      # the shell's (the pass) and the tick's read for the handlers
        monkeypatch.setattr(holder, "ended_jobs" if holder is s else "ended", lambda ids: reads.append(list(ids)) or real(ids))
    dep = {**BODY, "dependency": f"afterany:{jid}"}
    submit(r, "alice", {**dep, "test_only": True}, "t")
    push(r, "alice", {"rid": "st1", "op": "starts", "body": "{}"})
    s.tick(now + 2, woke(r))
    assert reply(r, "t")["starts_now"] is True and reply(r, "t")["reason"] is None and reply(r, "st1")["ok"]
    assert reads == [[jid]] and s.state.ended == {}         # the round's read, once; the handlers keep nothing
    submit(r, "alice", {**dep, "hold": True}, "held")
    push(r, "alice", {"rid": "st2", "op": "starts", "body": "{}"})
    s.tick(now + 3, woke(r))
    assert reply(r, "held")["ok"] and reply(r, "st2")["ok"]
    assert reads == [[jid]] * 3 and s.state.ended == {jid: "CA"}   # this round's, then the pass's, which keeps it
    push(r, "alice", {"rid": "st3", "op": "starts", "body": "{}"})
    s.tick(now + 4, woke(r))
    assert reply(r, "st3")["ok"] and reads == [[jid]] * 3          # kept: read no more
