"""How the daemons log: plain timestamped lines on a terminal or in `labq up`'s files, and under
systemd (journald reading our stderr) the `<N>` priority prefix and no timestamp of our own, so that
`journalctl -p err` finds errors and lines carry one timestamp, journald's."""
import logging
import sys

from labq.scheduler.daemon.journal import JournalFormatter
from labq.scheduler.daemon.sdnotify import under_journal


def setup(verbose: bool, stream=None) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JournalFormatter() if under_journal(stream) else
                         logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
