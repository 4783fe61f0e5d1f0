"""The trace simulator: replay a workload through the daemon's own `policy.plan()` on a virtual
clock. Pure — no Redis, no wall clock. `labq simulate` (cli/simulate.py) and `labq plan --file`
(scheduler/whatif.py) drive it; docs/internals.md says how it calls plan(). Its parts are
imported from their modules: trace.py (the reader), engine.py (the replay), metrics.py (the
report), policies.py (the named policies and their hooks)."""
