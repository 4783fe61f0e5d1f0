"""The suite writes nothing under the home of whoever runs it: `labq CMD --help` keeps its page
(cli/helppage.py) and the thin client its settings (clientconf.py) under $XDG_CACHE_HOME, else
~/.cache, and a page or settings left there by another checkout must not decide what a test sees."""
import os
import subprocess
import sys
import tempfile

from tests.harness import ROOT

LABQ = os.path.join(os.path.dirname(sys.executable), "labq")


def test_the_suites_cache_is_its_own(tmp_path):
    assert os.environ.get("XDG_CACHE_HOME", "").startswith(tempfile.gettempdir() + "/labq-cache-"), \
        os.environ.get("XDG_CACHE_HOME")
    home = tmp_path / "home"
    home.mkdir()
    # 60 columns: from 80 up the page shipped with labq (cli/helppages.txt) is read and nothing is kept
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": ROOT, "COLUMNS": "60"}
    for _ in ("made", "kept"):
        p = subprocess.run([LABQ, "sub", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
        assert p.returncode == 0 and p.stdout.startswith("Usage: labq sub"), p.stderr
    assert not (home / ".cache").exists()
    assert os.path.exists(os.path.join(os.environ["XDG_CACHE_HOME"], "labq", "help", "sub.txt"))
