"""The replay's candidates in submit order (scheduler/sim/order.py `SubmitOrder.fitting`): drawn from
each shape's own jobs (`_shaped`: by span, or in submit order) they are exactly, and in the same order, those
the walk over the whole queue in submit order finds: same shapes, `latest >= t + span` tested float
for float (spans and times where the subtraction rounds otherwise included), the ids left out skipped."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler.sim import order
from labq.scheduler.sim.order import SubmitOrder

SHAPES = [(1, "", 4, 16), (2, "", 8, 32), (4, "A", 8, 64), (8, "", 64, 512)]
# Spans and times near one another at large magnitudes, where `late - t` and `t + span` round.
spans = st.one_of(st.sampled_from([0.1, 0.3, 1.0, 600.0, 3600.0]), st.floats(0, 1e5, allow_nan=False))
times = st.sampled_from([0.0, 1e9 + 0.1, 1.7e9 + 0.3, 123456.789])


def _queue(rows):
    jobs, fifo, keys, by_shape, shape_fifo = {}, [], {}, {}, {}
    for i, (s, span, submit) in enumerate(rows, start=1):
        jobs[i] = ("job", i)
        fifo.append((submit, i))
        keys[i] = (SHAPES[s], span)
        by_shape.setdefault(SHAPES[s], []).append((span, submit, i))
        shape_fifo.setdefault(SHAPES[s], []).append((submit, i))
    for mine in (fifo, *by_shape.values(), *shape_fifo.values()):
        mine.sort()
    return jobs, fifo, keys, by_shape, shape_fifo


# 1: a shape's jobs that end in time always sorted; 10**9: filtered from its submit order
@pytest.mark.parametrize("share", [1, order.FEW_SHARE, 10**9])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), spans, st.integers(0, 50).map(float)), max_size=120),
       times, st.dictionaries(st.integers(0, len(SHAPES) - 1), st.one_of(spans, st.just(float("inf"))), max_size=4),
       st.sets(st.integers(1, 120), max_size=30), st.booleans())
def test_the_shape_index_draws_the_candidates_the_walk_in_submit_order_finds(monkeypatch, share, rows, t, limits, leave,
                                                                            near):
    monkeypatch.setattr(order, "FEW_SHARE", share)
    jobs, fifo, keys, by_shape, shape_fifo = _queue(rows)
    # `near`: each shape's limit at t plus one of its jobs' spans, where rounding decides.
    latest = {SHAPES[s]: (t + by_shape[SHAPES[s]][0][0] if near and SHAPES[s] in by_shape else t + v)
              for s, v in limits.items()}
    walk = SubmitOrder(jobs, fifo, keys, leave)
    indexed = SubmitOrder(jobs, fifo, keys, leave, by_shape, shape_fifo)
    want = list(walk.fitting(latest, t))
    assert list(indexed.fitting(latest, t)) == want
    assert list(indexed.fitting(latest, t, (set(), leave))) == want
    assert want == [jobs[i] for _, i in fifo if i not in leave and keys[i][0] in latest
                    and latest[keys[i][0]] >= t + keys[i][1]]
