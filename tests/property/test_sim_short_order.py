"""order.py draws plan()'s order of a replay's queue without ranking it: with short jobs first
(priority.short_job_weight), the jobs it draws must come exactly as multifactor.ordered sorts them,
through any sequence of submits and starts, at any instant; and so must the ones it draws of some
request shapes whose runs end by a given time (easy.py's jobs that could start)."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler import multifactor
from labq.scheduler.jobs.model import Job
from labq.scheduler.policy.capacity import shape
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import EPOCH
from labq.scheduler.sim.queue import Queue

# (submit, time limit, learned estimate or None, --est or None); run times often near each other
# (order.py's buckets hold E's within a factor 2^(1/4)), some far apart.
runs = st.one_of(st.sampled_from([1, 2, 3, 60, 61, 64, 70, 3600, 3700, 4000, 4200, 86400]), st.integers(0, 90000))
row = st.tuples(st.integers(0, 5000), runs, st.one_of(st.none(), runs), st.one_of(st.none(), runs))
weights = st.fixed_dictionaries({
    "age_max": st.sampled_from([600.0, 3600.0, 7 * 86400.0]), "short_job_scale": st.sampled_from([1.0, 60.0, 3600.0]),
    "short_share": st.sampled_from([1.0, 0.5, 0.01]), "qos_weight": st.sampled_from([0.0, 3.0]),
    "fairshare_weight": st.sampled_from([0.0, 50.0])})


def config(w):
    base = config_mod.loads("[qos.normal]\npriority = 5\n[accounts.lab]\nshare = 2\n")
    p = base.priority.with_(age_max=w["age_max"], short_job_scale=w["short_job_scale"], qos_weight=w["qos_weight"],
                            fairshare_weight=w["fairshare_weight"], burst_penalty=0.0)
    return replace(base, priority=p.with_(short_job_weight=p.age_weight * w["short_share"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(row, min_size=1, max_size=100), weights, st.lists(st.integers(0, 119), max_size=40),
       st.integers(0, 20000), st.floats(0, 1e6), st.booleans(), st.dictionaries(st.sampled_from([1, 2, 4]), runs))
def test_the_drawn_order_is_plan_order(rows, w, gone, later, used, learned_backfill, ends):
    cfg = config(w)
    cfg = replace(cfg, estimate=cfg.estimate.with_(backfill=learned_backfill))
    q = Queue(cfg)
    for i, (submit, limit, learned, est) in enumerate(rows):
        q.add(Job(id=i + 1, user="u", account="lab", qos="normal", gpus=1 + i % 3, submit_time=EPOCH + submit,
                  time_limit=limit, learned_est=learned, est=est or None))
    for i in gone:
        if i + 1 in q.jobs:
            q.remove(i + 1)
    now, usage = EPOCH + 5000 + later, {"lab": used}
    pending = list(q.jobs.values())
    want = multifactor.ordered(pending, now, usage, cfg)
    # A job expected to take no time (no limit, no estimate) ties every wait: rounding orders those.
    assert q.short_order(now) == all(multifactor.expected_runtime(j) >= 1 for j in pending)
    if not q.short_order(now):
        return
    order = q.order(now, usage)
    assert order.first(7) == want[:7]
    assert order.first(len(want) + 1) == want
    assert sorted(pending, key=order.key) == want
    leave = {j.id for j in pending[::3]}      # jobs a budget keeps idle: left out of the draw
    assert q.order(now, usage, leave).first(7) == [j for j in want if j.id not in leave][:7]
    shapes = {shape(j): j.gpus for j in pending}
    latest = {s: now + ends[g] for s, g in shapes.items() if g in ends}
    assert list(order.fitting(latest, now)) == [j for j in want if shape(j) in latest
                                                and latest[shape(j)] >= now + q.span(j)]


def test_a_bucket_comes_out_at_its_shortest_run_and_oldest_job():
    """Runs of 3600 s and 4000 s share a bucket, 4200 s is in the next. At a wait of 400 s of
    age_max 600 s the 3600-s job ranks first, the 4200-s one (older) second, the 4000-s one last: the
    first bucket's bound must be its 3600 s, not its 4000 s (which ranks below the 4200-s job)."""
    cfg = config({"age_max": 600.0, "short_job_scale": 3600.0, "short_share": 1.0, "qos_weight": 0.0,
                  "fairshare_weight": 0.0})
    q = Queue(cfg)
    for i, (submit, run) in enumerate([(10, 3600), (300, 4000), (0, 4200)]):
        q.add(Job(id=i + 1, user="u", account="lab", qos="normal", gpus=1, submit_time=EPOCH + submit, time_limit=run))
    now = EPOCH + 410
    assert [j.id for j in multifactor.ordered(list(q.jobs.values()), now, {}, cfg)] == [1, 3, 2]
    assert [j.id for j in q.order(now, {}).first(3)] == [1, 3, 2]
