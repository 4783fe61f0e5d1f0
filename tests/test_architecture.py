"""The import boundaries of DESIGN §3 and the size limits, checked on the source with ast."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PURE = {"time", "datetime", "uuid", "random", "os", "subprocess", "socket", "redis", "rq", "psutil", "pynvml"}


def modules(pkg):
    return sorted((ROOT / pkg).rglob("*.py"))


def imports(path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {top(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(top(node.module))
    return out


def top(name: str) -> str:
    """The package a dotted import reaches: labq's own subpackages by their names (labq.worker -> worker)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "labq" and len(parts) > 1 else parts[0]





def rel(p):
    return p.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", modules("scheduler"), ids=rel)
def test_scheduler_imports(path):
    got = imports(path)
    assert not got & {"worker", "cli"}, "scheduler imports neither worker nor cli"
    assert not got & {"psutil", "pynvml"}
    if "redis" in got:
        assert rel(path).startswith("scheduler/store/"), "only scheduler/store/ imports redis"
    if "rq" in got:
        assert rel(path) == "scheduler/dispatch.py", "only scheduler/dispatch.py imports rq"


@pytest.mark.parametrize("path", [p for p in modules("scheduler")
                                  if rel(p).startswith("scheduler/policy/") or rel(p) in
                                  {"scheduler/model.py", "scheduler/plan.py", "scheduler/states.py",
                                   "scheduler/ledger.py", "scheduler/transitions.py", "scheduler/fairshare.py",
                                   "scheduler/alerts.py", "scheduler/budgetwatch.py", "scheduler/report.py",
                                   "scheduler/crashguard.py", "scheduler/whatif.py"}
                                  or rel(p).startswith("scheduler/sim/")], ids=rel)
def test_the_core_is_pure(path):
    assert not imports(path) & PURE, "the policy core reads no clock, no randomness, no I/O"


@pytest.mark.parametrize("path", modules("worker"), ids=rel)
def test_worker_imports(path):
    got = imports(path)
    assert "cli" not in got
    if got & {"psutil", "pynvml"}:
        assert rel(path) == "worker/probe.py", "only worker/probe.py imports psutil/pynvml"


@pytest.mark.parametrize("path", modules("scheduler") + modules("worker") + modules("cli"), ids=rel)
def test_module_and_function_sizes(path):
    text = path.read_text()
    assert len(text.splitlines()) <= 600, "modules stay under 600 lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            assert length <= 80, f"{node.name} is {length} lines"


def raw_imports(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", sorted(p for d in ("scheduler", "worker", "cli", "tests", "bench", "labq")
                                        for p in (ROOT / d).rglob("*.py")), ids=rel)
def test_labq_packages_are_imported_under_the_labq_namespace(path):
    assert not raw_imports(path) & {"scheduler", "worker", "cli"}, "import labq.scheduler, never scheduler"
