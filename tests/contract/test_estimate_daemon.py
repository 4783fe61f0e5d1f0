"""The daemon learns run times from the attempts that end, writes the estimate into each submitted
job, answers it in `sub --test-only`, and relearns it at start — on fakeredis and a real redis-server.
`labq show` and `--test-only` print it."""
import json

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import FROZEN, K, job, reply, submit, woke

CFG = config.loads("[estimate]\nbackfill = true\n")
BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 7200, "name": "train"}
NOW = 1_800_000_000.0


def _run_three(r, raw):
    """Three `train` jobs of alice that ran 10, 20 and 30 minutes; a preempted-like cancel is not learned."""
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)], "h", 1, 10 ** 9)
    s = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s.tick(NOW)
    for i in range(4):
        submit(r, "alice", BODY, f"r{i}")
    s.tick(NOW, woke(r))
    agent = AgentStore(r, K)
    for jid, minutes in ((1, 10), (2, 20), (3, 30)):
        agent.post("started", jid, 1, "n1", {"pid": 100 + jid, "start_time": NOW + 5})
        agent.post("finished", jid, 1, "n1", {"outcome": "completed", "exit_code": 0,
                                              "end_time": NOW + 5 + minutes * 60})
    agent.post("finished", 4, 1, "n1", {"outcome": "cancelled", "exit_code": None, "end_time": NOW + 7})
    s.tick(NOW + 2000)
    return s


def test_ended_runs_are_learned_and_written_into_the_next_submit(conns):
    r, raw = conns
    s = _run_three(r, raw)
    assert job(r, 1).learned_est is None                 # nothing had ended when it was submitted
    submit(r, "alice", BODY, "next")
    submit(r, "alice", {**BODY, "test_only": True}, "ask")
    s.tick(NOW + 2001, woke(r))
    got = job(r, reply(r, "next")["job_id"])
    assert got.learned_est == 1800 and got.learned_basis == "p75 of 3 runs of user alice, name train"
    ask = reply(r, "ask")
    assert ask["estimate"] == {"seconds": 1800, "basis": "p75 of 3 runs of user alice, name train"}
    assert ask["start_from"] == "learned run times"
    submit(r, "bob", {**BODY, "test_only": True}, "bob")
    s.tick(NOW + 2002, woke(r))
    assert reply(r, "bob")["estimate"] == {"seconds": None, "basis": "fewer than 3 runs of user bob have ended"}


def test_a_new_leader_relearns_from_the_recent_ended_jobs(conns):
    r, raw = conns
    _run_three(r, raw)
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    assert s2.tick(NOW + 3000)
    got = s2.estimator.estimate(job(r, 1))
    assert (got.seconds, got.samples) == (1800, 3)       # the cancelled attempt is not a run
    small = config.loads("[estimate]\nhistory = 2\n")
    r.delete(K.leader)
    s3 = Scheduler(r, small, me="s3", clock=FROZEN)
    assert s3.tick(NOW + 3001)
    # Only the 2 jobs that ended last are read (jobs 2 and 3; job 4's cancel came first): 2 runs, below 3.
    assert s3.estimator.estimate(job(r, 1)) is None and s3.estimator.observed == 2
    assert job(r, 4).state == states.CANCELLED


def test_show_and_test_only_print_the_estimate(capsys):
    from labq.cli import hot
    from labq.cli.subcore import print_test_only
    from labq.scheduler.jobs.model import Job

    j = Job(id=7, user="alice", account="a", name="train", argv=("true",), time_limit=7200, learned_est=2520,
            learned_basis="p75 of 17 runs of user alice, name train")

    class Client:
        currency = "USD"        # what hot.show reads of a client besides its jobs

        def resolve(self, _, views=False):
            return [j]
    hot.show(Client(), "7")
    assert "estimated run time 00:42:00 (p75 of 17 runs of user alice, name train)" in capsys.readouterr().out
    hot.show(Client(), "7", as_json=True)
    got = json.loads(capsys.readouterr().out)
    assert got["estimate"] == {"seconds": 2520, "basis": "p75 of 17 runs of user alice, name train"}
    reply_ = {"cost_per_hour": 0, "forecast_text": "$0.00", "budgets": [], "verdict": "would start now on n1",
              "starts_now": True, "estimate": {"seconds": None, "basis": "fewer than 3 runs of user bob have ended"}}
    print_test_only(reply_, {"as_json": False}, currency=Client.currency)
    assert "estimated run time: none yet (fewer than 3 runs of user bob have ended)" in capsys.readouterr().out


def test_the_start_learns_from_light_views_what_whole_records_teach(conns):
    """A leader's start reads the recent ended jobs as Runs (store/reads.recent_runs: a few fields
    of the JSON, no Job): the estimator learns exactly what the whole records teach it."""
    import random
    from dataclasses import replace

    from labq.scheduler.daemon.loop import learned_from
    from labq.scheduler.store import writes
    from labq.scheduler.store.reads import Reader
    from tests.harness import ended_job
    r, _ = conns
    rng = random.Random(7)
    jobs = [replace(j, name=rng.choice(("", "train", "eval")), user=rng.choice(("alice", "bob")),
                    tags=rng.choice(((), (("lr", "0.1"),), (("b", "2"), ("a", "1")))))
            for j in (ended_job(rng, i) for i in range(1, 3001))]
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, jobs)
    p.execute()
    for n in (3000, 1234, 0):
        whole, light = learned_from(Reader(r, K).recent_ended(n), CFG), learned_from(Reader(r, K).recent_runs(n), CFG)
        assert light._runs == whole._runs and light.observed == whole.observed
    assert whole.observed == 0 and learned_from(Reader(r, K).recent_runs(3000), CFG).observed > 1500
