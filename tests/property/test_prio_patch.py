"""priopatch.patch (`labq prio` for a user whose jobs changed since the published ranking, issue 39
item 4): where it does not decline, its text is the very text the leader would have rendered at the
ranking's time from the queue with that user's jobs as they are now (priotable.text, byte for byte),
over random queues of several users (singles and arrays, an array's tasks records or resting from a
position on, equal submit times, bursts, aged-out jobs, jobs submitted after the ranking, QoS names
and accounts the config lacks) and random changes of one user's jobs (submits of jobs, arrays and
rests, cancels, starts, a job changed and still pending, a task leaving its rest, a rest cancelled
whole or held), which move other jobs of theirs in or out of the tail of a burst. Submits and cancels
of single jobs, the churn of the live bench, and a rest's cancel, are patched, not declined."""
import json

from hypothesis import given, settings, strategies as st

from labq.scheduler import priopatch, priotable
from labq.scheduler.settings import config as config_mod
from tests.harness import prio_config, prio_pending

AT = 1_000_000.0
USERS = ["alice", "bob", "carol"]
job = st.tuples(st.sampled_from(USERS), st.sampled_from(["eta", "phi", "zed"]),
                st.sampled_from(["normal", "low", "high", "gone"]),
                st.one_of(st.floats(-20_000, 600), st.floats(-30, 0), st.sampled_from([-700.0, -600.0, -5.0, 0.0, -1e6])),
                st.sampled_from([0, 0, 0, 0, 0, 1, 3, 5]),     # how many tasks: 0 a single, else an array of that many
                st.sampled_from([-1, 0, 0, 1, 2]))           # an array's tasks: -1 records, else a rest from that task on


def _cfg(tmp, qw, aw, fw, bp, burst_jobs, window):
    path = tmp / "labq.toml"
    path.write_text(prio_config(qw, aw, fw, bp, 7200, burst_jobs, window))
    return config_mod.load(str(path))


def _text(pending, usage, cfg) -> str:
    return priotable.text(sorted(pending, key=lambda j: j.id), AT, usage, cfg)


def _check(tmp_path, specs, usage, weights, change, user) -> str | None:
    """The published ranking of `specs`, `user`'s jobs changed by `change` (how many of theirs go, in
    burst order; how many after those are rewritten, pending; new jobs; how many of their arrays are
    cancelled whole; whether an array of theirs is listed unchanged, as a rest's hold is), patched."""
    cfg = _cfg(tmp_path, *weights)
    resting: set = set()
    before = prio_pending(specs, 1, AT, resting)
    text, fields = priopatch.render(before, AT, usage, cfg, resting)
    assert text == _text(before, usage, cfg), "the published text is priotable's"
    if not fields:
        return None
    drop, keep_changed, new, *more = change
    dels, held = more or (0, False)
    mine = sorted((j for j in before if j.user == user), key=lambda j: (j.submit_time, j.id))   # burst order
    gone = {j.id for j in mine[:drop]}                         # started, cancelled: pending no more
    again = {j.id for j in mine[drop:drop + keep_changed]}     # rewritten (a reason), still pending
    theirs = sorted({j.array_id for j in mine if j.array_id is not None})
    arrays = {a: j.submit_time for j in mine for a in theirs[:dels] if j.array_id == a and j.id in resting}
    ended = [min(j.id for j in mine if j.array_id == a and j.id in resting) for a in arrays]   # rest.ended's record
    whole = {j.id for j in mine if j.array_id in theirs[:dels]}
    again -= whole
    listed = gone | again | (whole - resting)       # `del A` lists A's records, its rest as A and one ended record
    gone |= whole
    arrays.update({j.array_id: j.submit_time for j in mine if j.id in resting and j.id in listed})
    if held and theirs[dels:]:
        arrays[theirs[-1]] = next(j.submit_time for j in mine if j.array_id == theirs[-1])
    added_rest: set = set()
    added = [j._replace(user=user) for j in prio_pending(new, 5_000, AT, added_rest)]   # submitted since
    arrays.update({j.array_id: j.submit_time for j in added if j.id in added_rest})
    after = [j for j in before if j.id not in gone] + added
    now_resting = (resting - listed - gone) | added_rest
    new_ids = {j.id for j in added}
    rows = [j for j in after if j.id in again or j.id in new_ids - added_rest or j.id in now_resting and j.array_id in arrays]
    submits = {j.id: j.submit_time for j in before + added}
    ids = listed | (new_ids - added_rest) | {4_999} | set(ended)
    changed = [(i, submits.get(i, AT - 1.0)) for i in sorted(ids)]
    got = priopatch.patch(text, fields[priopatch.HEAD], fields.get(user, ""), changed, rows, user,
                          sorted(arrays.items()))
    if got is not None:
        assert got == _text(after, usage, cfg), (got, _text(after, usage, cfg), rows, changed)
    return got


weight = st.one_of(st.integers(0, 60), st.floats(0, 60), st.sampled_from([0, 1, 1.5, 10, 50.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(job, max_size=40), st.dictionaries(st.sampled_from(["eta", "phi", "zed"]), st.floats(0, 1e6), max_size=3),
       st.tuples(weight, weight, weight, weight, st.integers(1, 4), st.sampled_from([0, 1, 10, 600])),
       st.tuples(st.integers(0, 4), st.integers(0, 2), st.lists(job, max_size=4), st.integers(0, 2), st.booleans()),
       st.sampled_from(USERS))
def test_a_patched_ranking_is_the_ranking_of_the_changed_queue(tmp_path_factory, specs, usage, weights, change, user):
    _check(tmp_path_factory.mktemp("p"), specs, usage, weights, change, user)


burst = st.tuples(st.sampled_from(USERS[:2]), st.sampled_from(["eta", "phi"]), st.sampled_from(["normal", "low"]),
                  st.one_of(st.floats(-40, 5), st.sampled_from([-20.0, -1e4])), st.just(0))


@settings(max_examples=200, deadline=None)
@given(st.lists(burst, min_size=5, max_size=40), st.tuples(st.just(1), st.integers(1, 30), st.floats(1, 30), st.just(10),
                                                           st.integers(1, 4), st.sampled_from([5, 600])),
       st.tuples(st.integers(0, 4), st.integers(0, 2), st.lists(burst, max_size=4)), st.sampled_from(USERS[:2]))
def test_single_jobs_in_bursts_are_patched_with_the_flags_they_flip(tmp_path_factory, specs, weights, change, user):
    """Single jobs only, submitted close together: a change moves others of the user into or out of
    the tail of a burst, and none of it declines."""
    assert _check(tmp_path_factory.mktemp("b"), specs, {"eta": 1.0}, weights, change, user) is not None


def test_a_users_churn_of_single_jobs_is_patched(tmp_path):
    """The live bench's set-up: one user holds the queue (a burst of it), submits and cancels."""
    specs = [("alice", "eta", "normal", -1.0 * i, 0) for i in range(300)] + \
            [("bob", "phi", "high", -3.0 * i, 0) for i in range(20)]
    weights = (10, 1000, 100, 20.0, 100, 600)
    for change in [(0, 0, [("alice", "eta", "normal", 5.0, 0)]), (1, 0, []), (3, 2, [("alice", "eta", "low", 1.0, 0)]),
                   (0, 5, [])]:
        got = _check(tmp_path, specs, {"eta": 5.0, "phi": 1.0}, weights, change, "alice")
        assert got is not None, change
    assert _check(tmp_path, specs, {}, weights, (2, 0, [("bob", "phi", "high", 1.0, 0)]), "bob") is not None
    held = specs + [("alice", "eta", "normal", -0.5, 40, 0)]    # and a held array of theirs, resting
    for change in [(0, 0, [], 1, False), (0, 0, [("alice", "eta", "normal", 1.0, 30, 0)], 0, False), (300, 3, [], 0, True)]:
        assert _check(tmp_path, held, {"eta": 5.0}, weights, change, "alice") is not None, \
            f"the live bench's: their rest cancelled whole, another submitted, tasks started: patched ({change})"
    flips = [("alice", "eta", "normal", -10.0, 0), ("alice", "eta", "normal", -9.0, 0), ("alice", "eta", "normal", -1.0, 3, 0)]
    assert _check(tmp_path, flips, {}, (10, 1000, 100, 20.0, 2, 600), (1, 0, []), "alice") is not None, \
        "a single cancelled before a rest that did not change: its first task's burst flag flips"
    assert _check(tmp_path, [], {}, weights, (0, 0, [("bob", "phi", "high", 1.0, 0)]), "bob") is not None, \
        "a ranking of an empty queue has an index: the first submits after it are patched in"


def test_no_index_where_the_terms_are_not_patched(tmp_path):
    """With the short-job term on multifactor.ranked declines, and the patch cannot render the term: no
    index is published, for an empty queue too, and an index that has it is not patched (tests/e2e/test_estimate_e2e.py's SHORT column printed 0.00 so)."""
    path = tmp_path / "labq.toml"
    _cfg(tmp_path, 10, 1000, 0, 0, 2, 600)
    path.write_text(path.read_text().replace("[priority]\n", "[priority]\nshort_job_weight = 5\n", 1))
    assert priopatch.render([], AT, {}, config_mod.load(str(path)))[1] == {}
    cfg = _cfg(tmp_path, 10, 1000, 0, 0, 2, 600)
    meta, _, keys = priopatch.render([], AT, {}, cfg)[1][priopatch.HEAD].partition("\n")
    h = json.loads(meta)
    h["w"]["short_job_weight"] = 5
    text = priotable.text([], AT, {}, cfg)
    assert priopatch.patch(text, json.dumps(h) + "\n" + keys, "", [(7, AT)], [], "bob") is None
