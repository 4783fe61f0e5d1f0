"""What every compat command (cli/shim.py's SLURM ones, cli/pbsshim.py's PBS and SGE ones) does
alike: run labq's own CLI in this process, refuse in one line, read the script it is given."""
import contextlib
import io
import sys


def refuse(cmd: str, message: str, code: int = 2):
    sys.stderr.write(f"{cmd}: error: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


def call(argv: list[str], capture: bool = False) -> tuple[int, str]:
    """Run `labq ARGV` here: (exit status, its stdout when `capture`, else printed as it comes)."""
    from .main import main
    saved, out = sys.argv, io.StringIO()
    sys.argv = ["labq", *argv]
    rc = 0
    try:
        with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
            main()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            sys.stderr.write(e.code + "\n")
    finally:
        sys.argv = saved
    return rc, out.getvalue()


def script_text(rest: list[str]) -> str | None:
    """The script `rest` names, or the one on stdin (`sbatch <<EOF`), read here and put back for
    `labq sub` to read; None for a command (--wrap, -b y) or what cannot be read (labq sub says why)."""
    if rest and rest[0] == "--":
        return None
    if rest:
        try:
            with open(rest[0]) as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None
    if sys.stdin is None or sys.stdin.isatty():
        return None
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError:
        return None
    sys.stdin = io.StringIO(text)
    return text
