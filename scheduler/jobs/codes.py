"""Job state codes (SLURM's) as plain text: what the thin commands (`labq stat`, `show`, `wait`) compare
records with, without `enum` (~4 ms of a command's CPU: issue 39 item 4). states.State is built on
these: each member equal to its text here, and hashed alike, so either side of a comparison may be either."""

PENDING, RUNNING, COMPLETING, PREEMPTING = "PD", "R", "CG", "PR"
COMPLETED, FAILED, CANCELLED, TIMEOUT, OOM = "CD", "F", "CA", "TO", "OOM"
NODE_FAIL, EXPIRED, DEADLINE, REJECTED = "NF", "EX", "DL", "RJ"

# SLURM's long names (squeue %T, sacct State); labq's PR is a job draining for a preemptor.
LONG = {PENDING: "PENDING", RUNNING: "RUNNING", COMPLETING: "COMPLETING", PREEMPTING: "PREEMPTED",
        COMPLETED: "COMPLETED", FAILED: "FAILED", CANCELLED: "CANCELLED", TIMEOUT: "TIMEOUT", OOM: "OUT_OF_MEMORY",
        NODE_FAIL: "NODE_FAIL", EXPIRED: "EXPIRED", DEADLINE: "DEADLINE", REJECTED: "REJECTED"}
_BY_NAME = {**{v: k for k, v in LONG.items()}, **{k: k for k in LONG}, "PREEMPTING": PREEMPTING, "OOM": OOM}

ACTIVE = frozenset({PENDING, RUNNING, COMPLETING, PREEMPTING})
ON_NODE = frozenset({RUNNING, COMPLETING, PREEMPTING})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, OOM, NODE_FAIL, EXPIRED, DEADLINE, REJECTED})

# Backfill off: the detail of every job behind the pass's blocker. It does not name the blocker, so a
# new blocker rewrites none of their records (issue 41); the pass keeps the blocker's id once
# (Plan.blocker, Keys.blocker) and `labq show` names it (behind()).
BEHIND_BLOCKER = "behind the first job that waits for resources (backfill off)"


def behind(blocker: str) -> str:
    """BEHIND_BLOCKER as `labq show` prints it, naming the blocker (its display id)."""
    return f"behind job {blocker}, which waits for resources (backfill off)"


def parse_states(text: str, what: str = "--state") -> frozenset[str]:
    """`PD,R`, `pending,running` (any case, SLURM's short or long names) → state codes; an unknown
    name is a ValueError naming the known ones (a filter that matches nothing would look like an empty queue)."""
    out = set()
    for name in (x.strip().upper() for x in str(text).split(",") if x.strip()):
        if name not in _BY_NAME:
            raise ValueError(f"{what}: unknown state {name!r} (known: {', '.join(f'{k}/{v}' for k, v in LONG.items())})")
        out.add(_BY_NAME[name])
    if not out:
        raise ValueError(f"{what}: expected states like PD,R or PENDING,RUNNING, got {text!r}")
    return frozenset(out)
