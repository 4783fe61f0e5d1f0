"""Multi-node jobs (-N): the request, the record, submit-time refusal and gang placement (pure)."""
from dataclasses import replace

import pytest

from labq.cli import sbatch, subcore
from labq.scheduler import policy
from labq.scheduler.daemon import applier, transitions as tr
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import jobspec, states
from labq.scheduler.jobs.model import Attempt
from labq.scheduler.money import pricing
from labq.scheduler.policy.refusal import refusal
from labq.scheduler.store import codec
from tests.harness import ClusterBuilder, G, cfg

HOUR = 3600


def _opts(**kw):
    return {"chdir": "/tmp", **kw}


# -- the request ----------------------------------------------------------------------------------

def test_nodes_and_gpus_per_node_make_a_gang_request():
    body = subcore.build_body(_opts(nodes="2", gpus_per_node="8", cpus="16", mem="64G"), ["true"], None)
    assert (body["nodes"], body["gpus"], body["cpus"], body["mem"]) == (2, 8, 16, 64 * G)
    # SLURM's -G with -N is the job's total, split evenly over the nodes
    assert subcore.build_body(_opts(nodes="2", gpus="a100:16"), ["true"], None)["gpus"] == 8
    # -G 16 without --nodes stays one node
    one = subcore.build_body(_opts(gpus="16"), ["true"], None)
    assert one["gpus"] == 16 and "nodes" not in one


@pytest.mark.parametrize("opts, match", [
    (dict(nodes="2", gpus="3"), "split evenly"),
    (dict(nodes="0"), "--nodes"),
    (dict(nodes="1-4"), "--nodes: expected a node count"),
    (dict(nodes="two"), "--nodes"),
    (dict(nodes="2", gpus="2", gpus_per_node="1"), "not both"),
])
def test_bad_node_requests_say_what_is_wrong(opts, match):
    with pytest.raises(UsageError, match=match):
        subcore.build_body(_opts(**opts), ["true"], None)


def test_sbatch_spellings_translate():
    assert sbatch.translate(["--nodes=2", "--gpus-per-node=a100:4"]) == (
        ["--nodes", "2", "--gpus-per-node", "a100:4"], [])


def test_the_scheduler_checks_the_node_count_again():
    c = cfg()
    body = {"argv": ["true"], "workdir": "/tmp", "nodes": 2, "gpus": 4}
    job = jobspec.job_from_submit(body, "alice", c, 1000.0)
    assert (job.nodes, job.gpus, job.total_gpus) == (2, 4, 8)
    assert jobspec.job_from_submit({"argv": ["true"], "workdir": "/tmp"}, "alice", c, 1000.0).nodes == 1
    for bad in (0, -1, "2", 10**6, True):
        with pytest.raises(UsageError, match="nodes"):
            jobspec.job_from_submit({**body, "nodes": bad}, "alice", c, 1000.0)


def test_refused_at_submit_only_when_no_set_of_nodes_could_ever_hold_it():
    b = ClusterBuilder().node("a", gpus=8).node("b", gpus=8).node("c", gpus=4)
    job = b.job(gpus=8, nodes=2).jobs[-1]
    assert refusal(job, b.nodes, cfg()) is None
    three = replace(job, nodes=3)
    why = refusal(three, b.nodes, cfg())
    assert why.startswith("no set of 3 nodes could ever hold 8xGPU") and "2 node(s) could (a, b)" in why
    assert "on each node" in refusal(replace(job, gpus=16), b.nodes, cfg())
    # caps count the whole gang: 2 x 8 GPUs is over max_gpus = 12
    capped = cfg("[accounts.eta]\nusers = [\"alice\"]\nmax_gpus = 12\n")
    assert "asks for 16 GPUS" in refusal(replace(job, account="eta"), b.nodes, capped)


def test_the_record_and_its_attempt_round_trip_with_the_node_list():
    b = ClusterBuilder().node("a", gpus=2).node("b", gpus=2)
    b.running_gang(["a", "b"], gpus=2, cpus=4)
    job = b.jobs[-1]
    assert job.parts == (("a", ("GPU-a-0", "GPU-a-1")), ("b", ("GPU-b-0", "GPU-b-1")))
    back = codec.loads(codec.dumps(job))
    assert back == job and back.current.parts == job.parts and back.nodes == 2


def test_rate_and_commitment_cover_every_node():
    c = cfg("[rates]\ngpu_hour = 2.0\ncpu_hour = 0.1\n")
    b = ClusterBuilder()
    one = b.job(gpus=8, cpus=10).jobs[-1]
    two = replace(one, nodes=2)
    assert pricing.rate(two, "usd", "fake", c) == 2 * pricing.rate(one, "usd", "fake", c)
    assert pricing.rate(two, "gpu_hours", "", c) == 16 * 10**6
    assert pricing.rate(two, "cpu_hours", "", c) == 20 * 10**6


def test_admit_and_end_keep_the_parts_on_the_attempt():
    b = ClusterBuilder().node("a", gpus=2).node("b", gpus=2)
    b.job(gpus=2, nodes=2)
    snap = b.build()
    [place] = policy.plan(snap, cfg()).places
    job = tr.admit(snap.jobs[0], place, snap.now)
    assert job.parts == place.parts and job.current.parts == place.parts and job.node == "a"
    ended, _ = tr.finished(job, 1, {"outcome": "completed", "exit_code": 0}, snap.now + 10, cfg())
    assert ended.state == states.COMPLETED and ended.parts == place.parts
    requeued, _ = tr.node_failed(job, snap.now + 5, snap.now + 10, cfg())
    assert requeued.state == states.PENDING and requeued.parts == () and requeued.current.parts == place.parts


# -- placement: all or nothing ----------------------------------------------------------------------

def test_a_gang_starts_on_all_its_nodes_in_one_pass():
    b = ClusterBuilder().node("a", gpus=8).node("b", gpus=8).node("c", gpus=8)
    b.running("c", gpus=4)
    b.job(gpus=8, cpus=4, nodes=2)
    p = policy.plan(b.build(), cfg())
    [place] = p.places
    assert [n for n, _ in place.parts] == ["a", "b"] and place.node == "a"
    assert all(len(g) == 8 for _, g in place.parts) and len(place.gpus) == 16
    assert all(u.startswith(f"GPU-{n}-") for n, g in place.parts for u in g)


def test_a_gang_that_does_not_fit_whole_takes_nothing():
    b = ClusterBuilder().node("a", gpus=8).node("b", gpus=8).node("c", gpus=8)
    b.running("c", gpus=4)
    b.job(gpus=8, nodes=3, submit_offset=-10)     # 2: needs three whole nodes, two are free
    b.job(gpus=8)                                 # 3: a one-node job behind it still starts
    p = policy.plan(b.build(), cfg("[scheduler]\nbackfill_depth = 0\n"))
    assert [x.job_id for x in p.places] == []    # backfill off: strictly behind the gang
    p = policy.plan(b.build(), cfg("[scheduler]\nbackfill_depth = 1\n"))
    pend = {x.job_id: x for x in p.pending}
    assert pend[2].reason == states.RESOURCES and "2 of the 3 nodes it needs" in pend[2].detail
    # job 3 runs 1 h, the gang's reservation is at the running job's end: it would delay it
    assert [x.job_id for x in p.places] == [] and pend[3].reason == states.RESERVATION
    [start] = p.starts
    assert start.job_id == 2 and start.node == "a,b,c"


def test_backfill_starts_only_what_ends_before_the_gangs_reservation():
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4)
    b.running("a", gpus=2, time_limit=2 * HOUR, started_ago=HOUR)     # 1: ends in 1 h
    b.job(gpus=4, nodes=2, submit_offset=-50)                          # 2: the gang, blocked
    b.job(gpus=1, time_limit=HOUR // 2)                                # 3: ends before it: backfills
    b.job(gpus=1, time_limit=3 * HOUR)                                 # 4: would delay it
    p = policy.plan(b.build(), cfg("[scheduler]\nkill_wait = 0\n"))
    assert [x.job_id for x in p.places] == [3]
    assert {x.job_id: x.reason for x in p.pending} == {2: states.RESOURCES, 4: states.RESERVATION}
    [start] = p.starts
    assert start.at == b.now + HOUR and start.node == "a,b"


def test_the_commitment_covers_all_nodes():
    text = "[rates]\ngpu_hour = 1.0\n[scheduler]\nkill_wait = 0\n[[budgets]]\nname = \"lab\"\nlimit = {}\n"
    b = ClusterBuilder().node("a", gpus=2).node("b", gpus=2)
    b.job(gpus=2, nodes=2, time_limit=HOUR, budget="lab")
    assert len(policy.plan(b.build(), cfg(text.format(4.0))).places) == 1     # 4 GPU-hours: $4
    [pd] = policy.plan(b.build(), cfg(text.format(3.0))).pending               # one node's $2 would fit
    assert pd.reason == states.BUDGET_EXHAUSTED


def test_caps_count_the_whole_gang():
    c = cfg("[accounts.eta]\nusers = [\"alice\"]\nmax_gpus = 6\n")
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4)
    b.running("a", gpus=1, account="eta")
    b.job(gpus=3, nodes=2, account="eta")       # 6 more: 7 > 6
    [pd] = policy.plan(b.build(), c).pending
    assert pd.reason == states.ACCOUNT_GPU_LIMIT and "needs 6 more" in pd.detail


def test_a_running_gang_holds_room_on_each_of_its_nodes():
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4)
    b.running_gang(["a", "b"], gpus=3)
    b.job(gpus=2)
    [pd] = policy.plan(b.build(), cfg()).pending
    assert pd.reason == states.RESOURCES


# -- preemption ------------------------------------------------------------------------------------

def test_preemption_frees_a_whole_gangs_room_on_several_nodes():
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4).node("c", gpus=4)
    b.running("a", gpus=4, qos="low", started_ago=2 * HOUR)     # 1
    b.running("b", gpus=2, qos="low", started_ago=HOUR)         # 2
    b.running("b", gpus=2, qos="low", started_ago=HOUR)         # 3
    b.running("c", gpus=3, qos="low", started_ago=HOUR)         # 4
    b.job(gpus=4, nodes=2)                                      # 5: frees a (1 victim) and c (1 victim)
    p = policy.plan(b.build(), cfg())
    assert sorted(x.job_id for x in p.preempts) == [1, 4]
    [pd] = p.pending
    assert pd.reason == states.PREEMPTING_FOR and pd.earmark == "a,c" and len(pd.earmark_gpus) == 8
    # the victims are gone: next pass the gang starts on its earmarked nodes, ahead of a newcomer
    snap = b.build()
    left = [j for j in snap.jobs if j.id not in (1, 4)]
    left = [replace(j, reason=pd.reason, earmark=pd.earmark, earmark_gpus=pd.earmark_gpus) if j.id == 5 else j
            for j in left]
    nxt = ClusterBuilder().node("a", gpus=4).node("b", gpus=4).node("c", gpus=4)
    nxt.jobs = left + [replace(left[-1], id=6, qos="high", nodes=1, earmark="", earmark_gpus=(), gpus=4)]
    qos = "[qos.normal]\npriority = 100\n[qos.low]\npriority = 0\npreemptible = true\n[qos.high]\npriority = 200\n"
    p2 = policy.plan(replace(snap, jobs=tuple(nxt.jobs)), cfg(qos))
    placed = {x.job_id: x for x in p2.places}
    assert [n for n, _ in placed[5].parts] == ["a", "c"]


def test_preemption_that_could_free_only_part_of_a_gang_preempts_nothing():
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4)
    b.running("a", gpus=4, qos="low", started_ago=2 * HOUR)     # preemptible
    b.running("b", gpus=4, qos="normal", started_ago=2 * HOUR)  # not
    b.job(gpus=4, nodes=2, qos="normal")
    p = policy.plan(b.build(), cfg())
    assert p.preempts == () and p.pending[0].reason == states.RESOURCES and p.pending[0].earmark == ""


def test_a_one_node_job_may_preempt_a_gang_and_the_gang_is_stopped_whole():
    b = ClusterBuilder().node("a", gpus=4).node("b", gpus=4)
    b.running_gang(["a", "b"], gpus=4, qos="low", started_ago=2 * HOUR)
    b.job(gpus=4)
    p = policy.plan(b.build(), cfg())
    assert [x.job_id for x in p.preempts] == [1]
    assert p.pending[0].earmark in ("a", "b") and len(p.pending[0].earmark_gpus) == 4


def test_attempt_parts_default_to_one_node():
    a = Attempt(1, "a", ("g",))
    assert a.parts == ()
    j = ClusterBuilder().job().jobs[-1]
    assert j.on_nodes == (("", ()),) and j.total_gpus == 0


def test_the_applier_takes_a_gang_whole_or_rejects_it_whole():
    b = ClusterBuilder().node("a", gpus=2).node("b", gpus=2)
    b.job(gpus=2, nodes=2)
    snap = b.build()
    [place] = policy.plan(snap, cfg()).places
    jobs = {j.id: j for j in snap.jobs}
    got = applier.apply_plan(policy.plan(snap, cfg()), jobs, jobs, snap.nodes, snap.now)
    assert [j.parts for j in got.started] == [place.parts] and got.rejected == ()
    # a GPU of the second part is taken meanwhile: the whole gang is rejected, nothing is started
    b.running("b", gpus=1)
    busy = b.build()
    jobs = {j.id: j for j in busy.jobs}
    got = applier.apply_plan(replace(policy.plan(snap, cfg()), pending=()), jobs, jobs, busy.nodes, busy.now)
    assert got.started == () and "on b: GPU GPU-b-0 is not free" in got.rejected[0].why
    half = replace(place, parts=place.parts[:1])
    got = applier.apply_plan(replace(policy.plan(snap, cfg()), places=(half,), pending=()), jobs, jobs,
                             busy.nodes, busy.now)
    assert got.started == () and "for a job of 2" in got.rejected[0].why
