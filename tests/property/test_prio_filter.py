"""priofilter.only (`labq prio -u USER` / `-A ACCOUNT` from the published ranking, issue 39 item 4):
where it does not decline, its text is the very text `prio -u` / `-A` ranks from the same queue at the
ranking's time (priotable's table of those jobs, byte for byte), over random queues of several users
and accounts (singles and arrays, equal submit times, bursts, QoS names the config lacks); it declines
only where the live table joins lines that the whole table kept apart."""
from hypothesis import given, settings, strategies as st

from labq.cli.prio import Pending
from labq.scheduler import priofilter, priotable
from labq.scheduler.settings import config as config_mod
from tests.harness import prio_config, prio_pending

AT = 1_000_000.0
USERS = ["alice", "bob", "carol"]
# (user, account, QoS, submitted how long before AT, tasks: 0 a single, else an array of that many)
job = st.tuples(st.sampled_from(USERS), st.sampled_from(["eta", "phi", "zed"]),
                st.sampled_from(["normal", "low", "high", "gone"]),
                st.one_of(st.floats(-20_000, 600), st.sampled_from([-700.0, -600.0, -5.0, 0.0, -1e6])),
                st.sampled_from([0, 0, 0, 0, 1, 3, 5]))
weight = st.one_of(st.integers(0, 60), st.floats(0, 60), st.sampled_from([0, 1, 1.5, 10, 50.0]))


def _cfg(tmp, qw, aw, fw, bp, burst_jobs, window):
    path = tmp / "labq.toml"
    path.write_text(prio_config(qw, aw, fw, bp, 7200, burst_jobs, window))
    return config_mod.load(str(path))


def _live(pending, usage, cfg, user, account) -> tuple[str, int]:
    """`prio -u/-A`'s text ranking the jobs itself, and its number of lines of jobs."""
    order, f = priotable.rank(sorted(pending, key=lambda j: j.id), AT, usage, cfg)
    shown = [j for j in order if (not user or j.user == user) and (not account or j.account == account)]
    w = priotable.weights_of(cfg)
    table = priotable.table(shown, f, w, False)
    return priotable.weights_line(w) + "\n" + table, len(priotable.lines(shown, f, w, False)[0])


@settings(max_examples=300, deadline=None)
@given(st.lists(job, max_size=40), st.dictionaries(st.sampled_from(["eta", "phi", "zed"]), st.floats(0, 1e6), max_size=3),
       st.tuples(weight, weight, weight, weight, st.integers(1, 6), st.sampled_from([600, 3600])),
       st.sampled_from([None, *USERS, "nobody"]), st.sampled_from([None, "eta", "phi", "zed", "none"]))
def test_a_users_or_accounts_lines_of_the_published_ranking_are_their_ranking(tmp_path_factory, specs, usage, weights,
                                                                               user, account):
    cfg = _cfg(tmp_path_factory.mktemp("f"), *weights)
    pending = prio_pending(specs, 1, AT)
    text = priotable.text(sorted(pending, key=lambda j: j.id), AT, usage, cfg)
    want, n = _live(pending, usage, cfg, user, account)
    got = priofilter.only(text, user, account)
    order, f = priotable.rank(sorted(pending, key=lambda j: j.id), AT, usage, cfg)
    _, cols, _, _ = priotable.lines(order, f, priotable.weights_of(cfg), False)      # the whole table's
    kept = sum(1 for u, a in zip(cols[0], cols[1]) if (not user or u == user) and (not account or a == account))
    if got is None:
        assert n < kept, "declined only where the live table joins two kept lines"
    else:
        assert got == want, (got, want)
    if not user and not account:
        assert got == text


def test_an_array_kept_apart_by_anothers_job_declines(tmp_path):
    """alice's array's tasks, bob's job between them in the whole ranking (an older submit time for it
    would have been first): `prio -u alice` joins them on one line, so only() declines."""
    cfg = _cfg(tmp_path, 1, 0, 0, 0, 6, 600)
    pending = [Pending(1, 1, 0, "alice", "eta", "normal", AT - 10, 60.0, None, None),
               Pending(2, None, None, "bob", "eta", "normal", AT - 10, 60.0, None, None),
               Pending(3, 1, 1, "alice", "eta", "normal", AT - 10, 60.0, None, None)]
    text = priotable.text(pending, AT, {}, cfg)
    assert [line.split()[0] for line in text.split("\n")[2:]] == ["1_0", "2", "1_1"], text
    assert priofilter.only(text, "alice", None) is None
    assert "1_[0-1]" in _live(pending, {}, cfg, "alice", None)[0]
    assert priofilter.only(text, "bob", None) == _live(pending, {}, cfg, "bob", None)[0]
