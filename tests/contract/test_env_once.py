"""Issue 39: an exported environment is stored once per distinct text (store/envs.py), not once per
submission: job_env names the text by digest, env_refs says which submissions name it, and the text
goes with the last of them. What its owner, an admin and the node it runs on read is the same as
before; data written before (schema 2, job_env holding the text) is read as it is and moved at start."""
import json
import time

from labq.scheduler.jobs.model import Job
from labq.scheduler.settings import config
from labq.scheduler.store import codec, envs, reads, schema
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, SWEEP_TOML, K, push, reply, setup, submit, woke

ENV = {"HOME": "/home/alice", "WANDB_API_KEY": "wandb-s3cret", "PATH": "/usr/bin:/bin"}
OTHER = {**ENV, "PATH": "/opt/bin:/usr/bin"}
CFG = config.loads(SWEEP_TOML + '[security]\nadmins = ["root"]\n')


def _lab(conns):
    r, raw = conns
    return r, setup(r, raw, time.time(), cfg=CFG)


def _env_of(r, s, user, jid, rid):
    push(r, user, {"rid": rid, "op": "show_private", "body": json.dumps({"job": jid})})
    s.tick(time.time(), woke(r))
    return reply(r, rid)["env"]


def test_submissions_from_one_shell_store_their_environment_once(conns):
    r, s = _lab(conns)
    body = {**BODY, "gpus": 0, "export": "ALL", "env": ENV}
    for i in range(3):
        submit(r, "alice", {**body, "hold": True}, f"h{i}")
    submit(r, "alice", {**body, "hold": True, "env": OTHER}, "other")
    submit(r, "alice", {**body, "array": [1, 3, 1], "hold": True}, "arr")
    submit(r, "alice", body, "runs")         # not held: dispatched to n1 in this tick
    s.tick(time.time(), woke(r))
    held = [reply(r, f"h{i}")["job_id"] for i in range(3)]
    other, arr, runs = (reply(r, x)["job_id"] for x in ("other", "arr", "runs"))
    assert len(list(r.scan_iter(K.env_text("*")))) == 2, "two distinct environments, two texts"
    named = r.get(K.job_env(held[0]))
    assert named.startswith(codec.ENV_BY_DIGEST) and len(named) == 33
    assert all(r.get(K.job_env(j)) == named for j in (*held, arr, runs)) and r.get(K.job_env(other)) != named
    assert not r.exists(K.job_env(arr + 1)), "an array is one submission"
    assert r.smembers(K.env_refs(codec.env_digest(named))) == {str(j) for j in (*held, arr, runs)}
    assert dict(json.loads(envs.text(r, K, other))) == OTHER
    # What its owner and admins are shown, and what the node it runs on reads, are the texts themselves.
    assert _env_of(r, s, "alice", held[1], "q1") == ENV and _env_of(r, s, "root", other, "q2") == OTHER
    assert _env_of(r, s, "alice", arr + 2, "q3") == ENV
    assert dict(json.loads(r.get(K.handover("n1", runs, "env")))) == ENV
    job = reads.load_job(r, K, runs)
    assert AgentStore(r, K).claim(runs, 1, "n1", 4242, 0, job)[2] == tuple(sorted(ENV.items()))


def test_the_text_goes_with_the_last_submission_that_names_it(conns):
    r, _ = conns
    one, two = (Job(id=i, user="alice", account="eta", env=tuple(sorted(ENV.items()))) for i in (1, 2))
    p = r.pipeline(transaction=True)
    envs.put_new(p, K, [one, two])
    envs.put(p, K, 2, two)          # written twice (a rest and its first task in one batch): no matter
    p.execute()
    digest = codec.env_digest(r.get(K.job_env(1)))
    envs.drop(r, K, [1])
    assert not r.exists(K.job_env(1)) and r.exists(K.env_text(digest)), "job 2 still names it"
    assert dict(json.loads(envs.text(r, K, 2))) == ENV
    envs.drop(r, K, [2, 2])
    assert not r.exists(K.job_env(2)) and not r.exists(K.env_text(digest)) and not r.exists(K.env_refs(digest))


def test_a_submit_that_names_a_text_while_it_is_dropped_keeps_it(conns):
    r, _ = conns
    job = Job(id=1, user="alice", account="eta", env=tuple(sorted(ENV.items())))
    p = r.pipeline(transaction=True)
    envs.put(p, K, 1, job)
    p.execute()
    digest = codec.env_digest(r.get(K.job_env(1)))
    r.srem(K.env_refs(digest), 1)       # job 1 left: nothing names the text ...
    orig, submitted = r.pipeline, []

    def watched(*a, **kw):
        pipe = orig(*a, **kw)
        look = pipe.scard

        def scard_then_submit(key):     # ... and a submit naming it commits between the look and the delete
            n = look(key)
            if not submitted:
                later = orig()
                envs.put(later, K, 7, job)
                later.execute()
                submitted.append(7)
            return n
        pipe.scard = scard_then_submit
        return pipe
    r.pipeline = watched
    try:
        envs._drop_text(r, K, digest)
    finally:
        r.pipeline = orig
    assert submitted and dict(json.loads(envs.text(r, K, 7))) == ENV, "the WATCH saw the submit: the text stays"


def test_schema_2_environments_are_read_as_they_are_and_named_by_digest_at_start(conns):
    r, _ = conns
    text, other = (json.dumps(sorted(e.items()), separators=(",", ":")) for e in (ENV, OTHER))
    for ref, t in ((5, text), (6, text), (7, other)):
        r.set(K.job_env(ref), t)
    r.set(K.schema, 2)
    job = Job(id=5, user="alice", account="eta")
    assert reads.private(r, K, job)[1] == tuple(sorted(ENV.items())), "read as it is before the move"
    assert schema.check(r, K) == 2 and int(r.get(K.schema)) == 3
    assert all(r.get(K.job_env(x)).startswith(codec.ENV_BY_DIGEST) for x in (5, 6, 7))
    assert len(list(r.scan_iter(K.env_text("*")))) == 2
    assert r.smembers(K.env_refs(codec.text_digest(text))) == {"5", "6"}
    assert [envs.text(r, K, x) for x in (5, 6, 7)] == [text, text, other]
    assert reads.private(r, K, job)[1] == tuple(sorted(ENV.items()))
    before = {key: r.get(key) for key in r.scan_iter("labq:env*") if r.type(key) == "string"}
    envs.by_digest(r, K)
    assert {key: r.get(key) for key in before} == before, "a second pass changes nothing"
