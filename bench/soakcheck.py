"""The soak's checks over the jobs' own stamps (issue 35): pure functions, stamps and job records in,
verdicts out (tests/unit/test_soak_stamps.py feeds them synthetic stamps).

A stamp line is "<kind> <restart count> <time> <pid> [<rank> <node>]" (kind: start, alive, end); a
gang's parts (`sub -N 2`) all append to the job's one file, each with its rank and node."""
from labq.scheduler.jobs import states

# A job spawned just before its agent was killed may write its first stamp a moment after.
AGENT_DEATH_SLACK = 0.5
# Issue 35: every part of a gang dies within 1 s of any part's death; a gang's part stamps every
# 0.25 s, so its last stamp is up to that before its death.
GANG_PERIOD = 0.25
GANG_BOUND = 1.0 + GANG_PERIOD
# A life outside its attempt's billed [start, end] by more than this ran unbilled (a tick of the
# agent's reaping, a stamp's own latency).
BILLED_SLACK = 1.0


def rows(path: str) -> list[tuple[str, int, float, int, int, str]]:
    """(kind, restart count, time, pid, rank, node) of each stamp a job wrote (pid 0, rank 0 and
    node "" in older stamps without them)."""
    try:
        with open(path) as f:
            got = [line.split() for line in f]
    except FileNotFoundError:
        return []
    return [(r[0], int(r[1]), float(r[2]), int(r[3]) if len(r) > 3 else 0, int(r[4]) if len(r) > 4 else 0,
             r[5] if len(r) > 5 else "") for r in got if len(r) in (3, 4, 6)]


def stamps(path: str):
    return [(kind, a, t) for kind, a, t, *_ in rows(path)]


def lives(path: str) -> dict[tuple[int, int], tuple[float, float, bool]]:
    """(restart count, pid) -> (first stamp, last stamp, whether it stamped its end): each process's
    life as the job itself recorded it."""
    out: dict[tuple[int, int], tuple[float, float, bool]] = {}
    for kind, a, t, pid, _, _ in rows(path):
        lo, hi, ended = out.get((a, pid), (t, t, False))
        out[(a, pid)] = (min(lo, t), max(hi, t), ended or kind == "end")
    return out


def where(path: str) -> dict[tuple[int, int], tuple[int, str]]:
    """(restart count, pid) -> (rank, node) each process stamped."""
    return {(a, pid): (rank, node) for _, a, _, pid, rank, node in rows(path)}


def _on(fault: tuple, node: str) -> tuple[float, float] | None:
    """A fault window (node, from, to) — or (from, to) for any node — if it concerns `node`."""
    if len(fault) == 2:
        return fault
    return fault[1:] if not node or fault[0] == node else None


def stamp_checks(lives: dict, jobs: dict, agent_dead, agent_frozen=(), places: dict | None = None) -> dict:
    """Issue 35's promises, read from the jobs' own stamps only: no two attempts of a job alive at
    once (`overlaps`: an attempt's life is its parts' first to last stamp); no process started while
    its node had no live agent, between a kill -9 of it and its successor's start
    (`started_after_agent_died`), or while its agent was stopped past the node lease
    (`started_while_agent_frozen`: from SIGSTOP + lease to SIGCONT); no work re-run once an attempt
    stamped its end (`rerun_after_end`), and such a job ends COMPLETED (`finished_not_completed`).
    `places`: job -> where() of its stamps (faults then concern their own node only)."""
    overlaps, late, frozen, rerun, unrecorded = [], [], [], [], []
    for i, spans in lives.items():
        at = (places or {}).get(i, {})
        attempts: dict[int, tuple[float, float]] = {}
        for (a, _), (lo, hi, _) in spans.items():
            was = attempts.get(a, (lo, hi))
            attempts[a] = (min(was[0], lo), max(was[1], hi))
        ordered = sorted(attempts.values())
        if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:])):
            overlaps.append(i)

        def started_in(faults) -> bool:
            for key, (lo, _, _) in spans.items():
                node = at.get(key, (0, ""))[1]
                for f in faults:
                    w = _on(f, node)
                    if w is not None and w[0] + AGENT_DEATH_SLACK < lo < w[1]:
                        return True
            return False
        if started_in(agent_dead):
            late.append(i)
        if started_in(agent_frozen):
            frozen.append(i)
        # A gang's attempt ended its work only when every part stamped its end: one part done and
        # another killed is a failed attempt, run again whole (not finished work re-run).
        parts = jobs[i].nodes if i in jobs else 1
        done_parts: dict[int, set] = {}
        for key, (_, _, done) in spans.items():
            if done:
                done_parts.setdefault(key[0], set()).add(at.get(key, (key[1], ""))[0] if parts > 1 else 0)
        ended = [a for a, ranks in done_parts.items() if len(ranks) >= parts]
        if ended and any(a > min(ended) for a, _ in spans):
            rerun.append(i)
        if ended and i in jobs and jobs[i].state != states.COMPLETED:
            unrecorded.append(i)
    return {"overlaps": sorted(overlaps), "started_after_agent_died": sorted(late),
            "started_while_agent_frozen": sorted(frozen), "rerun_after_end": sorted(rerun),
            "finished_not_completed": sorted(unrecorded)}


def gang_checks(lives: dict, places: dict, jobs: dict, outages=(), lease: float = 0.0, frozen=()) -> dict:
    """A gang's parts, from their stamps: `gang_parts_outlived` — attempts where a part died (no
    end stamp) and another part stamped more than GANG_BOUND after it; `gang_spread_max_s` — the
    longest such time seen; `gangs_run` — gang attempts stamped, `gang_attempts_broken` — those
    where a part died.

    The exceptions, where the stop order cannot reach a part:
    - a part that died while Redis was away (`outages`, wall-clock (from, to)). The others must then
      be gone GANG_BOUND after their own agent's fence (`lease` after Redis went away) or after Redis
      came back, whichever is first: `gang_parts_outlived_in_outage` lists each such attempt
      [job, attempt, spread, allowed], and one past that bound is in `gang_parts_outlived` too;
    - a surviving part whose own runner the soak held stopped (SIGSTOP) when the stop was due
      (`frozen`: (the job pids under that runner, from, to)): it must be gone GANG_BOUND after the
      runner's SIGCONT; `gang_parts_outlived_runner_frozen` lists [job, attempt, spread, allowed]."""
    outlived, excused, thawed, spread_max, run, broken = [], [], [], 0.0, 0, 0
    for i, spans in lives.items():
        j = jobs.get(i)
        if j is None or j.nodes < 2:
            continue
        by_attempt: dict[int, list[tuple[int, float, bool]]] = {}
        for (a, pid), (_, hi, ended) in spans.items():
            by_attempt.setdefault(a, []).append((pid, hi, ended))
        for a, parts in by_attempt.items():
            run += 1
            dead = [hi for _, hi, ended in parts if not ended]
            if not dead:
                continue
            broken += 1
            died = min(dead)
            spread = max(hi for _, hi, _ in parts) - died
            spread_max = max(spread_max, spread)
            if spread <= GANG_BOUND:
                continue
            away = [(lo, hi) for lo, hi in outages if lo - GANG_PERIOD <= died <= hi]
            if away:
                lo, hi = away[0]
                allowed = min(hi, lo + lease) - died + GANG_BOUND if lease else hi - died + GANG_BOUND
                excused.append([i, a, round(spread, 2), round(allowed, 2)])
                if spread <= allowed:
                    continue
            late = [(pid, hi - died) for pid, hi, _ in parts if hi - died > GANG_BOUND]
            bounds = [_thawed_by(pid, died, frozen) for pid, _ in late]
            if all(b is not None and over <= b for b, (_, over) in zip(bounds, late)):
                thawed.append([i, a, round(spread, 2), round(max(b for b in bounds if b is not None), 2)])
                continue
            outlived.append([i, a, round(spread, 2)])
    return {"gang_parts_outlived": outlived, "gang_parts_outlived_in_outage": excused,
            "gang_parts_outlived_runner_frozen": thawed,
            "gang_spread_max_s": round(spread_max, 2), "gangs_run": run, "gang_attempts_broken": broken}


def _thawed_by(pid: int, died: float, frozen) -> float | None:
    """How long after `died` the part `pid` may last because its runner was stopped when the stop
    order was due (a freeze overlapping [died, died + GANG_BOUND]): until GANG_BOUND after its SIGCONT."""
    ends = [hi for pids, lo, hi in frozen if pid in pids and lo <= died + GANG_BOUND and hi >= died]
    return max(ends) - died + GANG_BOUND if ends else None


def billed_checks(lives: dict, places: dict, jobs: dict) -> dict:
    """`ran_unbilled`: processes (a gang's parts among them) whose stamped life is not inside any
    attempt of the job, on the node it stamped, from that attempt's billed start to its end.
    `billed_past_run`: attempts billed from more than BILLED_SLACK before their first process's
    first stamp, or to more than a stamp period + BILLED_SLACK after their last stamp, and
    attempts billed over BILLED_SLACK with no stamp at all (DESIGN §10: every charge is the
    stamped run time x rate within 1 s)."""
    unbilled, past = [], []
    for i, spans in lives.items():
        j = jobs.get(i)
        if j is None:
            continue
        for key, (lo, hi, _) in spans.items():
            node = places.get(i, {}).get(key, (0, ""))[1]
            inside = any(t.start_time is not None and t.end_time is not None
                         and t.start_time - BILLED_SLACK <= lo and hi <= t.end_time + BILLED_SLACK
                         and (not node or node in (t.node, *(n for n, _ in t.parts)))
                         for t in j.attempts)
            if not inside:
                unbilled.append([i, key[0], node])
        period = GANG_PERIOD if j.nodes > 1 else 1.0
        for t in j.attempts:
            if t.start_time is None or t.end_time is None:
                continue
            ran = [(lo, hi) for lo, hi, _ in spans.values()
                   if t.start_time - BILLED_SLACK <= lo and hi <= t.end_time + BILLED_SLACK]
            if not ran:
                if t.end_time - t.start_time > BILLED_SLACK:
                    past.append([i, t.attempt, "no stamp", round(t.end_time - t.start_time, 2)])
                continue
            early = min(lo for lo, _ in ran) - t.start_time
            late = t.end_time - max(hi for _, hi in ran) - period
            if early > BILLED_SLACK or late > BILLED_SLACK:
                past.append([i, t.attempt, round(early, 2), round(late, 2)])
    return {"ran_unbilled": unbilled, "billed_past_run": past}
