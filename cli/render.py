"""Jobs, nodes and budgets as the `--json` shapes of DESIGN §8 and as aligned tables."""
import time

from labq.scheduler.jobs import codes  # not states: its StrEnum imports `enum` (codes.py)
from labq.scheduler.jobs.hostlist import compact as compact_nodes
from labq.scheduler.units import MICRO, accrue, fmt_duration, fmt_money, fmt_size


def usage_text(u: dict) -> str:
    """An attempt's `usage` (worker/runner.py) as one line for `labq show`; "" when there is none."""
    if not u:
        return ""
    parts = [f"cpu {u.get('cpu_s', 0):.1f}s"]
    mem = [f"max RSS {fmt_size(u['max_rss_bytes'])}"] if u.get("max_rss_bytes") else []
    mem += [f"PSS {fmt_size(u['max_pss_bytes'])}"] if u.get("max_pss_bytes") else []
    mem += [f"cgroup peak {fmt_size(u['mem_peak_bytes'])}"] if u.get("mem_peak_bytes") else []
    mem += [f"limit {fmt_size(u['mem_limit_bytes'])}"] if u.get("mem_limit_bytes") else []
    parts += [", ".join(mem)] if mem else []
    if u.get("cpu_throttled_periods"):
        parts.append(f"throttled {u['cpu_throttled_s']:.1f}s in {u['cpu_throttled_periods']} periods")
    if u.get("oom_kills"):
        parts.append(f"{u['oom_kills']} OOM kills")
    if "gpu_util_mean" in u:
        parts.append(f"GPU util mean {u['gpu_util_mean']:.0f}% peak {u['gpu_util_peak']:.0f}%, "
                     f"idle {fmt_duration(u.get('gpu_idle_s', 0))}")
    if u.get("gpu_mem_peak"):
        parts.append(f"GPU memory peak {fmt_size(u['gpu_mem_peak'])}")
    if "energy_j" in u:
        parts.append(f"energy {u['energy_j'] / 3.6e6:.3f} kWh ({u['energy_j']:.0f} J)")
    return "; ".join(parts)


def attempt_dict(a) -> dict:
    return {"attempt": a.attempt, "node": a.node, "gpus": list(a.gpus), "start_time": a.start_time or a.dispatch_time,
            "end_time": a.end_time, "outcome": a.outcome, "exit_code": a.exit_code, "cost": a.cost / MICRO,
            "charges": {b: amt / MICRO for b, amt in a.charges}, "lost_work_s": a.lost_work_s,
            "last_checkpoint": a.last_checkpoint, "usage": a.usage,
            "nodes": [{"node": n, "gpus": list(g)} for n, g in (a.parts or ((a.node, a.gpus),))]}


def job_dict(j, now: float | None = None) -> dict:
    now = now or time.time()
    committed = sum(c for _, c in j.commit) / MICRO if j.commit else 0.0
    return {
        "id": j.display_id, "job_id": j.id, "name": j.name, "user": j.user, "account": j.account,
        "project": j.project, "qos": j.qos, "state": j.state,
        "reason": j.reason if j.state == codes.PENDING else None, "reason_detail": j.detail or None,
        "submit_time": j.submit_time, "start_time": j.start_time, "end_time": j.end_time,
        "restart_count": j.restart_count, "exit_code": j.exit_code, "node": j.node or None,
        "gpus": list(j.gpu_uuids), "request": {"gpus": j.gpus, "gpu_type": j.gpu_type or None, "cpus": j.cpus,
                                               "mem": j.mem, "time_limit": j.time_limit, "nodes": j.nodes},
        "nodes": j.nodes, "nodelist": [n for n, _ in j.parts] or ([j.node] if j.node else []),
        "array_job_id": j.array_id, "array_task_id": j.array_index,
        # one record for many tasks (a held array's rest cancelled whole): how many, which
        "array_tasks": getattr(j, "task_count", 1), "array_task_ids": getattr(j, "array_runs", ()) or None,
        "cost": (j.cost + running_cost(j, now)) / MICRO, "committed": committed,
        # script and env: in hand only where the scheduler gave them to their owner (hot.show)
        "command": list(j.argv) if not j.has_script else ["<script>", *j.argv], "script": j.script or None,
        "export": j.export,
        "workdir": j.workdir,
        "tags": dict(j.tags), "attempts": [attempt_dict(a) for a in j.attempts],
        "dependency": _deps(j.deps) or None, "deadline": j.deadline, "retries": j.retries,
        "retries_used": j.retries_used, "eligible_time": j.eligible_time,
        "preempt_count": j.preempt_count, "preempted_for": j.preempted_for, "borrowed": j.borrowed,
        "estimate": {"seconds": j.learned_est, "basis": j.learned_basis} if j.learned_est else None,
    }


def _deps(deps) -> str:
    """--dependency as it was written; jobspec (which imports the whole config, ~20 ms of `labq show`
    and of every click command that renders jobs) only for a job that has dependencies."""
    if not deps:
        return ""
    from labq.scheduler.jobs.jobspec import describe_deps
    return describe_deps(deps)


def running_cost(j, now: float) -> int:
    """What the running attempt has accrued so far (settled attempts are in j.cost)."""
    a = j.current
    if j.state not in codes.ON_NODE or a is None or a.end_time or not a.dispatch_time:
        return 0
    return accrue(j.cost_rate, now - max(a.start_time or 0, a.dispatch_time))   # as it is billed


def elapsed(j, now: float) -> float:
    """Run time: of the running attempt, or of all ended attempts together."""
    done = getattr(j, "elapsed", None)     # an archived acct row (store/acctrows.AcctJob) carries it
    if done is not None:
        return done
    total = 0.0
    for a in j.attempts:
        start = a.start_time or a.dispatch_time
        if start:
            total += (a.end_time or now) - start
    return total


def stat_row(j, now: float, shown: str | None = None, *, currency: str):
    node = compact_nodes([n for n, _ in j.parts]) if j.parts else j.node
    where = node if j.state in codes.ON_NODE else f"({j.reason})" if j.state == codes.PENDING else node or ""
    return [shown or j.display_id, j.name[:20], j.user, j.account, j.qos, j.state, fmt_duration(elapsed(j, now)),
            j.total_gpus, fmt_money(j.cost + running_cost(j, now), currency=currency), j.nodes, where]


def node_dict(n, jobs) -> dict:
    # a gang holds its per-node shape and its part's GPUs on each of its nodes
    mine = [j for j in jobs if j.state in codes.ON_NODE and n.name in {p for p, _ in j.on_nodes}]
    used = {u for j in mine for p, us in j.on_nodes if p == n.name for u in us}
    return {"name": n.name, "state": n.state, "gpus_total": len(n.gpus), "gpus_free": len(n.gpus) - len(used),
            "gpu_models": sorted({g.model for g in n.gpus}), "cpus_total": n.cpus,
            "cpus_free": n.cpus - sum(j.cpus for j in mine), "mem_total": n.mem,
            "mem_free": n.mem - sum(j.mem for j in mine), "slots": n.slots, "jobs": [j.display_id for j in mine],
            "last_heartbeat": n.last_heartbeat, "reason": getattr(n, "reason", ""), "gpus": [{"uuid": g.uuid, "index": g.index, "model": g.model,
                                                          "in_use": g.uuid in used} for g in n.gpus]}


def budget_dict(b, budgets, currency: str, alerts=()) -> dict:
    """`b` a balance (money/balance.Balance); `budgets` the config's as clientcache.books keeps them;
    `alerts` the alert stream entries of this budget in this period (cli/budget.py)."""
    spec = next(x for x in budgets if x["name"] == b.name)
    return {"name": b.name, "unit": b.unit, "currency": currency.upper() if b.unit == "usd" else None,
            "limit": b.limit / MICRO, "spent": b.spent / MICRO,
            "accrued": b.accrued / MICRO, "committed": b.committed / MICRO, "available": b.available / MICRO,
            "reserve": spec["reserve"], "account": spec["account"] or None, "project": spec["project"] or None,
            "overrides": b.overrides / MICRO, "period": b.period or None, "period_kind": spec["period"],
            "on_exhaust": spec["on_exhaust"],
            "alerts": [{"kind": a.get("kind"), "level": a.get("level"), "message": a.get("message"),
                        "ts": float(a.get("ts") or 0)} for a in alerts]}
