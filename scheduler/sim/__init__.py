"""The trace simulator: replay a workload through the daemon's own `policy.plan()` on a virtual
clock. Pure — no Redis, no wall clock. `labq simulate` (cli/simulate.py) and `labq plan --file`
(scheduler/sim/whatif.py) drive it; docs/internals.md says how it calls plan()."""
from .engine import EPOCH, Refused, Result, Simulator, simulate
from .metrics import report
from .policies import POLICIES, Hooks, Learned, Oracle, describe, policy_config, register, resolve
from .trace import TraceJob, load

__all__ = ["EPOCH", "POLICIES", "Hooks", "Learned", "Oracle", "Refused", "Result", "Simulator", "TraceJob", "describe", "load", "policy_config",
           "register", "report", "resolve", "simulate"]
