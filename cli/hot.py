"""The hot read and control commands — stat, show, logs, wait, del — without click.

The click commands (query.py) and the fast path (fast.py) both call these with the parsed flags
and the thin client (scheduler/thinclient.py), so their output is the same by construction.
"""
import gc
import os
import sys
import time
from functools import partial

from labq.scheduler import tables
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import codes
from labq.scheduler.units import MICRO, fmt_duration, fmt_money, fmt_size, parse_duration

from . import privateview, statview
from .out import echo, echo_json, fail


def stat(c, **kw) -> None:
    """The queue from the `stat` index; from the records for --json and -o (their fields are not in
    a row), or while the index is being built. The cyclic collector is off meanwhile: a row per job
    holds no cycle, and its passes over the rows made so far were ~8 of ~60 ms at 10,000 jobs."""
    if kw.get("rid"):
        return request_status(c, kw["rid"], kw.get("as_json", False))
    was = gc.isenabled()
    gc.disable()
    try:
        _stat(c, **kw)
    finally:
        if was:
            gc.enable()


def request_status(c, rid: str, as_json: bool) -> None:
    """`labq stat --rid RID`: the scheduler's word on a request a client gave up on."""
    got = c.request("request_status", {"of": rid})     # not "rid": that would be this request's own id
    if not got.get("ok"):
        fail(got.get("error", "refused"), got.get("code", 2))
    if as_json:
        return echo_json(got)
    if got["state"] == "submitted":
        n = got.get("count", 1)
        return echo(f"request {rid}: submitted as job {got['job_id']}" + (f" ({n} tasks)" if n and n > 1 else ""))
    echo(f"request {rid}: {got['state']}" + (f" - {got['detail']}" if got.get("detail") else ""))


def _stat(c, user=None, account=None, state=None, job_ids=None, me=False, fmt=None, noheader=False, expand=False,
          as_json=False, **_) -> None:
    now = time.time()
    wanted, picked = _states(state), _id_pick(job_ids)
    user = c.user if me else user
    rows = nodes = None
    if not (as_json or fmt):
        rows, names = c.read.stat_rows()
        nodes = c.read.nodes(names)
    if rows is not None:       # the index: pre-rendered rows (statrows.py)
        text = statview.rows_table(statview.rows_cells(statview.select(rows, user, account, wanted, picked), now, expand),
                                   currency=c.currency)
        capacity = None if noheader else statview.rows_capacity(nodes, rows)
    else:                      # the records: --json, -o, or rows not (yet) kept for every active job
        jobs = c.read.active()
        shown = [j for j in sorted(jobs, key=lambda j: j.id)
                 if (not user or j.user == user) and (not account or j.account == account)
                 and (not wanted or j.state in wanted) and (not picked or picked(j.id, j.array_id, j.array_index))]
        if as_json:
            from . import render
            return echo_json([render.job_dict(j, now) for j in shown])
        pairs = [(j.display_id, j) for j in shown] if expand else statview.compact(shown)
        if fmt:
            from . import slurmfmt
            return echo(slurmfmt.squeue(fmt, pairs, now, header=not noheader, currency=c.currency))
        from . import render
        text = statview.table([render.stat_row(j, now, label, currency=c.currency) for label, j in pairs], statview.STAT_HEADERS)
        if nodes is None:
            nodes = c.read.nodes()
        capacity = None if noheader else statview.capacity_line(nodes, jobs)
    if capacity is not None:
        if getattr(c, "allow_volatile", False) and c.read.aof_enabled() is False:
            echo("WARNING: Redis has no AOF persistence (appendonly no): a Redis crash would lose every job "
                 "and the ledger (redis.allow_volatile = true)")
        echo(capacity)
    if noheader:
        text = text.partition("\n")[2]
    if text:
        echo(text)


def _states(text):
    if not text:
        return None
    try:
        return codes.parse_states(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _id_filter(text):
    """`42,43_7,44_[1-3]` → a predicate on jobs (42 names the job or every task of array 42)."""
    if not text:
        return lambda j: True
    pick = _id_pick(text)
    return lambda j: pick(j.id, j.array_id, j.array_index)


def _id_pick(text):
    """`42,43_7,44_[1-3]` → a predicate on (id, array id, task index), or None for no filter."""
    if not text:
        return None
    import re

    from labq.scheduler.jobs.refs import parse_task_ids
    whole, tasks = set(), {}
    for item in (x.strip() for x in re.split(r",(?![^\[]*\])", text) if x.strip()):
        t = parse_task_ids(item)
        if t:
            tasks.setdefault(t[0], set()).update(t[1])
        elif item.isdigit():
            whole.add(int(item))
        else:
            raise UsageError(f"--jobs: expected ids like 42,43_7,44_[1-3], got {item!r}")
    return lambda jid, aid, idx: jid in whole or aid in whole or (aid in tasks and idx in tasks[aid])


def _behind(c, j, d: dict) -> dict:
    """`show`'s job_dict `d` with the job it waits behind named (`behind_job`, in `reason_detail` too).
    Backfill off, the record says only that it is behind the first job that waits for resources
    (codes.BEHIND_BLOCKER: a new blocker rewrites no record); the scheduler keeps which job that is in
    one key (Keys.blocker), read for such a job alone."""
    d["behind_job"] = None
    if j.state != codes.PENDING or j.detail != codes.BEHIND_BLOCKER:
        return d
    blocker = c.read.text(c.read.k.blocker)
    if blocker and blocker != j.display_id:     # else none now, or the record is older than the key
        d["behind_job"], d["reason_detail"] = blocker, codes.behind(blocker)
    return d


def show(c, job_id, as_json=False, script=False, env=False, **_) -> None:
    """One job in full: request, state and the reason with its numbers, attempts, cost. An array's
    id: a summary of its tasks (name one, like 42_3, for the full view). Scripts and exported variables
    are not for clients to read: their owner and admins ask the scheduler (scheduler/security/private.py)."""
    from labq.scheduler.jobs.logpath import out_path

    from . import render
    found = c.resolve(job_id, views=True)     # views: the job model would cost ~14 ms (issue 39 item 4)
    if not found:
        raise UsageError(f"no such job: {job_id}")
    if script or env:
        return privateview.show(c, found[0], script, env)     # an array's tasks share them
    if len(found) > 1:
        return _show_array(found, as_json, c.currency)
    j, money = found[0], partial(fmt_money, currency=c.currency)
    d = _behind(c, j, render.job_dict(privateview.with_script(c, j) if as_json else j))
    if as_json:
        return echo_json(d)
    lines = [f"Job {j.display_id} ({j.name}) user={j.user} account={j.account} qos={j.qos}",
             f"  state: {j.state}" + (f"  reason: {j.reason} — {d['reason_detail'] or ''}" if j.state == codes.PENDING else
                                      f"  {j.detail}" if j.detail else ""),
             f"  request: {j.gpus} GPU{'s' if j.gpus != 1 else ''}{' ' + j.gpu_type if j.gpu_type else ''}, "
             f"{j.cpus} CPUs, {fmt_size(j.mem)}" + (f" on each of {j.nodes} nodes" if j.nodes > 1 else "")
             + f", time limit {fmt_duration(j.time_limit)}"
             + (f", max wait {fmt_duration(j.max_wait)}" if j.max_wait is not None else ""),
             f"  command: {' '.join(d['command'])}", f"  workdir: {j.workdir}", f"  output: {out_path(j)}",
             f"  submitted {ts(j.submit_time)}, started {ts(j.start_time)}, ended {ts(j.end_time)}",
             f"  restarts: {j.restart_count}  exit code: {statview.exit_code(j) or '-'}  cost: {money(round(d['cost'] * MICRO))}"]
    if j.learned_est:
        lines.append(f"  estimated run time {fmt_duration(j.learned_est)} ({j.learned_basis})")
    if j.deps:
        lines.append(f"  dependency: {_deps_shown(c, j.deps)}" + (" (--kill-on-invalid-dep)" if j.kill_on_invalid_dep
                                                                   else ""))
    if j.deadline:
        lines.append(f"  deadline: {ts(j.deadline)}")
    if j.preempt_count or j.borrowed or j.state == codes.PREEMPTING:
        lines.append(f"  preempted {j.preempt_count} time(s)" + ("; runs on borrowed GPUs (may be reclaimed)"
                                                                  if j.borrowed else "")
                     + (f"; draining for job {j.preempted_for}" if j.preempted_for else ""))
    if j.retries:
        lines.append(f"  retries: {j.retries_used}/{j.retries} used"
                     + (f", on exit codes {','.join(map(str, j.retry_on))}" if j.retry_on else "")
                     + (f"; eligible again {ts(j.eligible_time)}" if j.state == codes.PENDING and j.eligible_time
                        else ""))
    if j.commit:
        lines.append("  committed: " + ", ".join(f"{b} {money(m)}" for b, m in j.commit))
    for a in j.attempts:
        lines.append(f"  attempt {a.attempt}: node {a.node} gpus {','.join(a.gpus) or '-'} "
                     f"{ts(a.start_time or a.dispatch_time)} → {ts(a.end_time)} {a.outcome or 'running'}"
                     f" exit {statview.code_signal(a.exit_code) or '-'} cost {money(a.cost)}"
                     + (f" cpu {a.usage.get('cpu_s', 0):.1f}s" if a.usage else "")
                     + (f" last checkpoint {ts(a.last_checkpoint)}" if a.last_checkpoint else "")
                     + (f" lost work {a.lost_work_s:.0f}s" if a.lost_work_s else ""))
        if render.usage_text(a.usage):
            lines.append(f"    usage: {render.usage_text(a.usage)}")
        for rank, (node, gpus) in enumerate(a.parts):     # a gang: each node's part
            part = (a.usage.get("nodes") or {}).get(node) or {}
            lines.append(f"    node {rank}: {node} gpus {','.join(gpus) or '-'}"
                         + (f" usage: {render.usage_text(part)}" if part else ""))
    echo("\n".join(lines))


def _deps_shown(c, deps) -> str:
    """`afterok:126:200_3,singleton` as the user wrote it: an array by its id, a task as `A_I`,
    never the internal task ids (a whole 9,000-task array is one word, read in two lookups)."""
    parts = []
    for kind, ids in deps:
        shown, run = [], []
        for i in list(ids) + [None]:
            if run and (i is None or i != run[-1] + 1):
                shown += _run_shown(c, run)
                run = []
            if i is not None:
                run.append(i)
        parts.append(kind + "".join(f":{s}" for s in shown))
    return ",".join(parts)


def _run_shown(c, run) -> list[str]:
    """Consecutive job ids: each array's tasks compact (the whole array by its id), other jobs by
    their display id. Two lookups per array, whatever its size."""
    out = []
    while run:
        first = c.read.job(run[0])
        if first is None or first.array_id is None:
            out.append(first.display_id if first else str(run[0]))
            run = run[1:]
            continue
        n = min(len(run), first.array_id + first.array_count - run[0])     # this array's part of the run
        part, run = run[:n], run[n:]
        last = c.read.job(part[-1]) if n > 1 else first
        if part[0] == first.array_id and n == first.array_count:
            out.append(str(first.array_id))
        elif last is not None and last.array_index - first.array_index == n - 1:
            out.append(first.display_id if n == 1 else f"{first.array_id}_[{first.array_index}-{last.array_index}]")
        else:                                            # a stepped array (-a 0-15:4): each task
            found = {j.id: j.display_id for j in c.read.jobs(part)}
            out += [found.get(i, str(i)) for i in part]
    return out


def _show_array(tasks, as_json, currency: str):
    """An array parent: its request once, and how many tasks are in each state (ids compact)."""
    from . import render
    now, first = time.time(), tasks[0]
    by_state: dict[str, list[str]] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        by_state.setdefault(t.state, []).append(t.display_id)
    cost = sum(t.cost + render.running_cost(t, now) for t in tasks)
    d = {"array_job_id": first.array_id, "name": first.name, "user": first.user, "account": first.account,
         "qos": first.qos, "tasks": len(tasks), "states": {s: len(ids) for s, ids in by_state.items()},
         "task_ids": {s: tables.compact_ids(ids) for s, ids in by_state.items()}, "cost": cost / MICRO,
         "request": render.job_dict(first, now)["request"]}
    if as_json:
        return echo_json(d)
    lines = [f"Array {first.array_id} ({first.name}) user={first.user} account={first.account} qos={first.qos}: "
             f"{len(tasks)} tasks",
             f"  request per task: {first.gpus} GPU{'s' if first.gpus != 1 else ''}"
             f"{' ' + first.gpu_type if first.gpu_type else ''}, {first.cpus} CPUs, {fmt_size(first.mem)}, "
             f"time limit {fmt_duration(first.time_limit)}"]
    lines += [f"  {codes.LONG.get(s, s):<13} {len(ids):>6}  {', '.join(tables.compact_ids(ids))}"
              for s, ids in by_state.items()]
    lines.append(f"  cost so far: {fmt_money(cost, currency=currency)}")
    echo("\n".join(lines))


def ts(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def logs(c, job_id, follow=False, err=False, **_) -> None:
    """A job's output."""
    from labq.scheduler.jobs.logpath import err_path, out_path
    j = c.job(job_id)
    path = err_path(j) if err else out_path(j)
    # Another user's output is theirs: shown only where its mode lets the caller read it (the
    # submitter's umask decided), or to an admin.
    me = c.user
    if j.user != me and me not in c.security.get("admins", ("root",)) and os.path.exists(path) \
            and not os.access(path, os.R_OK):
        fail(f"job {j.display_id} belongs to {j.user}: its output {path} is not readable by {me}", 3)
    pos = 0
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        except FileNotFoundError:
            if not follow and j.state != codes.PENDING:
                fail(f"no output yet at {path}", 2)
        except PermissionError:
            fail(f"cannot read {path}: permission denied", 2)
        if not follow or j.state in codes.TERMINAL:
            return
        time.sleep(0.5)
        j = c.job(job_id)


def exit_status(j) -> int:
    if j.state == codes.COMPLETED:
        return 0
    if j.exit_code is not None and j.exit_code > 0:
        return min(j.exit_code, 255)
    if j.exit_code is not None and j.exit_code < 0:
        return 128 + (-j.exit_code)
    return 1


POLL_FIRST, POLL_MAX = 0.05, 0.5     # seconds between reads of the jobs still open: growing to at most


def wait_for_jobs(client, ids, quiet=False, timeout=None, sleep=time.sleep, clock=time.monotonic) -> int:
    """Wait for all the named jobs (an array: all its tasks) together: each pause is followed by one
    read of every job still open, so a 300-task array is done when its last task is, not after a
    pause per task. Lines in the order named, each once the jobs before it have ended too."""
    jobs = {j.id: j for i in ids for j in (client.resolve(i) or _missing(i))}
    order, shown, code, pause = list(jobs), 0, 0, POLL_FIRST
    end = clock() + timeout if timeout else None
    while True:
        while shown < len(order) and jobs[order[shown]].state in codes.TERMINAL:
            job = jobs[order[shown]]
            if not quiet:
                echo(f"{job.display_id} {job.state} exit={statview.exit_code(job) or '-'}")
            code, shown = code or exit_status(job), shown + 1
        if shown == len(order):
            return code
        if end and clock() > end:
            fail(f"timed out waiting for job {jobs[order[shown]].display_id}", 1)
        sleep(pause)
        pause = min(pause * 1.5, POLL_MAX)
        jobs.update(_reread(client, [i for i in order[shown:] if jobs[i].state not in codes.TERMINAL]))


def _reread(client, ids: list[int]) -> dict:
    """The jobs `ids` now: Redis's records in one MGET per 2,000 (their states; an array's shared
    script is not read), the archive's for those that left Redis."""
    got = {j.id: j for j in client.read.jobs_in_redis(ids, specs=False)}
    gone = [i for i in ids if i not in got]
    if gone:
        got.update({j.id: j for j in client.read.jobs(gone)})
    return got


def _missing(i):
    raise UsageError(f"no such job: {i}")


def wait(c, job_ids, timeout=None, **_) -> None:
    """Block until the jobs end; exit with the (first failing) job's exit code."""
    secs = parse_duration(timeout, "--timeout", bare_unit=1) if timeout else None
    sys.exit(wait_for_jobs(c, list(job_ids), timeout=secs))


def control(c, op, job_ids) -> None:
    reply = c.act_on(op, list(job_ids))
    said = []     # runs of results with the same outcome: one line for a 9,000-task array, not 9,000
    for r in reply.get("results", []):
        if r["ok"]:
            what = "cancelled" if r["state"] == codes.CANCELLED else r["state"]
            if said and said[-1][0] == what:
                said[-1][1].append(r["id"])
            else:
                said.append((what, [r["id"]]))
        else:
            echo(f"labq: {r['error']}", err=True)
    for what, ids in said:
        echo(f"job {', '.join(tables.compact_ids(ids))}: {what}")
    if not reply.get("ok"):
        sys.exit(reply.get("code") or 2)


def delete(c, job_ids, user=None, **_) -> None:
    """Cancel jobs (your own; admins any). Running jobs get SIGTERM, then SIGKILL after kill_wait.
    `user`: every active job of that user (with `job_ids`: those of them)."""
    if not job_ids and not user:
        raise UsageError("del: give job ids, or -u USER for all of a user's jobs")
    if user:
        picked = _id_filter(",".join(job_ids)) if job_ids else (lambda j: True)
        mine = [str(j.id) for j in c.read.active() if j.user == user and j.state in codes.ACTIVE and picked(j)]
        if not mine:
            return echo(f"labq: no pending or running jobs of {user}" + (" among those named" if job_ids else ""))
        job_ids = mine
    control(c, "cancel", job_ids)
