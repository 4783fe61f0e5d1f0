"""cli/out.echo: a long text (over 64 KiB: `labq prio`'s ranking) is written and then its newline, not
copied to add it (issue 39 item 4): the bytes are the same as a short text's, the newline last."""
import subprocess
import sys

import pytest

from tests.harness import ROOT


@pytest.mark.parametrize("n", [0, 10, 1 << 16, (1 << 16) + 1, 3 << 18])
def test_a_text_of_any_length_is_written_with_one_newline(n):
    code = ("import sys; from labq.cli.out import echo; t = ('é' + 'x' * int(sys.argv[1]))[:int(sys.argv[1])]; "
            "echo(t); echo(t, nl=False); echo(t, err=True)")
    p = subprocess.run([sys.executable, "-c", code, str(n)], cwd=ROOT, capture_output=True, timeout=60)
    text = ("é" + "x" * n)[:n].encode()
    assert p.returncode == 0 and p.stdout == text + b"\n" + text and p.stderr == text + b"\n", p.stderr[-300:]
