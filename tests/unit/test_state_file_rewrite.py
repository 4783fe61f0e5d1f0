"""The scheduler's state file (daemon/durability.StateFile) is saved after every tick that hands out job
ids: its record is padded to SLOT bytes so that a save is one pwrite over the file this process wrote
last, not a tmp file and a rename each time (~100-200 us of the scheduler's CPU per tick, issue 39).
Where the path no longer names that file (a standby or `labq admin accept-loss` put its own there, or
an older labq wrote it unpadded), or the record does not fit, it is written and renamed as before."""
import json
import os

from labq.scheduler.daemon import durability
from labq.scheduler.daemon.durability import SLOT, StateFile
from labq.scheduler.store.figures import Figures


def _renames(monkeypatch) -> list:
    seen = []
    real = os.replace
    monkeypatch.setattr(durability.os, "replace", lambda a, b: seen.append(b) or real(a, b))
    return seen


def test_saves_after_the_first_rewrite_the_record_in_place(tmp_path, monkeypatch):
    """Failed before: every save was a tmp file and a rename (5 renames for 5 saves)."""
    path = str(tmp_path / "state.json")
    renames = _renames(monkeypatch)
    f = StateFile(path)
    for i in range(5):
        f.save(Figures(last_job_id=i + 1, ledger_count=i, ledger_last=f"{i}-0", ledger_hash="ab" * 8))
        assert f.load() == Figures(last_job_id=i + 1, ledger_count=i, ledger_last=f"{i}-0", ledger_hash="ab" * 8)
        assert os.path.getsize(path) == SLOT
    assert renames == [path]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert json.load(open(path))["last_job_id"] == 5          # plain JSON, as any reader takes it


def test_a_file_another_process_put_there_is_written_anew_not_behind_its_back(tmp_path, monkeypatch):
    """A standby (or accept-loss) renames its own file over the path: the next save writes the path
    again (failed with a rewrite of the descriptor kept: the file on disk kept the other's figures)."""
    path = str(tmp_path / "state.json")
    mine, other = StateFile(path), StateFile(path)
    mine.save(Figures(last_job_id=1))
    mine.save(Figures(last_job_id=2))
    other.save(Figures(last_job_id=7))
    assert mine.load() == Figures(last_job_id=7)
    renames = _renames(monkeypatch)
    mine.save(Figures(last_job_id=8))
    assert mine.load() == Figures(last_job_id=8) and renames == [path]
    mine.save(Figures(last_job_id=9))                          # in place again
    assert mine.load() == Figures(last_job_id=9) and renames == [path]


def test_an_older_unpadded_file_and_a_record_too_long_are_renamed_as_before(tmp_path, monkeypatch):
    path = str(tmp_path / "state.json")
    with open(path, "w") as fh:                                # as a labq before this wrote it
        json.dump({"last_job_id": 3, "ledger_count": 0, "ledger_last": "", "ledger_hash": ""}, fh)
    f = StateFile(path)
    assert f.load() == Figures(last_job_id=3)
    renames = _renames(monkeypatch)
    f.save(Figures(last_job_id=4))
    assert f.load() == Figures(last_job_id=4) and os.path.getsize(path) == SLOT and len(renames) == 1
    long = Figures(last_job_id=5, ledger_last="9" * SLOT)
    f.save(long)
    f.save(Figures(last_job_id=6, ledger_last="9" * SLOT))
    assert f.load() == Figures(last_job_id=6, ledger_last="9" * SLOT) and len(renames) == 3
    f.save(Figures(last_job_id=7))                             # fits again: renamed once, then rewritten
    f.save(Figures(last_job_id=8))
    assert f.load() == Figures(last_job_id=8) and len(renames) == 4
