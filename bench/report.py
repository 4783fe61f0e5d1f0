"""The detailed report of one run (bench/out/REPORT.md): rows, misses explained, profiles, run log. bench/RESULTS.md is the current table (current.py)."""
import ast
import datetime
import os

from rows import PEERS, Row, fmt

MODULES = ("plan_bench", "latency_bench", "throughput_bench", "submit_bench", "cli_bench", "memory_bench",
           "peers", "peer_bench", "profile_bench")

HERE = os.path.dirname(os.path.abspath(__file__))
NOISY_PERCENT = 15      # others' CPU share during a group above which the report flags its figures

# Which profile explains which row.
PROFILE_OF = {"stat.wall": "stat", "lat.cli.p50": "cli", "lat.cli.p99": "cli", "sub.wall": "cli",
              "subtest.wall": "cli", "sub.api": "scheduler", "sub.api4": "scheduler", "array10k": "array",
              "lat.api.p50": "worker", "lat.api.p99": "worker", "tput": "worker"}


def _docstring(mod: str) -> str:
    """A benchmark module's docstring, read from its file (so modules a partial run did not use need no import)."""
    with open(os.path.join(HERE, f"{mod}.py")) as f:
        return ast.get_docstring(ast.parse(f.read())) or ""


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def results_table(rows: list[Row]) -> list[str]:
    head = ["benchmark", "labq", "target", "result"]
    for p in PEERS:
        head += [p, f"labq vs {p}"]
    head.append("notes")
    out = ["| " + " | ".join(head) + " |", "|---|---:|---:|---|" + "---:|---|" * len(PEERS) + "---|"]
    for r in rows:
        cells = [r.name, r.measured(), r.target_text(), r.result()]
        for p in PEERS:
            cells += [r.peer_text(p), r.ratio_text(p)]
        cells.append(r.note)
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return out


def _top(profile, n=3) -> str:
    """The frames most often on top of the stack, in words."""
    if profile is None or profile.skipped or not profile.lines:
        return ""
    if profile.kind == "importtime":
        return ", ".join([f"`{m}` {cm:.0f} ms" for d, m, _, cm in profile.lines if d == 0][:n])
    ours = [(k, t) for k, t, _ in profile.lines if any(o in k for o in ("scheduler/", "worker/", "cli/"))][:n]
    return ", ".join(f"`{k}` {t:.0f} %" for k, t in ours)


def explain(r: Row, by_key: dict, profiles: dict, medians: dict) -> str:
    """By how much the row misses and why, from figures of the same run."""
    f = r.factor(r.target)
    how = (f"{r.measured()} against {r.target_text()}: {f:.1f}× the target" if r.better == "lower"
           else f"{r.measured()} against {r.target_text()}: {100 / f:.0f} % of the target")
    why = []
    k, d = r.key, r.data
    api = by_key.get("lat.api.p50")
    if k.startswith("plan."):
        p, n = d["pending"], d["nodes"]
        why.append(f"plan() spends {r.value * 1000 / p:.1f} µs per pending job here")
        if medians:
            import plan_bench
            pts = [(pp, medians[(pp, n)]) for pp in sorted({q for q, _ in medians}) if (pp, n) in medians]
            if len(pts) >= 2:
                e = plan_bench.exponent(pts)
                why.append(f"at {n:,} nodes its time against pending jobs has exponent {e:.2f} "
                           f"({plan_bench.in_words(e)}), so meeting the target needs each job's check to be "
                           f"about {f:.0f}× cheaper, not a different order of growth" if e <= 1.15 else
                           f"at {n:,} nodes its time against pending jobs has exponent {e:.2f} ({plan_bench.in_words(e)})")
        top = _top(profiles.get(f"plan:{p}x{n}"))
        if top:
            why.append(f"most sampled inside plan(): {top}")
    elif k in ("lat.api.p50", "lat.api.p99") and d:
        node = sum(d.get(s, 0) for s in ("dispatch", "runner", "spawn"))
        why.append(f"median split: scheduler {d.get('scheduler', 0):.1f} ms, then on the node dispatch {d.get('dispatch', 0):.1f} ms "
                   f"(blocking pop, the runner's fork, record, claim), runner {d.get('runner', 0):.1f} ms (logs, "
                   f"environment), spawn {d.get('spawn', 0):.1f} ms (limits, fork/exec into the cgroup until the command "
                   f"runs): the node side is {node:.1f} ms of the {r.value:.1f}")
    elif k in ("lat.cli.p50", "lat.cli.p99"):
        sub = by_key.get("sub.wall")
        if d:
            why.append(f"the scheduler stage (submit → admitted), which includes starting `labq sub`, is "
                       f"{d.get('scheduler', 0):.0f} ms of the median")
        if sub and sub.value:
            why.append(f"a whole `labq sub` process takes {sub.value:.0f} ms")
        if api and api.value:
            why.append(f"the same path through the API takes {api.value:.0f} ms, so the command's start-up is most of it")
    elif k == "tput":
        slots = 4
        per = slots / r.value * 1000
        why.append(f"each of the {slots} slots spends {per:.0f} ms per trivial job")
        if api and api.data:
            node = sum(api.data.get(s, 0) for s in ("dispatch", "runner", "spawn"))
            why.append(f"one job's node-side start alone (dispatch + runner + spawn, from the API latency split) is "
                       f"{node:.0f} ms, before its end is reported, the scheduler admits the next job and a slot's runner "
                       f"takes it")
        top = _top(profiles.get("tput-scheduler"))
        if top:
            why.append(f"profile \"{profiles['tput-scheduler'].title}\": {top}")
    elif k in ("sub.api", "sub.api4"):
        one = by_key.get("sub.api")
        ev = by_key.get("sub.api.everysec")
        if one and one.value:
            why.append(f"a sequential submit takes {1000 / one.value:.2f} ms (a round trip through the scheduler's loop)")
        if one and ev and ev.value and one.value:
            why.append(f"with Redis's appendfsync at everysec it takes {1000 / ev.value:.2f} ms, so the fsync of each "
                       f"request costs ≈ {1000 / one.value - 1000 / ev.value:.2f} ms")
        if k == "sub.api4" and one and one.value:
            why.append(f"4 clients together reach only {r.value / one.value:.1f}× the single client's rate: the one "
                       f"scheduler loop serves their requests largely one after another")
        if k == "sub.api" or not one:
            need = 1000 / r.target
            why.append(f"the target needs ≤ {need:.2f} ms per job, i.e. many requests per round trip")
    elif k == "array10k":
        why.append(f"{r.value * 1000 / 10000:.0f} µs per task: the request expands into 10,000 job records, "
                   f"encoded and written in one transaction")
    elif k in ("sub.wall", "subtest.wall"):
        help_ = by_key.get("help.wall")
        if help_ and help_.value:
            why.append(f"`labq --help`, which talks to no server, already takes {help_.value:.0f} ms: "
                       f"most of the wall is the interpreter and imports")
    elif k == "stat.wall":
        why.append("each call reads and decodes every active job record from Redis")
    elif k == "mem.sched":
        if d.get("jobs"):
            per = (r.value - d.get("before", 0)) * 1e6 / d["jobs"]
            why.append(f"{per / 1024:.1f} KiB of scheduler memory per pending job (the jobs are held in memory as "
                       f"Python objects)")
        if d.get("decoded"):
            why.append(f"one decoded Job object alone holds {d['decoded'] / 1024:.1f} KiB of Python heap "
                       f"(tracemalloc), so the objects themselves are {d['decoded'] / per:.0%} of that"
                       if d.get("jobs") and per > 0 else
                       f"one decoded Job object alone holds {d['decoded'] / 1024:.1f} KiB of Python heap")
    elif k == "mem.redis":
        if d.get("record"):
            why.append(f"the JSON record alone is {d['record']:,.0f} bytes per job, plus Redis's per-key overhead")
    prof = profiles.get(PROFILE_OF.get(k, ""))
    top = _top(prof)
    if top and not k.startswith("plan."):
        why.append(f"profile \"{prof.title}\": {top}")
    return f"- **{r.name}**: {how}. " + ("; ".join(why) + "." if why else "")


def scaling_section() -> list[str]:
    """The section bench/scaling_bench.py last wrote (bench/scaling.md): kept across full runs,
    which do not run it (it takes minutes)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling.md")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return ["", "## How the scheduler scales (bench/scaling_bench.py)", ""] + f.read().rstrip().splitlines()


def markdown(*, rows, mach, command, elapsed, quick, only, medians, peers, profiles, kth, log) -> str:
    import plan_bench
    import profile_bench
    written = datetime.datetime.now().astimezone()
    partial = (" (quick: fewer samples and runs)" if quick else "") + (f" (only: {', '.join(only)})" if only else "")
    out = ["# labq benchmark results", "",
           f"Written by `bench/run.py` on {written:%Y-%m-%d %H:%M %Z} in {elapsed:.0f} s. Targets are DESIGN §11's; "
           "\"miss\" means the figure does not meet it (by how much in brackets). Peers' figures are from the same "
           "run; \"labq vs peer\" says how labq's figure compares (slower/faster for times, lower/higher rates).",
           "", f"Command: `{command}` (what `make bench` runs){partial}", "",
           "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in mach]
    out += ["", "## Results", ""] + results_table(rows)

    by_key = {r.key: r for r in rows if r.key}
    by_prof = {p.key: p for p in profiles}
    misses = [r for r in rows if r.verdict == "miss"]
    out += ["", "## Misses: by how much, and why", ""]
    if misses:
        out += [explain(r, by_key, by_prof, medians) for r in misses]
        out += ["", "The profiles these refer to are under \"Where the time goes\" below."]
    else:
        out.append("Every measured figure meets its target.")
    failed = [r for r in rows if r.verdict == "fail"]
    if failed:
        out += ["", "Work that did not complete:", ""]
        out += [f"- **{r.name}**: {r.failed}. {r.note}" for r in failed]

    if medians:
        out += ["", "## How plan() grows", ""]
        out += [f"- {s}" for s in plan_bench.growth(medians)]
        out += ["", "Exponents are least-squares fits of log(median time) on log(size) over the grid above; "
                "the cluster is mostly full, so nearly every pending job is checked and stays pending."]

    out += scaling_section()

    out += ["", "## Peers", ""]
    if not peers:
        out.append("Not run (`--only`).")
    for name, (figs, how) in peers.items():
        out.append(f"- **{name}**: {how}")
    notes = [(name, key, by_key.get(key), f) for name, (figs, _) in peers.items() for key, f in figs.items()
             if f.value is not None]
    if notes:
        out += ["", "| peer | compared with | figure | how |", "|---|---|---:|---|"]
        for name, key, r, f in notes:
            unit = r.unit if r else "ms"
            out.append(f"| {name} | {_cell(r.name if r else key)} | {fmt(f.value, unit)} | {_cell(f.note)} |")

    out += ["", "## KTH SP2 trace replay", ""] + kth

    out += ["", "## Where the time goes (profiles of the missed targets' hot paths)", ""]
    if profiles:
        for p in profiles:
            out += profile_bench.markdown(p)
    else:
        out.append("No profile taken (no miss in the groups run, or `--no-profile`).")

    out += ["", "## How each figure is measured", ""]
    for mod in MODULES:
        out += [f"- **bench/{mod}.py**: " + " ".join(_docstring(mod).split()), ""]

    out += ["## Run log", "", "Other engineers share this machine. \"Others during it\" is the CPU that processes "
            "other than the benchmark's (its stacks, peers, profilers and their children are its own) used while "
            "the group ran, in % of both CPUs: from /proc/stat's total less the benchmark's own CPU times. "
            "task-spooler's server and jobs detach from the benchmark, so the tsp group counts them as others. "
            "\"Busy before\" is all CPU use in the half second before the group started; the load average "
            "also counts the benchmark's own earlier groups.", "",
            "| group | others during it | busy before | load average at its start (1, 5, 15 min) | seconds | status |",
            "|---|---:|---:|---|---:|---|"]
    out += [f"| {g} | {oth:.0f} % | {busy:.0f} % | {load} | {secs:.0f} | {_cell(status)} |"
            for g, load, busy, oth, secs, status in log]
    noisy = [(g, oth) for g, _, _, oth, secs, _ in log if oth >= NOISY_PERCENT and g != "tsp" and secs >= 5]
    if noisy:
        out += ["", "Other processes used ≥ " + f"{NOISY_PERCENT} % of the CPUs during " +
                ", ".join(f"{g} ({oth:.0f} %)" for g, oth in noisy) + ": those groups' figures are likely inflated."]
    return "\n".join(out) + "\n"
