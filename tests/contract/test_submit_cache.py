"""A loop of `labq sub` from one shell sends the same body text again and again (issue 39): the scheduler
parses a submit's body once per text (daemon/decode.submit_body) and checks it into a job once per
body, user and config (jobspec.job_from_submit's templates); each submit still gets a job of its own,
stamped with its own time and id. What depends on the moment or the queue (a begin time, a deadline,
dependencies), another user, another config or a lower size bound is judged afresh. Fakeredis and a
real redis-server."""
import json
import time
from dataclasses import replace

from labq.scheduler.daemon import decode
from labq.scheduler.jobs import jobspec
from labq.scheduler.settings import config
from tests.harness import BODY, SWEEP_TOML, job, push, reply, setup, woke

MARK = "submit-cache-7c1d"


def _send(r, user, text, rid):
    """A submit whose body is exactly `text`, as a client writes it."""
    push(r, user, {"rid": rid, "op": "submit", "body": text})


def _counted(monkeypatch):
    """How often a submit's body is checked field by field (jobspec._command) and parsed, from empty
    caches (they are the process's: the other connection's run of this test filled them)."""
    monkeypatch.setattr(decode, "_BODIES", {})
    monkeypatch.setattr(jobspec, "_MADE", {})
    seen = {"checked": 0, "parsed": 0}
    real_command, real_loads = jobspec._command, decode.bounds.loads

    def command(body):
        seen["checked"] += 1
        return real_command(body)

    def loads(text, *a, **kw):
        seen["parsed"] += MARK in str(text)
        return real_loads(text, *a, **kw)
    monkeypatch.setattr(jobspec, "_command", command)
    monkeypatch.setattr(decode.bounds, "loads", loads)
    return seen


def test_one_body_text_is_parsed_and_checked_once_and_each_submit_is_its_own_job(conns, monkeypatch):
    """Failed before: each of the three submits parsed and checked the same text again."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    text = json.dumps({**BODY, "gpus": 0, "hold": True, "argv": [MARK], "export": "ALL", "env": {"A": "1"}})
    seen = _counted(monkeypatch)
    got = []
    for i in range(3):
        _send(r, "alice", text, f"c{i}")
        s.tick(now + i, woke(r))
        got.append(reply(r, f"c{i}"))
    assert all(g and g["ok"] for g in got), got
    assert seen == {"checked": 1, "parsed": 1}
    jobs = [job(r, g["job_id"]) for g in got]
    assert [j.id for j in jobs] == [got[0]["job_id"] + i for i in range(3)]
    assert [j.submit_time for j in jobs] == [now, now + 1, now + 2]
    # Alike in everything else: the first is what the checks made, the others copies of it.
    assert all(replace(j, id=0, submit_time=0) == replace(jobs[0], id=0, submit_time=0) for j in jobs)
    assert jobs[0].argv == (MARK,) and jobs[0].held       # (the env is kept apart from the record)
    # The parsed body handed to every request is left as it was parsed (nothing downstream changes it).
    assert decode._BODIES[text][1] == json.loads(text)


def test_another_user_another_config_or_a_lower_bound_is_judged_afresh(conns, monkeypatch):
    """The same text from bob is bob's job; under a config without its account it is refused; above
    a lowered max_request_bytes it is refused: none of them is the job a cached check made."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    text = json.dumps({**BODY, "gpus": 0, "hold": True, "argv": [MARK, "2"]})
    _send(r, "alice", text, "a1")
    s.tick(now, woke(r))
    _send(r, "bob", text, "b1")
    s.tick(now, woke(r))
    a, b = reply(r, "a1"), reply(r, "b1")
    assert a["ok"] and b["ok"], (a, b)
    assert job(r, a["job_id"]).user == "alice" and job(r, b["job_id"]).user == "bob"

    # The config's default time limit is in the job a body without one makes.
    s.state.cfg = replace(s.cfg, default_time=1800)
    untimed = json.dumps({k: v for k, v in json.loads(text).items() if k != "time_limit"})
    _send(r, "alice", untimed, "a3")
    s.tick(now, woke(r))
    s.state.cfg = replace(s.cfg, default_time=900)
    _send(r, "alice", untimed, "a4")
    s.tick(now, woke(r))
    assert [job(r, reply(r, rid)["job_id"]).time_limit for rid in ("a3", "a4")] == [1800, 900]

    closed = config.loads(SWEEP_TOML.replace("open = true", "open = false"))    # bob may no longer charge eta
    s.state.cfg = closed
    _send(r, "bob", text, "b2")
    s.tick(now, woke(r))
    refused = reply(r, "b2")
    assert not refused["ok"] and "eta" in refused["error"], refused

    s.state.cfg = replace(closed, max_request_bytes=len(text) - 1)
    _send(r, "alice", text, "a2")
    s.tick(now, woke(r))
    refused = reply(r, "a2")
    assert not refused["ok"] and "max_request_bytes" in refused["error"], refused


def test_a_body_that_names_a_deadline_is_checked_against_each_submits_time(conns):
    """Failed with a cache that kept every body's job: the second submit, too late to finish by the
    deadline, was taken as the first had been."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    text = json.dumps({**BODY, "gpus": 0, "hold": True, "argv": [MARK, "3"], "time_limit": 60,
                       "deadline": now + 100})
    _send(r, "alice", text, "d1")
    s.tick(now, woke(r))
    _send(r, "alice", text, "d2")
    s.tick(now + 50, woke(r))
    first, late = reply(r, "d1"), reply(r, "d2")
    assert first["ok"], first
    assert not late["ok"] and "deadline" in late["error"], late


def test_a_body_that_names_dependencies_is_resolved_against_the_queue_each_time(conns):
    """The same `afterok:X` text, X cancelled and gone from the table meanwhile: the second submit
    names X as the queue has it then (its dependency judged by plan, not copied from the first)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    _send(r, "alice", json.dumps({**BODY, "gpus": 0, "hold": True}), "x")
    s.tick(now, woke(r))
    x = reply(r, "x")["job_id"]
    text = json.dumps({**BODY, "gpus": 0, "hold": True, "argv": [MARK, "4"], "dependency": f"afterok:{x}"})
    _send(r, "alice", text, "dep1")
    s.tick(now, woke(r))
    _send(r, "alice", text, "dep2")
    s.tick(now + 1, woke(r))
    one, two = reply(r, "dep1"), reply(r, "dep2")
    assert one["ok"] and two["ok"], (one, two)
    assert job(r, one["job_id"]).deps == job(r, two["job_id"]).deps == (("afterok", (x,)),)
    assert jobspec._MADE.get(id(decode._BODIES[text][1])) is None


def test_a_commit_of_submits_from_one_shell_writes_their_environment_text_once(conns, monkeypatch):
    """Failed before: each of the five submits was a SET of the same ~1.5 KB text, a SET of its job_env
    and an SADD (15 commands, five copies of the text); now one MSET, one SET and one SADD."""
    from labq.scheduler.store import envs
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    env = {f"VAR{i}": "x" * 30 for i in range(40)}
    calls = []

    class Seen:
        def __init__(self, p):
            self.p = p

        def __getattr__(self, name):
            def call(*a, **kw):
                calls.append((name, a))
                return getattr(self.p, name)(*a, **kw)
            return call
    real = envs.put_new
    monkeypatch.setattr(envs, "put_new", lambda p, k, jobs: real(Seen(p), k, jobs))
    for i in range(5):
        push(r, "alice", {"rid": f"e{i}", "op": "submit",
                          "body": json.dumps({**BODY, "gpus": 0, "hold": True, "export": "ALL", "env": env})})
    s.tick(now, woke(r))
    ids = [reply(r, f"e{i}")["job_id"] for i in range(5)]
    assert [name for name, _ in calls] == ["mset", "set", "sadd"], calls
    texts = [a for name, a in calls if name == "set"]
    assert len(texts) == 1 and json.loads(texts[0][1]) == sorted(map(list, env.items()))
    named = {r.get(k.decode() if isinstance(k, bytes) else k) for k in calls[0][1][0]}
    assert len(named) == 1 and r.smembers(calls[2][1][0]) == {str(i) for i in ids}
