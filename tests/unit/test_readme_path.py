"""scheduler/README.md's hop-by-hop path names real files and functions: a rename that forgets the
map fails here. Each row's "where" column names files (`x/y.py`) and functions or classes
(`name`, `Class.method`); every name must be defined in one of the files that row names."""
import ast
import functools
import os
import re

from tests.harness import ROOT

README = os.path.join(ROOT, "scheduler", "README.md")
TICK = re.compile(r"`([^`]+)`")


def _rows() -> list[tuple[str, str]]:
    """(hop number, "where" column) of each row of the hop table."""
    text = open(README).read()
    table = text.split("## One job's path through the code, hop by hop", 1)[1].split("\n\n", 2)[2]
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            out.append((cells[0], cells[1]))
        elif not line.startswith("|"):
            break
    return out


def _resolve(path: str, previous: str) -> str:
    """A file as the table writes it: from the repository root, or (`store/x.py`, `commit.py`)
    relative to scheduler/ or to the folder of the row's previous file."""
    for base in ("", "scheduler", os.path.dirname(previous)):
        full = os.path.join(ROOT, base, path)
        if os.path.exists(full):
            return full
    raise AssertionError(f"scheduler/README.md names {path}, which does not exist")


def _module(head: str) -> str:
    """The file a dotted name's head means: `store` the scheduler's store (store/state.py), else
    the module of that name in scheduler/ or one of its folders (`inbox` -> scheduler/store/inbox.py)."""
    if head == "store":
        return os.path.join(ROOT, "scheduler", "store", "state.py")
    for base in ("scheduler", *(f"scheduler/{p}" for p in ("daemon", "jobs", "money", "security", "settings", "store",
                                                            "policy")), "cli", "worker"):
        for full in (os.path.join(ROOT, base, head + ".py"), os.path.join(ROOT, base, head, "__init__.py")):
            if os.path.exists(full):
                return full
    raise AssertionError(f"scheduler/README.md names {head}, no module of that name")


def _defined(files: list[str]) -> set[str]:
    return set().union(*(_names(f) for f in files))


@functools.cache
def _names(path: str) -> frozenset[str]:
    """The functions and classes defined in the file, at any depth (methods too)."""
    return frozenset(n.name for n in ast.walk(ast.parse(open(path).read()))
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def test_every_hop_names_files_and_functions_that_exist():
    rows = _rows()
    assert len(rows) >= 15, rows
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "hops are numbered in order"
    last = "scheduler/daemon/loop.py"
    seen: list[str] = []
    for number, where in rows:
        tokens = TICK.findall(where)
        files = []
        for t in tokens:
            if t.endswith(".py"):
                last = _resolve(t, last)
                files.append(last)
        files = files or [last]
        seen += [f for f in files if f not in seen]
        defined = _defined(files)
        for t in tokens:
            if t.endswith(".py"):
                continue
            head, _, name = re.split(r"[(=]", t)[0].rpartition(".")     # `Class.method`, `commit(jobs, …)`
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                continue
            # `Class.method` of a class the row or an earlier one names; `module.name` of a module.
            where = (files if not head or head in defined else seen if head in _defined(seen)
                     else [_module(head)])
            assert name in _defined(where), \
                f"hop {number}: {t} is not defined in {[os.path.relpath(f, ROOT) for f in where]}"
