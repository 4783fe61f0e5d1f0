"""Log lines journald can rank: under systemd (journald reading our stderr) each line starts with its
syslog priority `<N>` (sd-daemon(3)) and carries no timestamp of our own, so that `journalctl -p
warning` finds what needs a look. The daemons (cli/daemonlog.py) and the node's runner slots
(worker/slot.py, which inherit the agent's stderr) format their lines here; whether stderr is
journald's is sdnotify.under_journal's to say."""
import logging

NOTICE = 25      # between INFO and WARNING: a job that failed (its owner's business, not a fault of labq)
logging.addLevelName(NOTICE, "NOTICE")
PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, NOTICE: 5, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    def __init__(self, fmt: str = "%(name)s: %(message)s"):
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        prio = PRIORITY.get(record.levelno, 6)
        # Every line of a multi-line message (a traceback) keeps the record's priority.
        return "\n".join(f"<{prio}>{line}" for line in super().format(record).splitlines() or [""])


def end_level(outcome: str) -> int:
    """How loud an attempt's end is in the scheduler's log: an OOM kill or a node lost is a warning
    (`journalctl -p warning` shows it), a failure or timeout a notice, the rest info."""
    if outcome in ("oom", "node_failure"):
        return logging.WARNING
    if outcome in ("failed", "timeout"):
        return NOTICE
    return logging.INFO
