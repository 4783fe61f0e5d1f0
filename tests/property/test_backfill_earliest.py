"""Reservations from each node's earliest start kept between passes (policy/earliest.py, with
policy/tracks.py) are those of a walk over every node (backfill.Timelines without tracks): over
passes where the clock moves (past answers, past ends, onto them exactly), running jobs start, end,
are preempted or get a new record on some nodes, a node heartbeats or changes, and a pass places
jobs and reserves several (request shapes repeat from pass to pass, so kept answers are read), the
same (node, time) for every reservation and the same allocations after."""
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Gpu, Job, Node
from labq.scheduler.policy import capacity, earliest, tracks as tracks_mod
from labq.scheduler.policy.backfill import Timelines
from labq.scheduler.settings import config as config_mod

G = 1 << 30
T0 = 1_000_000.0
SHAPES = [(1, "", 1, 600), (2, "", 4, 3600), (4, "A", 1, 600), (8, "", 8, 3600), (2, "B", 1, 300), (0, "", 12, 600)]


def node(i: int, models: tuple[str, ...], slots: int, cpus: int = 16) -> Node:
    return Node(f"n{i}", cpus, 64 * G, slots, tuple(Gpu(f"G-{i}-{k}", k, m) for k, m in enumerate(models)))


def running(jid: int, n: Node, gpus: int, cpus: int, began: float, limit: int, est: int | None) -> Job:
    uuids = tuple(g.uuid for g in n.gpus[:gpus])
    a = Attempt(1, n.name, uuids, start_time=began, dispatch_time=began)
    return Job(id=jid, user="u", account="a", gpus=gpus, cpus=cpus, time_limit=limit, learned_est=est,
               state=states.RUNNING, node=n.name, gpu_uuids=uuids, attempts=(a,), start_time=began)


def request(jid: int, k: int) -> Job:
    gpus, gtype, cpus, limit = SHAPES[k]
    return Job(id=jid, user="u", account="a", gpus=gpus, gpu_type=gtype, cpus=cpus, time_limit=limit,
               learned_est=200 if k % 2 else None)


def allocs_of(tl):
    """Kept allocations start when they were filed: every question is about `now` or later."""
    return {name: sorted((max(a.start, tl.now), a.end, tuple(sorted(a.gpus.items())), a.cpus, a.mem, a.job_id, a.reserved)
                         for a in lst) for name, lst in tl.allocs.items()}


NODE = st.tuples(st.sampled_from([("A",) * 4, ("A",) * 8, ("A", "A", "B", "B"), ("B",) * 2]), st.sampled_from([2, 4, 8]))
RUN = st.tuples(st.integers(0, 7), st.sampled_from([1, 2, 4]), st.sampled_from([1, 4]),
                st.sampled_from([0.0, 100.0, 550.0, 3000.0]), st.sampled_from([0, 600, 3600]),
                st.sampled_from([None, 100, 1000]))
STEP = st.sampled_from([0.0, 1.0, 50.0, 100.0, 599.0, 600.0, 601.0, 3600.0])
OP = st.tuples(st.sampled_from(["reserve", "reserve", "reserve", "begin", "place"]), st.integers(0, len(SHAPES) - 1),
               st.integers(0, 7), st.sampled_from([30.0, 700.0]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NODE, min_size=2, max_size=8), st.lists(RUN, max_size=14), st.booleans(), st.data())
def test_kept_earliest_starts_reserve_as_a_walk_over_every_node(shapes, runs, learned, data):
    nodes = [node(i, models, slots) for i, (models, slots) in enumerate(shapes)]
    cfg = config_mod.Config()
    if learned:
        cfg = replace(cfg, estimate=replace(cfg.estimate, backfill=True))
    now, jid = T0, 1
    jobs: dict[int, Job] = {}
    for i, gpus, cpus, ago, limit, est in runs:
        jobs[jid] = running(jid, nodes[i % len(nodes)], gpus, cpus, now - ago, limit, est)
        jid += 1
    kept = tracks_mod.Tracks()
    for _ in range(8):
        fresh = Timelines(nodes, list(jobs.values()), [], now, cfg)
        mine = Timelines(nodes, list(jobs.values()), [], now, cfg, kept)
        for op, k, i, extra in data.draw(st.lists(OP, min_size=1, max_size=5)):
            job = request(jid, k)
            jid += 1
            if op == "place":
                n = nodes[i % len(nodes)]
                uuids = tuple(g.uuid for g in n.gpus[:job.gpus])
                fresh.place(job, n.name, uuids)
                mine.place(job, n.name, uuids)
            else:
                begin = now + extra if op == "begin" else None
                got = mine.reserve(job, capacity.could_ever_hold, begin)
                assert got == fresh.reserve(job, capacity.could_ever_hold, begin)
        assert allocs_of(mine) == allocs_of(fresh)
        # The next pass: the clock moves; some running jobs end, are preempted or get a new record;
        # some start; a node heartbeats (a new record, the same shape) or changes.
        now += data.draw(STEP)
        for j in list(jobs.values()):
            what = data.draw(st.sampled_from(["keep"] * 5 + ["end", "copy", "preempt"]))
            if what == "end":
                del jobs[j.id]
            elif what == "copy":
                jobs[j.id] = replace(j, reason=states.PRIORITY)
            elif what == "preempt" and j.state == states.RUNNING:
                jobs[j.id] = replace(j, state=states.PREEMPTING, preempt_time=now)
        for i, gpus, cpus, ago, limit, est in data.draw(st.lists(RUN, max_size=3)):
            jobs[jid] = running(jid, nodes[i % len(nodes)], gpus, cpus, now - ago / 10, limit, est)
            jid += 1
        k = data.draw(st.integers(0, len(nodes) - 1))
        what = data.draw(st.sampled_from(["none"] * 6 + ["heartbeat", "cpus"]))
        if what == "heartbeat":
            nodes[k] = replace(nodes[k], last_heartbeat=now)
        elif what == "cpus":
            nodes[k] = replace(nodes[k], cpus=nodes[k].cpus + 8)


def test_an_answer_the_clock_passed_is_asked_again_and_a_logged_node_too():
    """The two ways a kept answer goes stale, each alone (the property test above finds both)."""
    asked: list[str] = []
    answers = {"a": 100.0, "b": 300.0, "c": None}

    def ask(n):
        asked.append(n)
        return answers[n]
    e = earliest.Earliest(0, 0, 50.0, {n: ask(n) for n in "abc"})
    assert e.first(()) == (100.0, "a") and e.first({"a"}) == (300.0, "b")
    asked.clear()
    answers["a"] = 400.0
    e.refresh([], 150.0, ask)            # the clock passed a's answer: a is asked, b and c are not
    assert asked == ["a"] and e.first(()) == (300.0, "b")
    asked.clear()
    answers["c"] = 200.0
    e.refresh(["c"], 160.0, ask)         # c's timeline changed
    assert asked == ["c"] and e.first(()) == (200.0, "c") and e.order == [(200.0, "c"), (300.0, "b"), (400.0, "a")]
