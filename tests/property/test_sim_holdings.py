"""sim/held.py keeps what the running jobs hold of a budget as they start and end, where plan()'s
BudgetBook sums it over every running job at each pass: the two must agree at any instant, in the
current period or across a period's end, for jobs within their commitment and jobs past it."""
from hypothesis import given, settings, strategies as st

from labq.scheduler import units
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.money import balance, periods
from labq.scheduler.money.ledger import Budget
from labq.scheduler.sim.held import Holdings

MONDAY = 1_795_996_800.0      # 2026-11-30 00:00 UTC: week 49 starts


def booked(b: Budget, jobs, t: float, lab: str) -> int:
    """BudgetBook's sum (policy/budget.py `_held`, `committed`), job by job."""
    if b.period == "none":
        return sum(balance.outstanding(j, b.name, t) + balance.accrued(j, b.name, t) for j in jobs)
    span = periods.bounds(b.period, lab, b.timezone)
    return sum(sum(balance.in_span(j, b.name, t, span)) for j in jobs)


job_spec = st.tuples(st.floats(0, 6 * 86400), st.integers(1, 10**8), st.floats(60, 20 * 86400),
                     st.booleans())


@settings(max_examples=150, deadline=None)
@given(period=st.sampled_from(["none", "week"]), specs=st.lists(job_spec, min_size=1, max_size=8),
       asks=st.lists(st.floats(0, 16 * 86400), min_size=1, max_size=6), gone=st.sets(st.integers(0, 7)))
def test_holdings_equal_the_sum_over_running_jobs(period, specs, asks, gone):
    b = Budget("lab", "usd", 10**12, period=period)
    h = Holdings(b)
    jobs = {}
    for i, (at, rate, length, outruns) in enumerate(specs):
        # a commitment of `length` seconds at `rate`; a job that outruns it runs past its end
        commit = units.accrue(rate, length) or 1
        jobs[i] = Job(id=i, user="u", account="a", time_limit=3600, commit=(("lab", commit),), rates=(("lab", rate),),
                      attempts=(Attempt(1, "n0", (), dispatch_time=MONDAY + at),))
    started = sorted(jobs.values(), key=lambda j: j.current.dispatch_time)
    for j in started:
        h.start(j)
    for i in gone:
        h.end(i)
    running = [j for j in started if j.id not in gone]
    last = max(j.current.dispatch_time for j in started)
    for dt in sorted(asks):
        t = last + dt
        lab = periods.current(b, t)
        assert h.at(t, lab) == booked(b, running, t, lab)
