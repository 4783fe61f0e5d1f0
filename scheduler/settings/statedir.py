"""Where labq keeps its files on this machine: one rule for the CLI and the daemons."""
import os


def state_dir(daemon: bool = False) -> str:
    """$LABQ_STATE_DIR (`labq up`'s stack, the test suite), else $XDG_STATE_HOME/labq, else
    ~/.local/state/labq: per-user state (`labq up`'s private Redis, its data, its lock). `daemon`: a
    daemon's own files (the scheduler's state file, the archive, the worker's spool), where systemd's
    $STATE_DIRECTORY (the unit's StateDirectory=, its first entry) comes first."""
    return ((daemon and os.environ.get("STATE_DIRECTORY", "").split(":")[0]) or os.environ.get("LABQ_STATE_DIR")
            or os.path.join(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "labq"))
