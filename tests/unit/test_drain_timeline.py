"""bench/drain_timeline.py's reading of strace output into a batch's phases (pure: synthetic lines in)."""
import os

import pytest

from tests.harness import bench_module


def _timeline():
    return bench_module("drain_timeline", "timeline_for_test")


TL = _timeline()


def _batch(t: float) -> list[str]:
    """One batch of the scheduler's calls from t: wait 4 ms, CPU 1, first read 0.5, CPU 5, commit 9, CPU 1.5."""
    return [
        f'{t:.6f} sendto(3, "*3\\r\\n$5\\r\\nBLPOP\\r\\n$9\\r\\nlabq:wake"..., 13732, 0, NULL, 0) = 13732 <0.000012>',
        f'{t + 0.003:.6f} recvfrom(3, "*2\\r\\n$9\\r\\nlabq:wake"..., 65536, 0, NULL, NULL) = 65536 <0.000010>',
        f'{t + 0.0039:.6f} recvfrom(3, "more of it"..., 262144, 0, NULL, NULL) = 1000 <0.000100>',
        f'{t + 0.0045:.6f} recvfrom(5, 0x2921d4e0, 32768, 0, NULL, NULL) = -1 EAGAIN (Resource temporarily unavailable) <0.000006>',
        f'{t + 0.005:.6f} sendto(5, "*3\\r\\n$5\\r\\nWATCH\\r\\n$11\\r\\nlabq:leader"..., 4981, 0, NULL, 0) = 4981 <0.000100>',
        f'{t + 0.0054:.6f} recvfrom(5, "+OK\\r\\n$15\\r\\nvm"..., 65536, 0, NULL, NULL) = 335 <0.000100>',
        f'{t + 0.0105:.6f} sendto(5, "*1\\r\\n$5\\r\\nMULTI\\r\\n*3"..., 96871, 0, NULL, 0) = 96871 <0.000021>',
        f'{t + 0.011:.6f} recvfrom(5, "+OK\\r\\n+QUEUED"..., 65536, 0, NULL, NULL) = 32 <0.000010>',
        f'{t + 0.0194:.6f} recvfrom(5, "+QUEUED\\r\\n*100"..., 65536, 0, NULL, NULL) = 2330 <0.000100>',
        f'{t + 0.0200:.6f} pwrite64(4, "{{\\"last_job_id\\": 4701"..., 512, 0) = 512 <0.000028>',
    ]


def test_a_batch_is_cut_into_its_phases(tmp_path):
    p = tmp_path / "strace.scheduler"
    p.write_text("\n".join(_batch(100.0) + _batch(100.021) + _batch(100.042)[:1]) + "\n")
    got = TL.batches(str(p))
    assert len(got) == 2
    ms = {name: round((got[0][e] - got[0][s]) * 1e3, 3) for name, s, e in TL.PHASES}
    assert ms == {"wait": 4.0, "cpu to first read": 1.0, "first read": 0.5, "cpu handling": 5.0, "commit": 9.0,
                  "cpu after commit": 1.5, "batch": 21.0}


def test_a_batch_without_a_commit_is_left_out(tmp_path):
    p = tmp_path / "strace.scheduler"
    p.write_text("\n".join(_batch(100.0)[:3] + _batch(100.021) + _batch(100.042)[:1]) + "\n")
    assert [round(b["wait_s"], 3) for b in TL.batches(str(p))] == [100.021]


def test_redis_fsyncs_are_read_with_their_time(tmp_path):
    p = tmp_path / "strace.redis"
    p.write_text("1796650455.009285 fdatasync(7)          = 0 <0.000580>\n"
                 "1796650455.010778 fsync(7) = 0 <0.001000>\n+++ exited with 0 +++\n")
    assert TL.fsyncs(str(p)) == pytest.approx([0.00058, 0.001])


def _schedstat_wait() -> float:
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def test_a_run_queue_wait_is_read_from_schedstat_and_none_is_zero():
    """live_bench.run_wait: schedstat's second field (waiting runnable), not its first (on a CPU), whose
    count only grows: read between two reads of the field itself."""
    run_wait = TL.live_bench.run_wait
    if not os.path.exists("/proc/self/schedstat"):
        pytest.skip("no /proc/PID/schedstat here (a kernel without schedstats)")
    before = _schedstat_wait()
    got = run_wait(os.getpid())
    assert before <= got <= _schedstat_wait()
    assert run_wait(2 ** 22 + 12345) == 0.0       # past pid_max: no such process
