"""labq: a job queue for GPU machines with quotas and budgets.

The code lives in the top-level folders `scheduler/`, `worker/` and `cli/` of the source tree and is
installed as `labq.scheduler`, `labq.worker` and `labq.cli` (pyproject.toml maps them). Run from a
checkout (tests, `python -m labq` in the tree), the same names resolve to those folders.
"""
import os as _os

_tree = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_tree, "pyproject.toml")) and _os.path.isfile(
        _os.path.join(_tree, "scheduler", "__init__.py")):
    __path__.append(_tree)  # noqa: F821 - a checkout: labq.scheduler is ./scheduler
del _os, _tree
