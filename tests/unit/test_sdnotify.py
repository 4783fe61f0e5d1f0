"""sd_notify against a real datagram socket standing in for systemd, in a child process."""
import os
import socket
import subprocess
import sys
import tempfile

from tests.harness import ROOT


def test_notify_reaches_the_socket_and_is_not_inherited():
    d = tempfile.mkdtemp(dir="/tmp")
    path = os.path.join(d, "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(path)
        srv.settimeout(30)
        code = ("import os; from labq.scheduler.daemon import sdnotify; "
                "assert 'NOTIFY_SOCKET' not in os.environ; "
                "assert sdnotify.watchdog_interval() == 5.0; "
                "assert sdnotify.notify('READY=1')")
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="10000000", PYTHONPATH=ROOT)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert srv.recv(100) == b"READY=1"

