"""What an array kept as one record (issue 39 item 1) may rely on: plan() over a snapshot that holds
only the first W pending tasks of each array (window_of: the slots of the up nodes + backfill_depth
+ 1, and at least priority.burst_jobs where burst tails count) decides what it decides over every
task: the same starts, preemptions, expiries and reservations, and the same reason for each job both
passes see. The rest of an array then need not exist as jobs until a pass reaches it. Random
clusters, running work, singles and arrays (held, throttled, other QoS, gangs of two nodes), with
backfill and burst tails on and off. No job here depends on an array: plan() takes a task missing from the snapshot for
one with no record (DependencyNeverSatisfied, and with --kill-on-invalid-dep a cancel), so a window
needs the snapshot to say which ids the rest holds."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.daemon import state
from labq.scheduler.jobs import rest
from tests.harness import ClusterBuilder, cfg

CONFIGS = (
    "",
    "[scheduler]\nbackfill_depth = 0\n",
    "[scheduler]\nbackfill_depth = 3\n[priority]\nburst_jobs = 2\nburst_window = \"10m\"\nburst_penalty = 5000\n",
    "[qos.normal]\npriority = 10\n[qos.low]\npriority = 0\npreemptible = true\n",
    "[priority]\nburst_jobs = 30\nburst_window = \"1h\"\nburst_penalty = 5000\n",
)

shape = st.tuples(st.integers(0, 2), st.integers(1, 4), st.sampled_from([600, 3600, 7200]),
                  st.sampled_from(["alice", "bob"]), st.sampled_from(["normal", "low"]))
array = st.tuples(shape, st.integers(1, 60), st.sampled_from([None, None, 1, 3]), st.booleans(),
                  st.integers(-50, 50), st.sampled_from([1, 1, 1, 2]))


@st.composite
def clusters(draw):
    c = ClusterBuilder()
    for i in range(draw(st.integers(1, 3))):
        c.node(f"n{i}", gpus=draw(st.integers(0, 4)), cpus=8, slots=draw(st.integers(1, 6)))
    for gpus, cpus, limit, user, qos in draw(st.lists(shape, max_size=4)):
        n = c.nodes[draw(st.integers(0, len(c.nodes) - 1))]
        if len(c.free_gpus(n, gpus)) >= gpus:
            c.running(n.name, gpus=gpus, cpus=cpus, time_limit=limit, user=user, qos=qos, preemptible=qos == "low")
    for gpus, cpus, limit, user, qos in draw(st.lists(shape, max_size=6)):
        c.job(gpus=gpus, cpus=cpus, time_limit=limit, user=user, qos=qos, submit_offset=draw(st.integers(-50, 50)))
    for (gpus, cpus, limit, user, qos), n, throttle, held, offset, width in draw(st.lists(array, min_size=1,
                                                                                             max_size=3)):
        first = c._next
        for i in range(n):
            c.job(gpus=gpus, cpus=cpus, time_limit=limit, user=user, qos=qos, submit_offset=offset, nodes=width,
                  array_id=first, array_index=i, array_count=n, array_throttle=throttle, held=held)
    return c


def window_of(snap, conf) -> int:
    """Enough of an array's first tasks to start every one that could (each takes a slot), to reserve
    for the blocked ones backfill_depth reserves for, and one left pending to carry the array's reason;
    with burst tails on, at least a burst allowance, so that the jobs behind the array stay tails."""
    w = sum(n.slots for n in snap.nodes if n.state == "up") + conf.backfill_depth + 1
    return max(w, conf.priority.burst_jobs) if conf.priority.burst_penalty else w


def _verdicts(plan, seen) -> dict:
    return {p.job_id: (p.reason, p.detail) for p in plan.pending if p.job_id in seen}


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from(CONFIGS), st.sets(st.integers(0, 80), max_size=6))
def test_a_window_of_each_arrays_first_tasks_plans_as_all_of_them(c, toml, beyond):
    """`beyond`: tasks past the window kept all the same (positions in their array), as a task
    touched on its own (`hold A_i`, `del A_i`) is materialised out of order."""
    conf = cfg(toml)
    snap = c.build()
    window = window_of(snap, conf)
    kept, taken = [], {}
    for j in snap.jobs:
        if j.array_id is not None and j.state == "PD":
            taken[j.array_id] = taken.get(j.array_id, 0) + 1
            if taken[j.array_id] > window and j.id - j.array_id not in beyond:
                continue
        kept.append(j)
    whole, part = policy.plan(snap, conf), policy.plan(replace(snap, jobs=tuple(kept)), conf)
    assert part.places == whole.places
    assert part.preempts == whole.preempts
    assert part.expires == whole.expires
    assert part.starts == whole.starts
    seen = {j.id for j in kept}
    assert _verdicts(part, seen) == _verdicts(whole, seen)


def _as_the_daemon_keeps_them(snap, conf, beyond):
    """The snapshot's jobs as the scheduler holds them (issue 39 item 1): each array one rest (its
    `beyond` positions made records on their own, as `del/hold A_i` does) plus the window that
    state.window and rest.topped_up make records; of a held rest, a burst allowance where burst
    tails count (state.held_tails: plan() sees them, no records; without them, a job submitted after
    a big held array escaped its burst tail)."""
    table, arrays = [], {}
    for j in snap.jobs:
        if j.array_id is not None and j.state == "PD":
            arrays.setdefault(j.array_id, []).append(j)
        else:
            table.append(j)
    rests = {}
    for a, tasks in arrays.items():
        whole = rest.Rest(template=tasks[0], lo=0, step=1, runs=((0, len(tasks) - 1),))
        out = [p for p in sorted(beyond) if p < len(tasks)]
        table += whole.tasks(out)
        rests[a] = whole.without(out)
    rests = {a: r for a, r in rests.items() if r is not None}
    burst = conf.priority.burst_jobs if conf.priority.burst_penalty else 0
    _, made = rest.topped_up(rests, table, state.window(snap.nodes, conf), burst)
    return tuple(sorted(table + made, key=lambda j: j.id))


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from(CONFIGS), st.sets(st.integers(0, 80), max_size=6))
def test_the_schedulers_rests_and_windows_plan_as_all_their_tasks(c, toml, beyond):
    """The daemon's own window (state.window, rest.topped_up) over rests: plan() decides what it
    decides over every task as a record."""
    conf = cfg(toml)
    snap = c.build()
    kept = _as_the_daemon_keeps_them(snap, conf, beyond)
    whole, part = policy.plan(snap, conf), policy.plan(replace(snap, jobs=kept), conf)
    assert part.places == whole.places
    assert part.preempts == whole.preempts
    assert part.expires == whole.expires
    assert part.starts == whole.starts
    seen = {j.id for j in kept}
    assert _verdicts(part, seen) == _verdicts(whole, seen)
