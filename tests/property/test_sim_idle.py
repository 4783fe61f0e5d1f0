"""A job the replay leaves out of a backfill pass as idle for its budget (scheduler/sim/idle.py, by its
policy/floors.py floor against BudgetBook.room) is one plan()'s budget gate pends on every node that
could hold it: the floor never exceeds the need plan() quotes, whatever the shape, time limit, unit,
billing, overhead, period and instant (a period's last seconds too)."""
from collections import Counter

from hypothesis import example, given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.money import periods
from labq.scheduler.policy.budget import BudgetBook
from labq.scheduler.policy.capacity import could_ever_hold, shape
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.idle import Idle

G = 1 << 30
NODES = (Node("a", 32, 256 * G, 8, tuple(Gpu(f"A-{i}", i, "A100") for i in range(4))),
         Node("h", 64, 512 * G, 8, tuple(Gpu(f"H-{i}", i, "H100") for i in range(8))))


def config(period, unit, billing, overhead, price):
    return config_mod.loads(
        f'[rates]\noverhead_per_attempt = {overhead}\nbilling = "{billing}"\n'
        'gpu_hour_by_model = { "A100" = 1.5, "H100" = 3.0 }\n'
        + (f'node_hour = {{ "h" = {price} }}\n' if price else "")
        + f'[[budgets]]\nname = "b"\naccount = "lab"\nlimit = 500.0\nperiod = "{period}"\nunit = "{unit}"\n')


def scene(period, unit, billing, overhead, price, gpus, cpus, limit, before_end, gpu_type):
    """(config, its budget, now: `before_end` before a period's end, the job)."""
    cfg = config(period, unit, billing, overhead, price)
    b = cfg.budgets[0]
    base = 1_700_000_000.0
    end = periods.span_at(b, base)[1] if period != "none" else base + 86400
    now = max(end - before_end, base - 30 * 86400)
    job = Job(id=1, user="u", account="lab", argv=("x",), workdir="/", gpus=gpus, gpu_type=gpu_type, cpus=cpus,
              mem=G, time_limit=limit, submit_time=now)
    return cfg, b, now, job


@settings(max_examples=400, deadline=None)
@given(period=st.sampled_from(["none", "week", "month"]), unit=st.sampled_from(["usd", "gpu_hours"]),
       billing=st.sampled_from(["second", "started_hour"]), overhead=st.sampled_from([0.0, 0.25]),
       price=st.sampled_from([0.0, 20.0]), gpus=st.integers(0, 4), cpus=st.integers(1, 32),
       limit=st.integers(1, 20 * 86400), before_end=st.floats(0.001, 40 * 86400), off=st.integers(-3, 3),
       gpu_type=st.sampled_from(["", "A100", "H100"]))
def test_an_idle_job_is_one_the_budget_gate_pends(period, unit, billing, overhead, price, gpus, cpus, limit,
                                                   before_end, off, gpu_type):
    """The budget's spending is put right at the edge: the job's smallest need over every node and
    GPU model it could get, give or take `off` micro-units. Idle only when none fits; never when the
    cheapest fits."""
    cfg, b, now, job = scene(period, unit, billing, overhead, price, gpus, cpus, limit, before_end, gpu_type)
    holders = [n for n in NODES if could_ever_hold(job, n)]
    if not holders:
        return
    label = periods.current(b, now) if period != "none" else ""
    empty = BudgetBook(cfg, {"b": 0}, (), now)
    quotes = [empty.quote(job, model, node)[0] for node in holders
              for model in {g.model for g in node.gpus if not gpu_type or g.model == gpu_type} or {""}]
    need = min(q.parts["b"][label] if period != "none" else dict(q)["b"] for q in quotes)
    spent = max(0, 500_000_000 - need + off)
    pk = Idle(cfg, NODES)
    pk.add(job)
    new = pk.update(now, {"b": spent}, [], 0)
    assert set(new) == pk.idle               # the first update: every idle job is newly idle
    book = BudgetBook(cfg, {"b": spent}, (), now)
    if pk.idle:
        assert all(book.blocked(q) is not None for q in quotes)
    if off <= 0 and need - off <= 500_000_000 and not billing == "started_hour":
        assert not pk.idle       # the cheapest placement fits: never idle


@settings(max_examples=400, deadline=None)
@given(period=st.sampled_from(["none", "week", "month"]), unit=st.sampled_from(["usd", "gpu_hours"]),
       billing=st.sampled_from(["second", "started_hour"]), overhead=st.sampled_from([0.0, 0.25]),
       price=st.sampled_from([0.0, 20.0]), gpus=st.integers(0, 4), cpus=st.integers(1, 32),
       limit=st.integers(1, 20 * 86400), before_end=st.floats(0.001, 40 * 86400),
       off=st.sampled_from([-1000, -3, -2, -1, 0, 1, 2, 3]),
       gpu_type=st.sampled_from(["", "A100", "H100"]))
def test_a_job_idle_py_says_its_budget_admits_is_admitted_on_any_node(period, unit, billing, overhead, price,
                                                                         gpus, cpus, limit, before_end, off, gpu_type):
    """The other side (strict.py skips a pass whose first job fits nowhere when its budget provably
    admits it): spending put at the edge of the job's largest need over every node and GPU model,
    and of the quote plan() makes for a job that fits nowhere (no node). Admitted whenever the
    parking says so; and said so whenever that largest need, all in the current period, fits with
    a little room to spare."""
    cfg, b, now, job = scene(period, unit, billing, overhead, price, gpus, cpus, limit, before_end, gpu_type)
    holders = [n for n in NODES if could_ever_hold(job, n)]
    if not holders:
        return
    empty = BudgetBook(cfg, {"b": 0}, (), now)
    models = {g.model for node in NODES for g in node.gpus if not gpu_type or g.model == gpu_type} or {""}
    quotes = [empty.quote(job, model, node)[0] for node in holders
              for model in {g.model for g in node.gpus if not gpu_type or g.model == gpu_type} or {""}]
    quotes += [empty.quote(job, model)[0] for model in models]

    def need(q):
        return sum(q.parts["b"].values()) if period != "none" else dict(q)["b"]
    spent = max(0, 500_000_000 - max(map(need, quotes)) + off)
    pk = Idle(cfg, NODES)
    pk.add(job)
    pk.update(now, {"b": spent}, [], 0)
    book = BudgetBook(cfg, {"b": spent}, (), now)
    admitted = pk.admits(job)
    if admitted:
        assert all(book.blocked(q) is None for q in quotes)
    one_period = period == "none" or all(len(q.parts["b"]) == 1 for q in quotes)
    if off == -1000 and one_period and billing == "second" and spent:
        assert admitted          # the dearest placement fits with room to spare (past the bound's 2 ms): said so


@settings(max_examples=200, deadline=None)
@given(period=st.sampled_from(["none", "week"]),
       shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(60, 3 * 86400)), min_size=1, max_size=12),
       ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "update"]), st.integers(0, 11),
                              st.integers(0, 104).map(lambda k: k * 5_000_000), st.floats(0, 2 * 86400)),
                    min_size=1, max_size=40))
@example(period="week", shapes=[(4, 3 * 86400)],     # the room stays, the period's end nears: the rate test
         ops=[("add", 0, 0, 0.0)] + [("update", 0, 200_000_000, step) for step in (0.0, 1.9 * 86400, 0.5 * 86400)])
def test_the_idle_set_follows_the_cut_as_jobs_come_and_go(period, shapes, ops):
    """The idle set is kept as a cut that moves (idle.py `_move`), not drawn anew: after every
    update it is exactly the queued jobs whose floor is over the room (c > x and a rate too dear to
    run to the period's end within x: BudgetBook.room), counted per request shape, and the ids an update calls new (counted
    held) are idle now, every one that was not idle at the last update among them."""
    cfg = config(period, "usd", "second", 0.0, 0.0)
    jobs = [Job(id=i + 1, user="u", account="lab", argv=("x",), workdir="/", gpus=g, cpus=4, mem=G, time_limit=lim,
                submit_time=1_700_000_000.0) for i, (g, lim) in enumerate(shapes)]
    pk = Idle(cfg, NODES)
    queued: set[int] = set()
    before: set[int] = set()
    t = 1_700_000_000.0
    for op, k, spent, step in ops:
        job = jobs[k % len(jobs)]
        if op == "add" and job.id not in queued:
            pk.add(job)
            queued.add(job.id)
        elif op == "remove" and job.id in queued:
            pk.remove(job.id)
            queued.discard(job.id)
        elif op == "update":
            t += step
            new = pk.update(t, {"b": spent}, [], 0)
            x, r, _ = BudgetBook(cfg, {"b": spent}, (), t).room("b")
            assert pk.cut["b"] == (x, r)
            over = {i for i in queued if pk.key[i][1] > x and pk.key[i][2] > r}
            assert pk.idle == over
            assert +pk.shapes == Counter(shape(jobs[i - 1]) for i in over)     # (what _inert leaves out)
            assert over - before <= set(new) <= over
            before = set(pk.idle)
