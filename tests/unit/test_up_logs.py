"""`labq up`'s daemon logs are rotated when a daemon starts (issue 36: they grew for ever)."""
from labq.cli.embedded import rotate


def test_a_log_past_its_size_rotates_and_only_keep_old_ones_stay(tmp_path):
    log = tmp_path / "scheduler.log"
    for n in range(5):
        log.write_text(f"run {n}\n" * 10)
        rotate(str(log), max_bytes=50, keep=3)
    assert not log.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scheduler.log.1", "scheduler.log.2", "scheduler.log.3"]
    assert (tmp_path / "scheduler.log.1").read_text().startswith("run 4")
    assert (tmp_path / "scheduler.log.3").read_text().startswith("run 2")


def test_a_small_log_is_left_alone(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("short\n")
    rotate(str(log), max_bytes=50)
    rotate(str(tmp_path / "absent.log"), max_bytes=50)
    assert [p.name for p in tmp_path.iterdir()] == ["worker.log"]
