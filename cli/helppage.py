"""`labq CMD --help` without click: from the pages shipped with labq (helppages.txt), else from the
page click made the first time, kept in the user's cache directory.

A rare command's help imported click and the command's module (sub 50 ms of CPU, acct 75 ms, against
21 ms for `labq sub` itself; issue 39 item 4). The page depends only on this labq's command modules,
click and the width it is laid out for. helppages.txt holds every command's page at click's usual
width (78: any terminal of 80 columns or more, and output that is not a terminal), under a checksum of
cli/*.py and click's help formatter: the first `--help` after an install is read from it. At another
width, or once the sources no longer match the checksum, the page is made by click and kept under a
stamp (the newest mtime and the total size of cli/*.py, click's __init__.py, the width), read back
while the stamp holds. Nothing here imports click on a hit. `python -m labq.cli.group` (make
helppages) writes helppages.txt again; tests/unit/test_cli_help.py fails while it is not current.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(HERE, "helppages.txt")
SHIPPED_WIDTH = 78
_SEP = "\n\f\n"      # between pages: no page of click's holds a form feed


def _dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "labq", "help")


def width() -> int:
    """click's HelpFormatter width: the terminal's, at most 80, less 2, at least 50."""
    return max(min(columns(), 80) - 2, 50)


def columns() -> int:
    """shutil.get_terminal_size().columns, without shutil: it imports fnmatch, re, enum, bz2 and lzma,
    ~10 ms of CPU where a help call costs ~25 (issue 39 item 4)."""
    try:
        n = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        n = 0
    if n <= 0:
        try:
            n = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            n = 0
    return n or 80


def _click_file() -> str:
    for p in sys.path:
        f = os.path.join(p or ".", "click", "__init__.py")
        if os.path.exists(f):
            return f
    return ""


def stamp() -> str:
    newest = total = 0
    with os.scandir(HERE) as it:
        for e in it:
            if e.name.endswith(".py"):
                st = e.stat()
                newest, total = max(newest, st.st_mtime_ns), total + st.st_size
    click = _click_file()
    st = os.stat(click) if click else None
    return f"{newest}:{total}:{click}:{st.st_mtime_ns if st else 0}:{st.st_size if st else 0}:{width()}"


def _path(name: str) -> str:
    return os.path.join(_dir(), f"{name}.txt")


def kept(name: str) -> str | None:
    """The page of `labq NAME --help` while its stamp holds, else None."""
    if not name.isalpha():
        return None
    try:
        with open(_path(name), encoding="utf-8") as f:
            head, _, page = f.read().partition("\n")
    except OSError:
        return None
    return page if head == stamp() else None


def made(name: str, cli) -> str | None:
    """The page as click makes it for the group `cli` (None: no such command), kept for the next time
    (best effort). group.main calls this on a miss: this module imports no other of labq's."""
    import click
    parent = click.Context(cli, info_name="labq", **cli.context_settings)
    cmd = cli.get_command(parent, name)
    if cmd is None:
        return None
    page = cmd.get_help(click.Context(cmd, info_name=name, parent=parent, **cmd.context_settings)) + "\n"
    tmp = f"{_path(name)}.{os.getpid()}"
    try:
        os.makedirs(_dir(), mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(stamp() + "\n" + page)
        os.replace(tmp, _path(name))
    except OSError:
        try:        # not kept: nor is the half-step file, one per process that tried
            os.unlink(tmp)
        except OSError:
            pass
    return page


def sources_sum() -> str:
    """A checksum of what the shipped pages were made from: cli/*.py and click's formatter and core."""
    from zlib import crc32
    total, files = 0, sorted(e.path for e in os.scandir(HERE) if e.name.endswith(".py"))
    click = _click_file()
    files += [os.path.join(os.path.dirname(click), f) for f in ("core.py", "formatting.py")] if click else []
    for path in files:
        with open(path, "rb") as f:
            total = crc32(f.read(), total)
    return f"{total:08x}:{len(files)}"


def shipped(name: str) -> str | None:
    """The page of `labq NAME --help` from helppages.txt, where it was made at this width from these
    sources; else None."""
    if width() != SHIPPED_WIDTH:
        return None
    try:
        with open(SHIPPED, encoding="utf-8") as f:
            head, _, body = f.read().partition("\n")
    except OSError:
        return None
    if head != sources_sum():
        return None
    for part in body.split(_SEP):
        n, _, page = part.partition("\n")
        if n == name:
            return page
    return None


def write_shipped(cli, names, path: str = SHIPPED) -> str:
    """helppages.txt (or `path`) made again by click at the shipped width: every command of `names`."""
    os.environ["COLUMNS"] = str(SHIPPED_WIDTH + 2)
    import click
    parent = click.Context(cli, info_name="labq", **cli.context_settings)
    parts = []
    for name in sorted(names):
        cmd = cli.get_command(parent, name)
        page = cmd.get_help(click.Context(cmd, info_name=name, parent=parent, **cmd.context_settings)) + "\n"
        parts.append(f"{name}\n{page}")
    # `labq --help` itself, as "labq" (no command's name): commands.page() lays it out at any width, but
    # its textwrap imports re and enum, ~40 % of the call's instructions (issue 39 item 4)
    parts.append(f"{ROOT}\n{cli.get_help(parent)}\n")
    text = sources_sum() + "\n" + _SEP.join(parts)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return text


ROOT = "labq"       # the key of `labq --help`'s own page in helppages.txt: no command's name


def show(name: str) -> bool:
    """Print `labq NAME --help`; False where click should take the command line instead."""
    page = (shipped(name) or kept(name)) if name != ROOT else None
    if page is None:
        return False
    os.write(1, page.encode())
    return True
