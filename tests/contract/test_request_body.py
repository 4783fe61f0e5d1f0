"""A request's body on the wire (issue 39 item 3): clients write it as a JSON object inside the entry,
last (store/inbox.entry_text), and the scheduler parses it once (daemon/decode.entry cuts it off; a
body sent as a string of JSON was parsed twice, its escapes and all). A body sent as a string (a
client from before) is answered as ever; an entry whose body is not where it belongs is refused on
its own in one line. Fakeredis and a real redis-server."""
import json
import time
from types import SimpleNamespace

from labq.scheduler.daemon import decode
from labq.scheduler.store import inbox
from tests.harness import BODY, K, job, reply, setup, submit, taken, woke

MARK = "body-marker-9f3e"
ENV = {"PATH": "/usr/bin", "NOTE": 'a "quoted" value, with ,"body":{ inside'}


def test_a_body_goes_as_an_object_and_the_entry_parse_never_reads_it(conns, monkeypatch):
    """Failed before: the client wrote the body as a string (json.loads of the entry gave a str), and
    the entry's parse went through the whole body's text before decode.request parsed it again."""
    r, raw = conns
    s = setup(r, raw, time.time())
    body = {**BODY, "argv": [MARK], "export": "ALL", "env": ENV}
    submit(r, "alice", body, "obj")
    [entry] = raw.lrange(K.requests, 0, -1)
    assert json.loads(entry)["body"] == body          # an object, itself valid JSON with the rest
    parsed = []
    real = decode.json.loads

    def loads(text, *a, **kw):
        parsed.append(text)
        return real(text, *a, **kw)
    monkeypatch.setattr(decode, "json", SimpleNamespace(loads=loads))     # what decode.py parses
    s.tick(time.time(), woke(r))
    got = reply(r, "obj")
    assert got["ok"], got
    j = job(r, got["job_id"])
    assert j.argv == (MARK,)
    assert parsed and not any(MARK in t for t in parsed), parsed


def test_a_body_sent_as_a_string_by_an_older_client_is_answered_as_ever(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    fields = {"rid": "old", "op": "submit", "body": json.dumps({**BODY, "argv": [MARK]}), "user": "alice"}
    raw.lpush(K.requests, json.dumps(fields))
    s.tick(time.time(), woke(r))
    got = reply(r, "old")
    assert got["ok"] and job(r, got["job_id"]).argv == (MARK,), got


def test_an_entry_whose_body_object_is_not_last_is_refused_alone(conns):
    """Text after the body (a hand-made entry): the cut body is no JSON, refused in one line with the
    client's rid; the request after it is answered and nothing stays taken."""
    r, raw = conns
    s = setup(r, raw, time.time())
    raw.lpush(K.requests, '{"rid":"late","op":"submit","body":' + json.dumps(BODY) + ',"user":"alice"}')
    raw.lpush(K.requests, '{"rid":"nested","op":"submit","user":"alice","x":{"body":{}}}')
    submit(r, "alice", BODY, "next")
    s.tick(time.time(), woke(r))
    for rid in ("late", "nested"):
        got = reply(r, rid)
        assert got is not None and not got["ok"] and "\n" not in got["error"], (rid, got)
    assert reply(r, "next")["ok"] and taken(r) == 0


def test_both_shapes_decode_to_the_same_fields():
    fields = inbox.request_fields("submit", {**BODY, "env": ENV}, expires=time.time() + 30)
    new = inbox.entry_text(fields, "alice").encode()
    old = json.dumps({**fields, "user": "alice"}, separators=(",", ":")).encode()
    assert new != old and decode.entry(new, 1 << 20) == decode.entry(old, 1 << 20) == ({**fields, "user": "alice"}, None)
    assert inbox.entry_text({"rid": "x", "op": "submit", "body": "not an object"}, "alice") == \
        json.dumps({"rid": "x", "op": "submit", "body": "not an object", "user": "alice"}, separators=(",", ":"))


def test_a_client_asks_a_scheduler_from_before_again_the_old_way():
    """A scheduler from before 2026-12-06 refuses a body sent as an object (inbox.OLD_REFUSAL, nothing
    done): the client sends the request again with the body as a string, under a new id, and
    returns that answer. A scheduler that takes the object is asked once."""
    sent, answers = [], []

    def send(cmds):
        sent.append(cmds[0][2])
        return [1, 1]

    def pop(key, seconds):
        return key, json.dumps(answers.pop(0))
    answers[:] = [{"ok": False, "code": 2, "error": inbox.OLD_REFUSAL}, {"ok": True, "job_id": 7}]
    assert inbox.call(send, pop, K, "alice", "submit", {**BODY, "argv": [MARK]}) == {"ok": True, "job_id": 7}
    first, again = (json.loads(e) for e in sent)
    assert first["body"] == {**BODY, "argv": [MARK]} and json.loads(again["body"]) == first["body"]
    assert again["rid"] != first["rid"] and again["expires"]
    sent.clear()
    answers[:] = [{"ok": False, "code": 2, "error": "queue full"}]
    assert inbox.call(send, pop, K, "alice", "submit", BODY)["error"] == "queue full" and len(sent) == 1
