"""How the daemons log: plain timestamped lines on a terminal or in `labq up`'s files, and under
systemd (journald reading our stderr) the `<N>` priority prefix and no timestamp of our own, so that
`journalctl -p err` finds errors and lines carry one timestamp, journald's."""
import logging
import os
import sys

# syslog priorities (sd-daemon(3)): what journald reads from a "<N>" line prefix
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6)
        # Every line of a multi-line message (a traceback) keeps the record's priority.
        return "\n".join(f"<{prio}>{line}" for line in super().format(record).splitlines() or [""])


def under_journal(stream=None) -> bool:
    """systemd sets JOURNAL_STREAM=dev:inode of the stream it connected; trust it only if our
    stderr is that stream (a child started from a unit's shell inherits the variable, not the fd)."""
    want = os.environ.get("JOURNAL_STREAM", "")
    if not want:
        return False
    try:
        st = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return want == f"{st.st_dev}:{st.st_ino}"


def setup(verbose: bool, stream=None) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JournalFormatter() if under_journal(stream) else
                         logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
