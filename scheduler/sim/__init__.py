"""The trace simulator: replay a workload through the daemon's own `policy.plan()` on a virtual
clock. Pure — no Redis, no wall clock. `labq simulate` (cli/simulate.py) and `labq plan --file`
(scheduler/whatif.py) drive it; docs/internals.md says how it calls plan()."""
from .engine import EPOCH, Refused, Result, Simulator, simulate
from .metrics import report
from .policies import POLICIES, describe, is_oracle, policy_config
from .runtime import source as runtime_source
from .trace import TraceJob, load

__all__ = ["EPOCH", "POLICIES", "Refused", "Result", "Simulator", "TraceJob", "describe", "is_oracle", "load",
           "policy_config", "report", "runtime_source", "simulate"]
