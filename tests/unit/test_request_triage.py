"""The request screen (scheduler/daemon/triage.py) on its own: what the shell read about one request
in, an answer or the request for a handler out; no Redis and no daemon (the daemon's side is
tests/contract/test_daemon.py, test_intake_list.py, test_client_outcome.py)."""
import json
from types import SimpleNamespace

import pytest

from labq.scheduler.daemon import triage
from labq.scheduler.daemon.decode import Request
from labq.scheduler.errors import RefusedError, UsageError

NOW = 1_000_000.0
MAX = 1 << 20


def _fields(**extra) -> dict:
    return {"rid": "r1", "op": "submit", "body": json.dumps({"cmd": ["true"]}), **extra}


def test_a_refused_sender_is_answered_and_its_id_is_not_bound():
    got = triage.screen("1-0", _fields(), RefusedError("munge: expired credential"), None, MAX)
    assert isinstance(got, triage.Answered) and got.remember is False
    assert got.change.reply == {"ok": False, "code": 3, "error": "munge: expired credential"}


def test_a_refused_sender_is_refused_even_when_its_id_was_answered():
    got = triage.screen("1-0", _fields(), RefusedError("no"), {"ok": True, "job_id": 7}, MAX)
    assert isinstance(got, triage.Answered) and got.change.reply["ok"] is False


def test_a_retry_gets_the_answer_given_before_and_nothing_is_redone():
    prior = {"ok": True, "job_id": 7, "rid": "r1"}
    got = triage.screen("1-0", _fields(), "alice", prior, MAX)
    assert isinstance(got, triage.Answered) and got.change.reply == prior and got.remember
    assert got.change.jobs == [] and got.change.controls == []


def test_an_invalid_request_is_refused_under_its_clients_id():
    got = triage.screen("1-0", _fields(op="Not An Op"), "alice", None, MAX)
    assert isinstance(got, triage.Answered) and got.remember
    assert got.change.reply["ok"] is False and got.change.reply["code"] == 2 and got.change.reply["rid"] == "r1"


def test_a_good_request_goes_to_a_handler():
    got = triage.screen("1-0", _fields(), "alice", None, MAX)
    assert isinstance(got, Request) and (got.rid, got.op) == ("r1", "submit")


def test_a_request_read_after_its_deadline_is_refused_as_expired_by_the_later_clock():
    req = Request("r1", "submit", {}, NOW + 5)
    assert triage.expired(req, NOW, NOW + 4) is None
    late = triage.expired(req, NOW, NOW + 7)
    assert late is not None and late.change.reply["code"] == 4 and late.change.reply["rid"] == "r1"
    assert "2.0s after the client's deadline" in late.change.reply["error"]
    assert triage.expired(req, NOW + 9, NOW) is not None      # the tick's clock, when it is the later
    assert triage.expired(Request("r1", "submit", {}, None), NOW, NOW + 1e9) is None


def test_a_sender_past_this_ticks_share_is_refused():
    assert triage.bounded("alice", triage.MAX_USER_REQUESTS_PER_TICK, 10) == "alice"
    over = triage.bounded("alice", triage.MAX_USER_REQUESTS_PER_TICK + 1, 10)
    assert isinstance(over, RefusedError) and "alice" in str(over)
    assert isinstance(triage.bounded("bob", 1, triage.MAX_USER_BYTES_PER_TICK + 1), RefusedError)
    refused = RefusedError("no")
    assert triage.bounded(refused, 10**9, 10**12) is refused and triage.bounded(None, 10**9, 0) is None


def test_stat_rid_is_answered_from_the_kept_answer_and_shows_another_users_job_only_to_admins():
    rid = "a" * 32
    assert triage.status_of({"of": rid}) == rid
    with pytest.raises(UsageError):
        triage.status_of({"of": "not an id!"})
    assert triage.status(rid, None, None, "alice", ())["state"] == "unknown"
    refused = triage.status(rid, {"ok": False, "error": "x" * 500}, None, "alice", ())
    assert refused["state"] == "not submitted" and len(refused["detail"]) == 400
    bobs = SimpleNamespace(user="bob")
    kept = {"ok": True, "job_id": 7, "count": 3}
    assert triage.status(rid, kept, bobs, "alice", ())["state"] == "unknown"
    assert triage.status(rid, kept, bobs, "root", ("root",)) == {"ok": True, "rid": rid, "state": "submitted",
                                                                  "job_id": 7, "count": 3}
    assert triage.status(rid, kept, None, "alice", ())["state"] == "submitted"     # archived: the id is theirs
    assert triage.status(rid, {"ok": True}, None, "alice", ())["state"] == "done"


def test_a_mass_cancel_handled_again_names_what_the_dead_leader_cancelled_once():
    """triage.resumed (issue 40 item 1: decided from what the shell read, store.partial, not read by it)."""
    from labq.scheduler.daemon.change import Change
    from labq.scheduler.jobs import idruns

    def runs(*ids):
        out = idruns.Runs()
        for i in ids:
            out.add_id(None, i, "cancelled")
        return out

    prior = runs(1, 2).runs                              # the dead leader's chunk
    again = runs(2, 3)                                   # this handling: 2 is named again (it had ended)
    change = Change(reply=idruns.reply(again, idruns.expand(again.runs), []))
    assert triage.resumed([], change) is change
    got = triage.resumed(prior, change).reply
    assert got["ok"] and [x["id"] for x in got["results"]] == ["1", "2", "3"]
    assert got["runs"] == [{"state": "cancelled", "array": None, "from": 1, "to": 3}]
