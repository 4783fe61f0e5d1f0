"""`labq prio`'s ranking published by the leader (daemon/ranking.py, store/ranking.py, issue 39 item 4):
it is the very text the client renders from the `stat` rows at its time; the commits after it count
each user's changed jobs beside it in their own transactions, so a user whose job changed since gets
the ranking with their own jobs patched in (their new job listed: priopatch.py) and the others get
the ranking with its age and how many jobs changed since; redone after ranking.GAP where jobs changed, after ranking.REFRESH where none did;
the other forms of `prio`, a ranking older than prio.STALE and one whose publisher no longer leads (a
downgrade: Keys.ranking_by) rank the rows; a rest's tasks are ranked
as the client spreads them and its change counts as its owner's; a long queue and a new leader delete it."""
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from labq.cli import prio
from labq.cli.ctx import thin_client
from labq.scheduler import priofilter, priotable
from labq.scheduler.client import current_user
from labq.scheduler.daemon import ranking
from labq.scheduler.store.keys import Keys
from tests import harness
from tests.harness import ROOT, BudgetBench, push

K = Keys()
# a second account (fair share tells them apart), a burst allowance of 2 and ages that show in seconds
MORE = '[accounts.phi]\nusers = ["{user}"]\nshare = 3\n[priority]\nburst_jobs = 2\nage_max = 600\n'


def _client_text(bench, now) -> str:
    """What the client renders from the rows at `now` (cli/prio.py's ranked), as a plain `prio` prints it."""
    c = thin_client(str(bench.cfg_path))
    order, f, _ = prio.ranked(c, now, bench.cfg)
    w = priotable.Weights({k: getattr(bench.cfg.priority, k) for k in priotable.WEIGHTS + priotable.SCALES})
    return priotable.weights_line(w) + "\n" + priotable.table(order, f, w, False)


def _labq(bench, tmp_path, *argv) -> str:
    env = {**os.environ, "LABQ_REDIS_URL": bench.rp.url, "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("LABQ_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "labq", "--config", str(bench.cfg_path), *argv], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-800:]
    return p.stdout


@pytest.mark.redis
def test_published_ranking_is_the_clients_text_and_a_users_own_change_ranks_the_rows(redis_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    monkeypatch.setattr(harness, "BUDGET_CONFIG", harness.BUDGET_CONFIG + MORE)
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)       # some usage, each account its own: fair shares below 1
    bench.run_job(10, account="phi")
    now = time.time()
    # runs (n1's every CPU; no GPU: no cost) since 100 s, so that the rest wait for Resources and
    # fair share counts its use so far
    bench.submit_at(now - 100, cpus=16)
    for est in (5, 50, 500):
        bench.submit_at(now - est, est=est)
        bench.submit_at(now - est, est=est, account="phi")
    bench.submit_at(now, array=[0, 5, 1])
    bench.submit_at(now, hold=True, est=1)
    rank = bench.s.planner.ranking = ranking.Ranking(bench.s)      # this test's passes alone publish
    assert rank.after_pass(now + 0.5)
    at, _, text = bench.r.get(K.ranking).partition("\n")
    assert float(at) == now + 0.5 and text == _client_text(bench, now + 0.5)
    assert len(text.splitlines()) == 2 + 7 + 1 and "_[0-5]" in text and "-" in text.split("BURST")[1]
    assert not rank.after_pass(now + 0.5 + ranking.GAP), "nothing changed since: not before ranking.REFRESH"

    shown = _labq(bench, tmp_path, "prio").splitlines()
    assert shown[0].startswith(text.splitlines()[0] + "; as of ") and shown[0].endswith(" s ago")
    assert shown[1:] == text.splitlines()[1:]
    assert "as of" not in _labq(bench, tmp_path, "prio", "-r").splitlines()[0], "-r ranks the rows"
    theirs = _labq(bench, tmp_path, "prio", "-A", "phi").splitlines()      # -u/-A: its lines (priofilter)
    assert theirs[0] == shown[0] or theirs[0].startswith(text.splitlines()[0] + "; as of ")
    assert theirs[1:] == priofilter.only(text, None, "phi").splitlines()[1:] and len(theirs) == 2 + 3
    assert all(" phi " in line for line in theirs[2:])

    new = bench.submit_at(now + 2)       # its commit counts the submitter's change beside the ranking
    changes = bench.r.hgetall(K.ranking_since)      # the submit's commit and its pass's (the job's reason)
    assert bench.r.get(K.ranking) == f"{at}\n{text}" and list(changes) == [current_user()]
    shown = _labq(bench, tmp_path, "prio").splitlines()
    # the submitter's own prio: the ranking with their jobs as they are now (priopatch.py), the new job
    # in it, as the rows ranked at the ranking's time give it
    assert shown[0].startswith(text.splitlines()[0] + "; as of ") and shown[0].endswith(" s ago")
    assert f"{new} " in "\n".join(shown) and shown[1:] == _client_text(bench, float(at)).splitlines()[1:]
    other = SimpleNamespace(read=thin_client(str(bench.cfg_path)).read, user="someone-else")
    seen = prio.published(other, time.time()).splitlines()
    assert seen[0].endswith(f" s ago, {changes[current_user()]} job changes since") and seen[1:] == text.splitlines()[1:]
    leader, ttl = bench.r.get(K.leader), bench.r.pttl(K.leader)
    assert leader and bench.r.get(K.ranking_by) == leader, "published by this leader"
    bench.r.set(K.leader, "older:2:b")      # a labq older than the ranking leads (a downgrade): it counts no change
    assert prio.published(other, time.time()) is None, "its publisher no longer leads: `prio` ranks the rows"
    bench.r.delete(K.leader)
    assert prio.published(other, time.time()) is None, "no leader this instant: the rows say"
    bench.r.set(K.leader, leader, px=ttl if ttl > 0 else None)
    assert prio.published(other, time.time()).splitlines()[1:] == text.splitlines()[1:]

    assert not rank.after_pass(now + 3), "within ranking.GAP of the last render"
    bench.r.lpush(K.wake, "1")
    assert not rank.after_pass(now + 0.5 + ranking.GAP), "requests wait: not now"
    bench.r.delete(K.wake)
    assert rank.after_pass(now + 0.5 + ranking.GAP), "jobs changed since"
    assert not bench.r.exists(K.ranking_since) and f"\n{new} " in _labq(bench, tmp_path, "prio")
    assert "as of" in _labq(bench, tmp_path, "prio")
    bench.r.set(K.ranking, f"{time.time() - prio.STALE - 1!r}\n{text}")
    assert "as of" not in _labq(bench, tmp_path, "prio"), "a ranking older than STALE: ranked from the rows"


def _owners_prio(bench) -> list[str]:
    """The lines of the submitter's plain `prio` from the published ranking, patched (not ranked)."""
    got = prio.published(SimpleNamespace(read=thin_client(str(bench.cfg_path)).read, user=current_user()), time.time())
    assert got is not None, "patched, not ranked from the rows"
    return got.splitlines()[1:]


@pytest.mark.redis
def test_a_ranking_is_redone_after_refresh_ranks_a_rest_and_a_long_queue_and_a_new_leader_drop_it(redis_server, tmp_path,
                                                                                             monkeypatch):
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    bench = BudgetBench(redis_server, tmp_path)
    now = time.time()
    bench.submit_at(now, cpus=16)
    bench.submit_at(now)
    rank = bench.s.planner.ranking = ranking.Ranking(bench.s)
    assert rank.after_pass(now) and bench.r.get(K.ranking).startswith(repr(now))
    assert not rank.after_pass(now + ranking.REFRESH - 1)
    assert rank.after_pass(now + ranking.REFRESH)
    assert bench.r.get(K.ranking).startswith(repr(now + ranking.REFRESH))
    arr = bench.submit_at(now + ranking.REFRESH + 1, hold=True, array=[0, 1999, 1])   # a rest: its owner's change
    assert bench.s.state.rests and bench.r.exists(K.ranking) and bench.s.store.ranking.ranked
    at = bench.r.get(K.ranking).partition("\n")[0]
    assert bench.r.hget(K.ranking_mine, current_user()) == "*", "an older client declines (array lines)"
    assert _owners_prio(bench) == _client_text(bench, float(at)).splitlines()[1:], "the rest patched in"
    assert rank.after_pass(now + 3 * ranking.REFRESH), "ranked with the rest's tasks, spread as the client does"
    at, _, text = bench.r.get(K.ranking).partition("\n")
    assert text == _client_text(bench, float(at)) and f"\n{arr}_[0-" in text and "-1999]" in text
    assert bench.s.store.ranking.owners == {arr: (current_user(), now + ranking.REFRESH + 1)}
    monkeypatch.setattr(ranking, "MOST", 2000)      # a pending job and 2,000 resting tasks: the rest counts
    assert not rank.after_pass(now + 4 * ranking.REFRESH) and not bench.r.exists(K.ranking)
    monkeypatch.setattr(ranking, "MOST", 0)
    bench.s.state.rests.clear()
    assert rank.after_pass(now + 4 * ranking.REFRESH) is False and not bench.r.exists(K.ranking)
    monkeypatch.setattr(ranking, "MOST", 10)
    assert rank.after_pass(now + 5 * ranking.REFRESH) and bench.r.exists(K.ranking)
    monkeypatch.setattr(ranking, "MOST", 0)
    assert not rank.after_pass(now + 6 * ranking.REFRESH) and not bench.r.exists(K.ranking), "more than MOST: withdrawn"
    bench.s.store.ranking.ranked = True
    bench.r.set(K.ranking, "1\nx")
    bench.s.store.rebuild_stat_rows(bench.s.jobs.values())      # as a scheduler does on taking the lease
    assert not bench.r.exists(K.ranking)


@pytest.mark.redis
def test_the_owners_prio_patches_a_rests_changes_in(redis_server, tmp_path, monkeypatch):
    """A rest's submit, a task of it released alone (it leaves the rest: a record), its cancel whole and
    a small array's task cancelled: each time the owner's `prio` is the published ranking patched
    (priopatch.py), equal to the client's ranking of the rows at the ranking's time."""
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    monkeypatch.setattr(harness, "BUDGET_CONFIG", harness.BUDGET_CONFIG + MORE)
    bench = BudgetBench(redis_server, tmp_path)
    now = time.time()
    bench.submit_at(now - 100, cpus=16)
    bench.submit_at(now - 50, est=50)
    small = bench.submit_at(now - 20, array=[0, 5, 1], account="phi")
    rank = bench.s.planner.ranking = ranking.Ranking(bench.s)
    for step, (ids, body) in enumerate([(None, {"hold": True, "array": [0, 1999, 1]}), (["{arr}_7"], "release"),
                                        ([f"{small}_2"], "cancel"), (["{arr}"], "cancel")]):
        t = now + step * ranking.REFRESH
        assert rank.after_pass(t), step
        if ids is None:
            arr = bench.submit_at(t + 1, **body)
        else:
            push(bench.r, current_user(), {"rid": f"c{step}", "op": body,
                                           "body": json.dumps({"ids": [i.format(arr=arr) for i in ids]})})
            bench.r.delete(K.wake)
            bench.s.tick(t + 1, [f"user:{current_user()}"])
        assert bench.r.hget(K.ranking_mine, current_user()) == "*" or step == 2, "an older client declines"
        assert _owners_prio(bench) == _client_text(bench, t).splitlines()[1:], step
    assert not bench.s.state.rests and f"{arr}_" not in "\n".join(_owners_prio(bench))


@pytest.mark.redis
def test_a_user_past_cap_is_ranked_again_at_once_not_after_gap(redis_server, tmp_path, monkeypatch):
    """A submit script puts its user past store/ranking.CAP: their `prio` ranks the rows until the next
    ranking, which the next quiet pass publishes at once, not ranking.GAP after the last one (but
    COST_GAP times its render apart); a user within CAP waits GAP as before."""
    from labq.scheduler.store import ranking as published
    monkeypatch.setenv("LABQ_REDIS_URL", redis_server.url)
    monkeypatch.setattr(published, "CAP", 3)
    bench = BudgetBench(redis_server, tmp_path)
    now = time.time()
    bench.submit_at(now, cpus=16)
    rank = bench.s.planner.ranking = ranking.Ranking(bench.s)
    assert rank.after_pass(now)
    rank.cost = 0.0         # the render's own time does not decide here
    for k in range(3):
        bench.submit_at(now + 0.1 + k / 10, hold=True)
    assert bench.r.hget(K.ranking_mine, current_user()) != "*" and not rank.after_pass(now + 1), "within CAP: GAP"
    bench.submit_at(now + 0.5, hold=True)
    assert bench.r.hget(K.ranking_mine, current_user()) == "*"
    assert rank.after_pass(now + 1), "past CAP: at once"
    assert not bench.r.exists(K.ranking_mine)
    bench.submit_at(now + 1.2, hold=True)
    assert not rank.after_pass(now + 1.5) and rank.after_pass(now + 1 + ranking.GAP), "within CAP again: GAP"
