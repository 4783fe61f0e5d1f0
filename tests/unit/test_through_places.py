"""sim/through.py gives each active job a place in `active`'s order (what Seen.tell sorts the running
jobs by) without a dict entry per job where ids come in rising order: the place is the id, and only an
id put after a higher one (or put again after it left) is kept apart, past every place given before."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Job
from labq.scheduler.sim.through import Through

BASE = Job(id=1, name="j", user="u", account="a", argv=("x",), workdir="/", submit_time=1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 30)), max_size=60))
def test_places_sort_as_the_active_order(steps):
    th = Through()
    for put, i in steps:
        if put:
            th.put(replace(BASE, id=i))
        else:
            th.leave(i)
        jobs = list(th.active.values())
        places = [th._place(j) for j in jobs]
        assert places == sorted(places) and len(set(places)) == len(places)


def test_rising_ids_keep_no_entry():
    th = Through()
    for i in range(1, 1001):
        th.put(replace(BASE, id=i))
    for i in range(1, 1001, 3):
        th.leave(i)
        th.put(replace(BASE, id=i + 1))      # a record replaced in place
    assert th.places == {}
    th.put(replace(BASE, id=1))             # back after it left, below the highest id: kept apart, last
    places = [th._place(j) for j in th.active.values()]
    assert list(th.places) == [1] and places[-1] == th.places[1] > max(places[:-1])
