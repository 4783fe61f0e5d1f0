"""Short jobs first through the kept Queue (policy/fronts.py), whose families are split by a floor of
their classes' expected run time and merged under bounds: the bound is at or before the score of every
job it stands for, and a pass scores the classes its walk may reach, not every class of the queue.
(That such passes decide as the per-job pass: tests/property/test_plan_classes.py.)"""
from dataclasses import replace

from hypothesis import example, given, settings, strategies as st

from labq.scheduler import multifactor, policy
from labq.scheduler.jobs.model import Job
from labq.scheduler.policy import classes, queue
from tests.harness import ClusterBuilder, cfg


@settings(max_examples=2000, deadline=None)
@given(qos=st.sampled_from(["normal", "high", "other"]), account=st.sampled_from(["eta", "phi", "nobody"]),
       burst=st.booleans(), first=st.floats(-1e6, 1e6), later=st.floats(0, 1e6), jid=st.integers(1, 10 ** 6),
       gap=st.integers(0, 5), e=st.floats(0, 1e7), now=st.floats(-1e6, 2e6),
       weights=st.tuples(st.floats(0, 1e4), st.floats(0, 1), st.floats(0, 1e3), st.floats(1, 1e6), st.floats(1, 1e5)),
       usage=st.dictionaries(st.sampled_from(["eta", "phi"]), st.floats(0, 1e6)))
def test_the_bound_is_at_or_before_the_score_of_every_job_it_stands_for(qos, account, burst, first, later, jid, gap,
                                                                        e, now, weights, usage):
    """A job of the family's QoS, account and burst flag, submitted at or after the bound's (submit time,
    id), whose expected run time has the bound's floor (at least it), scores at or after the bound."""
    aw, share, fw, age_max, scale = weights
    c = cfg("[qos.normal]\npriority = 100\n[qos.high]\npriority = 200\n[accounts.eta]\nshare = 2\n"
            "[accounts.phi]\nshare = 1\n")
    c = replace(c, priority=replace(c.priority, age_weight=aw, short_job_weight=aw * share, fairshare_weight=fw,
                                    age_max=age_max, short_job_scale=scale))
    j = Job(id=jid + gap, user="u", account=account, argv=("true",), workdir="/tmp", qos=qos, time_limit=3600,
            learned_est=e, submit_time=first + later if gap else first)
    bound = multifactor.bounder(now, usage, c)(qos, account, burst, first, jid, multifactor.runtime_floor(e))
    assert bound <= multifactor.scorer(now, usage, c, {j.id} if burst else ())(j)


def test_a_pass_with_short_jobs_first_scores_the_classes_it_may_reach_not_every_class(monkeypatch):
    """2,000 waiting jobs of as many run times on a full cluster, passes with the kept Queue: each
    scores a few classes (the families' next ones its walk reaches), not the 2,000 (every class at the
    start of every pass, as before the bounds)."""
    b = ClusterBuilder().node("n0", gpus=2, cpus=8, lease=10 ** 6)
    b.running("n0", gpus=2, cpus=8, time_limit=86400)
    for k in range(2000):
        b.job(gpus=1, cpus=1, time_limit=600 + 7 * k, submit_offset=-float(k % 500))
    _few_scored(monkeypatch, b.build())


@settings(max_examples=2000, deadline=None)
@given(qos=st.sampled_from(["normal", "high", "other"]), account=st.sampled_from(["eta", "phi", "nobody"]),
       burst=st.booleans(), submit=st.floats(-1e6, 1e6), earlier=st.floats(0, 1e6), jid=st.integers(1, 10 ** 6),
       waited=st.floats(0.9, 3), e=st.floats(0, 1e7),
       weights=st.tuples(st.floats(0, 1e4), st.floats(0, 1), st.floats(0, 1e3), st.floats(1, 1e6), st.floats(1, 1e5)),
       usage=st.dictionaries(st.sampled_from(["eta", "phi"]), st.floats(0, 1e6)))
def test_a_job_that_waited_its_full_age_scores_its_tied_priority_bit_for_bit(qos, account, burst, submit, earlier,
                                                                            jid, waited, e, weights, usage):
    """An `aged` job's Score is `tied`'s exactly, whatever its run time (the short-job term faded to 0),
    and a job submitted earlier is aged too: the walk bounds a family's aged classes by the first one's
    exact Score (fronts.Reach._bound), which is right only if both hold to the bit."""
    aw, share, fw, age_max, scale = weights
    c = cfg("[qos.normal]\npriority = 100\n[qos.high]\npriority = 200\n[accounts.eta]\nshare = 2\n"
            "[accounts.phi]\nshare = 1\n")
    c = replace(c, priority=replace(c.priority, age_weight=aw, short_job_weight=aw * share, fairshare_weight=fw,
                                    age_max=age_max, short_job_scale=scale))
    now = submit + age_max * waited
    j = Job(id=jid, user="u", account=account, argv=("true",), workdir="/tmp", qos=qos, time_limit=3600,
            learned_est=e, submit_time=submit)
    b = multifactor.bounder(now, usage, c)
    assert multifactor.aged(now, c.priority)(submit) == b.aged(submit)     # (the Queue's, queue.Queue.file)
    if b.aged(submit):
        assert b.aged(submit - earlier)
        assert b.tied(qos, account, burst, submit, jid) == multifactor.scorer(now, usage, c, {jid} if burst else ())(j)


def test_a_pass_over_a_queue_that_waited_past_age_max_scores_a_few_classes_not_every_one(monkeypatch):
    """2,000 waiting jobs of as many run times, each waited past age_max (their priorities tie: FIFO), on
    a full cluster: a pass with the kept Queue scores a few classes, not the 2,000 (the padded bound of
    a family came before each of its aged classes: a deep short-jobs-first drain reached them all)."""
    b = ClusterBuilder().node("n0", gpus=2, cpus=8, lease=10 ** 6)
    b.running("n0", gpus=2, cpus=8, time_limit=86400 * 30)
    for k in range(2000):
        b.job(gpus=1, cpus=1, time_limit=600 + 7 * k, submit_offset=-8 * 86400 - float(k % 500))
    _few_scored(monkeypatch, b.build())


def _few_scored(monkeypatch, snap):
    """Three passes of short jobs first with the kept Queue, a minute apart, on a cluster where nothing
    starts: each scores fewer than 100 classes and decides as the per-job pass."""
    c = cfg("[scheduler]\nbackfill_depth = 1\n[priority]\nshort_job_weight = 10\n")
    scored = []
    real = classes.scorer

    def counting(*a, **k):
        score = real(*a, **k)

        def counted(j):
            scored.append(j.id)
            return score(j)
        return counted
    monkeypatch.setattr(classes, "scorer", counting)
    q = queue.Queue()
    for t in range(3):
        snap = replace(snap, now=snap.now + 60 * t)
        scored.clear()
        got = policy.plan(snap, c, queue=q)
        assert len(scored) < 100
        assert got.places == () and got.starts == policy.plan_per_job(snap, c).starts


def test_a_queue_that_waited_past_age_max_is_not_split_until_a_job_that_did_not_comes():
    """Every job waiting has waited past age_max: their scores tie (FIFO), so the kept Queue files them
    in families not split by run time (a deep short-jobs-first drain merged ~45 families' aged classes
    a pass). Two jobs submitted since, a long one and then a short one, one GPU free: the short one
    starts, as the per-job pass has it; a Queue that stayed unsplit started the long one (FIFO)."""
    c = cfg("[scheduler]\nbackfill_depth = 1\n[priority]\nshort_job_weight = 10\n")
    b = ClusterBuilder().node("n0", gpus=2, cpus=8, lease=10 ** 6)
    b.running("n0", gpus=1, cpus=1, time_limit=86400 * 30)
    for k in range(12):
        b.job(gpus=2, cpus=2, time_limit=600 + 7 * k, submit_offset=-8 * 86400 - float(k))
    snap, q = b.build(), queue.Queue()
    assert policy.plan(snap, c, queue=q).places == () and not q.split
    long = replace(snap.jobs[-1], id=1001, gpus=1, cpus=1, time_limit=86400, submit_time=snap.now - 60)
    short = replace(long, id=1002, time_limit=600, submit_time=snap.now - 30)
    snap = replace(snap, now=snap.now + 60, jobs=snap.jobs + (long, short))
    got = policy.plan(snap, c, queue=q)
    assert q.split and [p.job_id for p in got.places] == [short.id]
    assert got.places == policy.plan_per_job(snap, c).places


def test_a_class_that_reaches_its_full_age_within_an_epoch_goes_by_submit_time_among_the_aged():
    """The kept Queue orders a split family's classes by their priority at an epoch (multifactor.Linear)
    and moves a class among the old ones, by submit time, as it nears its full age (Queue._age): a
    young-keyed family's bound is put after every aged class (fronts.Reach._linear). C's job (1 h) ages
    between two passes a few seconds apart (one epoch); G's next job (10 min, another family), submitted
    after C's, comes to its class's head aged once G's first started: one GPU free, C's job starts, as in
    the per-job pass. A Queue that left C keyed young (its move skipped) started G's."""
    c = cfg("[scheduler]\nbackfill_depth = 1\n[priority]\nshort_job_weight = 10\nage_max = 1000\n")
    b = ClusterBuilder().node("n0", gpus=2, cpus=8, lease=10 ** 6)
    b.running("n0", gpus=1, cpus=1, time_limit=86400 * 30)
    b.job(gpus=1, cpus=1, time_limit=600, submit_offset=-5000, jid=10)     # G's first: aged, starts first
    b.job(gpus=1, cpus=1, time_limit=3600, submit_offset=-895, jid=20)     # C: ages in 5 s (offsets: 100 s before)
    b.job(gpus=1, cpus=1, time_limit=600, submit_offset=-890, jid=30)      # G's next: ages in 10 s
    for k in range(8):      # young, no room (two GPUs): the split stays, and the second pass files few changes
        b.job(gpus=2, cpus=1, time_limit=86400 + k, submit_offset=-float(k), jid=40 + k)
    snap, q = b.build(), queue.Queue()
    got = policy.plan(snap, c, queue=q)
    assert q.split and [p.job_id for p in got.places] == [10] == [p.job_id for p in policy.plan_per_job(snap, c).places]
    snap = replace(snap, now=snap.now + 20, jobs=tuple(j for j in snap.jobs if j.id != 10))
    got = policy.plan(snap, c, queue=q)
    assert q.split and q.linear is not None and q.linear.epoch == snap.now - 20    # (the same epoch)
    assert [p.job_id for p in got.places] == [20] == [p.job_id for p in policy.plan_per_job(snap, c).places]


@settings(max_examples=1000, deadline=None)
@given(now=st.floats(0, 1e7), age_max=st.floats(1, 1e6), aw=st.floats(0.01, 1e4),
       near=st.lists(st.integers(-3, 3), max_size=30), young=st.lists(st.floats(0, 1), max_size=10),
       lo=st.integers(0, 5))
# (a submit time an ulp before the cut that `aged` says is not aged: age times age_weight / age_max rounds down)
@example(now=427098.43198156403, age_max=555094.4376294108, aw=3051.0967239503175, near=[-2, -1, 0, 1], young=[0.5], lo=0)
def test_a_familys_first_young_class_is_the_one_aged_says(now, age_max, aw, near, young, lo):
    """fronts.first_young (a search in C near the submit time age_max ago, then `aged`'s exact answer)
    finds the first class from `lo` on that is not an aged top-keyed one, as a search asking `aged` at
    each step does: submit times within a few ulps of the cut, ties among them, young keys after."""
    from math import nextafter

    from labq.scheduler.policy import fronts
    c = cfg("")
    c = replace(c, priority=replace(c.priority, age_weight=aw, short_job_weight=aw, age_max=age_max))
    b = multifactor.bounder(now, {}, c)
    top, cut = -aw, now - age_max
    times = []
    for d in sorted(near):
        t = cut
        for _ in range(abs(d)):
            t = nextafter(t, -1e18 if d < 0 else 1e18)
        times.append(t)
    src = [((top, t), i, ("k", i), None) for i, t in enumerate(times)]
    src += [((top + 1 + y, now), len(src) + i, ("k", len(src) + i), None) for i, y in enumerate(sorted(young))]
    lo = min(lo, len(src))
    want = next((i for i in range(lo, len(src)) if src[i][0][0] != top or not b.aged(src[i][0][1])), len(src))
    assert fronts.first_young(src, lo, top, b) == want


def test_a_new_epoch_orders_the_kept_families_as_filing_every_job_anew_does():
    """Past an epoch (queue.EPOCH of age_max) the kept Queue orders its split families' classes anew
    from the classes it holds (Queue._refront), not by filing every job again: the families, slopes,
    young classes and blocks of passed classes are those of a Queue filed afresh at that pass, and the
    plan the same as the per-job pass's."""
    c = cfg("[scheduler]\nbackfill_depth = 1\n[priority]\nshort_job_weight = 10\nage_max = 1000\n")
    b = ClusterBuilder().node("n0", gpus=2, cpus=8, lease=10 ** 6)
    b.running("n0", gpus=2, cpus=1, time_limit=86400 * 30)
    for k in range(40):     # young, no room: classes of many run times, a few per family
        b.job(gpus=1 + k % 2, cpus=1, time_limit=300 + 97 * k, submit_offset=-float(20 * k), jid=10 + k)
    snap, q = b.build(), queue.Queue()
    policy.plan(snap, c, queue=q)
    epoch = q.linear.epoch if q.linear else None
    later = replace(snap, now=snap.now + 200)
    got, fresh = policy.plan(later, c, queue=q), queue.Queue()
    assert q.split and q.linear is not None and q.linear.epoch == later.now != epoch
    assert got == policy.plan(later, c, queue=fresh) and got.places == policy.plan_per_job(later, c).places

    def shape(x: queue.Queue):
        return ({f: [(e[0], e[1], e[2], e[3].block is not None, e[3].within is not None) for e in src]
                 for f, src in x.families.items()}, x.slopes, x.flats, sorted(x.young))
    assert shape(q) == shape(fresh)
