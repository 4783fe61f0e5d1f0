"""Roles generated before a labq's new keys (issue 39: the held arrays' labq:rests) answer NOPERM:
the thin reader says so in one line naming `labq admin acl --apply`, exit 3, not "does not answer"."""
import pytest

from labq.scheduler.errors import LabqError, RefusedError, UnreachableError
from labq.scheduler.store import resp
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.thinreads import ThinReader


class _Conn:
    def __init__(self, error: str):
        self.error = error

    def pipeline(self, cmds):
        return [resp.RespError(self.error) if i == len(cmds) - 1 else None for i in range(len(cmds))]


def _reader(error: str) -> ThinReader:
    return ThinReader(_Conn(error), Keys(), lambda e: UnreachableError(f"Redis at x does not answer: {e}"))


def test_noperm_on_stat_is_one_line_naming_the_acl_command():
    with pytest.raises(RefusedError) as e:
        _reader("NOPERM User client has no permissions to access the 'labq:rests' key").stat_rows()
    text = str(e.value)
    assert "\n" not in text and "labq admin acl --apply" in text and "labq:rests" in text
    assert e.value.exit_code == 3


def test_another_error_reply_is_still_unreachable():
    with pytest.raises(LabqError) as e:
        _reader("LOADING Redis is loading the dataset in memory").stat_rows()
    assert isinstance(e.value, UnreachableError) and e.value.exit_code == 4


def test_report_with_roles_older_than_its_totals_reads_every_job():
    """`labq report`'s kept totals (store/totals.py) are keys a role generated before them refuses: report
    then takes the full read (cli/report._kept says None), not an error."""
    from types import SimpleNamespace

    from labq.cli import report
    reader = _reader("NOPERM User client has no permissions to access the 'labq:report:v1:by' key")
    assert report._kept(SimpleNamespace(read=reader), ("account",), 0, float("inf")) is None
