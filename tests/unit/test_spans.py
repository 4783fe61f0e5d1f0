"""policy/spans.py: where a pass stops in a block (the first class from a place on whose span is within its
shape's bound) read by chunks with each one's shortest span per shape, held to a scan class by class as the
block's classes come and go the ways blocks.py moves them (insert, remove, prepend, extend)."""
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from labq.scheduler.policy import spans as sp

SHAPES = [(1, "", 4, 32), (2, "", 8, 64), (4, "a100", 16, 128)]
INF = float("inf")


def _group(limit, shape):
    return SimpleNamespace(jobs=[SimpleNamespace(time_limit=limit, learned_est=None)], plain=(None, SHAPES[shape]))


classes = st.tuples(st.sampled_from([0, 60, 600, 3600, 7200]), st.integers(0, 2))    # (a limit, 0: none: inf)


def _first(block, lo, bounds, now):
    for i in range(lo, len(block)):
        g = block[i][1]
        if now + sp.span(g.jobs[0], False) <= bounds[sp.KINDS[g.plain[1]]]:
            return i
    return len(block)


@settings(max_examples=300, deadline=None)
@given(st.lists(classes, min_size=1, max_size=700), st.data())
def test_the_first_class_within_its_shape_s_bound_as_a_scan_finds_it(made, data):
    now = 1.7e9 + data.draw(st.sampled_from([0.0, 0.1, 0.3]))
    block = [((float(2 * i), i), _group(*c)) for i, c in enumerate(made)]    # (front, class), in order
    fronts = [f for f, _ in block]
    s = sp.Spans([g for _, g in block], fronts, False)
    nxt = len(block)
    for _ in range(8):
        for what in data.draw(st.lists(st.sampled_from(["insert", "remove", "prepend", "extend"]), max_size=40)):
            if what == "remove" and block:
                at = data.draw(st.integers(0, len(block) - 1))
                del block[at], fronts[at]
                s.remove(at)
            elif what == "insert" and len(block) >= 2:
                at = data.draw(st.integers(1, len(block) - 1))
                f = (fronts[at - 1][0] + 1e-3 * (1 + nxt % 7), nxt)
                g = _group(*data.draw(classes))
                block.insert(at, (f, g))
                fronts.insert(at, f)
                s.insert(at, f, g)
            elif what in ("prepend", "extend"):
                more = [_group(*c) for c in data.draw(st.lists(classes, min_size=1, max_size=300))]
                if what == "prepend":
                    start = (fronts[0][0] if fronts else 0.0) - 2 * len(more)
                    new = [((start + 2 * k, nxt + k), g) for k, g in enumerate(more)]
                    block[:0], fronts[:0] = new, [f for f, _ in new]
                    s.prepend(more, fronts)
                else:
                    start = (fronts[-1][0] if fronts else 0.0) + 2
                    new = [((start + 2 * k, nxt + k), g) for k, g in enumerate(more)]
                    given = sp.Spans(more, [f for f, _ in new], False) if data.draw(st.booleans()) else None
                    s.extend(given, more, [f for f, _ in new])
                    block += new
                    fronts += [f for f, _ in new]
                nxt += len(more)
        bounds = [data.draw(st.sampled_from([-INF, now + 60, now + 599.9, now + 600, now + 7200, INF]))
                  for _ in sp.KINDS]
        for lo in sorted(set(data.draw(st.lists(st.integers(0, max(0, len(block) - 1)), max_size=6)) + [0])):
            assert s.first(lo, fronts, bounds, now) == _first(block, lo, bounds, now)
