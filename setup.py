"""The one native part of labq: worker/_clone.c (a job born in its cgroup in one exec, issue 12).
Optional: where it does not build (no C compiler), worker/spawn.py uses its shell + setpriv chain.
Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("labq.worker._clone", ["worker/_clone.c"], optional=True)])
