"""The daemon's kept Backlog (policy.Kept, backfill off) is filed from what the Seen found changed since
the last snapshot, not by a check of every pending job: a pass costs its changes (issue 41: at 100,000
pending that check was ~100 ms of a pass). The Backlog then holds exactly the snapshot's pending jobs,
in the groups and burst tails a Backlog filed afresh has."""
from dataclasses import replace

from labq.scheduler import multifactor
from labq.scheduler.jobs import states
from labq.scheduler.policy import kept as kept_mod
from labq.scheduler.policy.backlog import Backlog
from labq.scheduler.policy.kept import Kept
from tests.harness import ClusterBuilder, cfg

CONFIG = '[scheduler]\nbackfill_depth = 0\n[priority]\nburst_jobs = 3\nburst_window = "1h"\n'


def _scene(n: int):
    b = ClusterBuilder().node("n0", gpus=2, cpus=8)
    b.running("n0", gpus=2, cpus=2, time_limit=3600, started_ago=60.0, user="alice")
    for k in range(n):
        b.job(gpus=1, cpus=1, user=("carol", "dave")[k % 2], submit_offset=float(k * 300))
    return b.build()


def _as_fresh(b: Backlog, jobs) -> None:
    pending = [j for j in jobs if j.state == states.PENDING]
    fresh = Backlog(b.burst)
    for j in sorted(pending, key=lambda j: (j.submit_time, j.id)):
        fresh.add(j)
    assert b.jobs == {j.id: j for j in pending}
    assert b.bursting == fresh.bursting == multifactor.burst_tail(pending, *b.burst)
    assert {k: g.ids for k, g in b.groups.items()} == {k: g.ids for k, g in fresh.groups.items()}


def test_a_pass_files_only_what_changed(monkeypatch):
    snap, c = _scene(400), cfg(CONFIG)
    kept = Kept()
    kept.inputs(snap, c)
    syncs, touched = [], []
    monkeypatch.setattr(kept_mod, "sync", lambda *a: syncs.append(1))
    real_add, real_remove = Backlog.add, Backlog.remove
    mine = kept.backlog
    monkeypatch.setattr(Backlog, "add", lambda self, j: (self is mine and touched.append(j.id)) or real_add(self, j))
    monkeypatch.setattr(Backlog, "remove", lambda self, i: (self is mine and touched.append(i)) or real_remove(self, i))
    jobs = {j.id: j for j in snap.jobs}
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    for j in pending[10:13]:                                   # a new reason: swapped, not re-filed
        jobs[j.id] = replace(j, reason=states.PRIORITY, detail="behind")
    for j in pending[100:102]:                                 # cancelled
        del jobs[j.id]
    jobs[9999] = replace(pending[0], id=9999, user="dave", submit_time=snap.now)      # submitted
    again = replace(snap, jobs=tuple(jobs.values()))
    kept.inputs(again, c)
    assert syncs == [] and sorted(touched) == sorted([pending[100].id, pending[101].id, 9999])
    _as_fresh(kept.backlog, again.jobs)
    kept.inputs(again, c)                  # the same snapshot planned again: nothing to file
    assert syncs == [] and len(touched) == 3


def test_a_backlog_out_of_step_with_the_seen_is_synced_whole(monkeypatch):
    """A snapshot seen while backfill was on (no Backlog kept then) leaves the next Backlog to be
    filed from the whole queue."""
    snap, c = _scene(50), cfg(CONFIG)
    kept = Kept()
    kept.inputs(snap, cfg(CONFIG.replace("backfill_depth = 0", "backfill_depth = 1")))
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    jobs = tuple(j for j in snap.jobs if j.id != pending[5].id)
    again = replace(snap, jobs=jobs)
    kept.inputs(again, c)
    _as_fresh(kept.backlog, jobs)
    gone = replace(again, jobs=tuple(j for j in jobs if j.id != pending[7].id))
    kept.inputs(gone, c)
    _as_fresh(kept.backlog, gone.jobs)
