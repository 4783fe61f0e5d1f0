"""sd_notify without a dependency: READY, STATUS, WATCHDOG and STOPPING for systemd's Type=notify.

The socket address is taken out of the environment at import, so no child (slot runners, jobs)
inherits NOTIFY_SOCKET or the watchdog variables.
"""
import os
import socket
import sys

_SOCKET = os.environ.pop("NOTIFY_SOCKET", None)
_WATCHDOG_USEC = os.environ.pop("WATCHDOG_USEC", None)
_WATCHDOG_PID = os.environ.pop("WATCHDOG_PID", None)


def notify(message: str) -> bool:
    """Send one datagram to systemd; False when not run under systemd (or it is unreachable)."""
    if not _SOCKET:
        return False
    addr = "\0" + _SOCKET[1:] if _SOCKET.startswith("@") else _SOCKET
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(message.encode())
        return True
    except OSError:
        return False


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings (half systemd's deadline), or None without a watchdog."""
    if not _WATCHDOG_USEC or (_WATCHDOG_PID and int(_WATCHDOG_PID) != os.getpid()):
        return None
    return int(_WATCHDOG_USEC) / 2e6


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
