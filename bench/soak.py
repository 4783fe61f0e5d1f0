"""The soak (issues 14, 35): a lab's contention on real processes, with kill -9 and SIGSTOP of its daemons and Redis outages.

Two accounts with guarantees that borrow from each other, a third without one whose budget preempts
when it runs out (on_exhaust = "preempt"), three QoS classes, arrays and dependencies, jobs that
checkpoint and jobs that ignore SIGTERM; during the run the faults of bench/chaos.py: kill -9 of the
scheduler, of the agent and of slot runners, SIGSTOP of the agent and of runners (SIGCONT after a pause,
some longer than the node lease), and outages of the soak's Redis (kill -9 or an orderly stop, restarted
from its AOF, some longer than the node lease).
Every job stamps its own file (start, one line a second, end, with its attempt); at the end the report
says, from those stamps, the job records and `labq ledger verify`:

  lost        jobs accepted that never ended, or ended COMPLETED without their last attempt's end stamp
  double      attempts that ran twice, or overlapped the job's next attempt
  preempted   the most times one job was preempted by the scheduler (must be <= max_preemptions), and
              the jobs with an attempt ended `preempted` the scheduler never asked for (must be none:
              the soak kills daemons with -9, never an orderly stop)
  guarantee   the longest time an account was short of its guarantee while there was room it could
              take (free GPUs nobody earmarked, other accounts' borrowed work), chaos windows left out;
              the bound is grace + kill_wait + tick (a victim may ignore SIGTERM)
  charges     each budget's spent == the sum of its attempts' charges, and `labq ledger verify` is clean
  commitment  no attempt charged above what safe mode commits (rate x (time limit + kill_wait)), and
              no budget spent past its limit plus the overrides the soak gave
  budget      how many jobs lab-c's budget preempted (on_exhaust = "preempt"): whenever lab-c can no
              longer pay a job, the soak gives it an override that expires under its running jobs
  stamps      (issue 35, from the stamps and their pids alone) attempts of one job alive at once,
              attempts started while the node had no live agent (between its kill -9 and its
              successor's start), or while its agent was stopped past the node lease, work re-run
              after an attempt stamped its end, and jobs whose work ended but that did not end
              COMPLETED: all must be none
  billed      processes whose stamped life lies outside every attempt's billed start..end (on the
              node they stamped) by more than 1 s, and attempts billed from more than 1 s before
              their first stamp or to more than a stamp period + 1 s after their last: none
  gangs       (-N 2, across the three agents) attempts where a part died and another part stamped
              more than 1.25 s after it (1 s, plus its stamp period): none; how many gang attempts
              ran and lost a part, and the longest spread. The one exception (DESIGN): a part that
              died while Redis was away, whose stop cannot travel; the others must then be gone 1.25 s
              after their agent's fence (the node lease after Redis went away) or after Redis came
              back, whichever is first (gang_parts_outlived_in_outage lists them, with that bound).
              And the soak's own SIGSTOP of a surviving part's runner when the stop was due: that part
              must be gone 1.25 s after the SIGCONT (gang_parts_outlived_runner_frozen lists them)
  failover    each SIGSTOP of the leading scheduler past its lease: how soon the standby led, and
              whether the resumed one stepped down (alive, never the leader again): all must

Three agents on this host (e2e-node with 8 GPUs, g2 and g3 with 2 each) and two schedulers (a leader
and a standby). Chaos is planned, not timed by luck: a kill -9 of the leading scheduler at 30% of the
run and of an agent at 60% (or the `fixed` faults given), and (runs of 3 minutes and more) a fault every 10-40 s besides, every kind in the first
round (bench/chaos.py); one that a slow submit made late still happens before the drain. Every wait is generous: the report's figures, not timing, decide (a loaded machine only
makes the run slower).

    python bench/soak.py --minutes 30 [--seed 1] [--json out.json]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.chaos import FIXED, Chaos  # noqa: E402
from bench.soakcheck import (  # noqa: E402
    billed_checks,
    gang_checks,
    lives as _lives,  # noqa: E402
    rows,
    stamp_checks,
    stamps as _stamps,  # noqa: E402
    where,
)
from labq.cli.subcore import build_body  # noqa: E402
from labq.scheduler.jobs import states  # noqa: E402
from labq.scheduler.money import pricing  # noqa: E402
from tests.harness import E2E, two_labs, wait_for  # noqa: E402

GRACE, KILL_WAIT, TICK, MAX_PREEMPTIONS = 3, 2, 0.5, 2
HEAD = f"""
[scheduler]
tick = {TICK}
kill_wait = "{KILL_WAIT}s"
node_lease = "4s"
lease = "3s"
crash_guard_failures = 0
[qos.high]
priority = 200
grace = "{GRACE}s"
max_preemptions = {MAX_PREEMPTIONS}
[qos.normal]
priority = 100
grace = "{GRACE}s"
max_preemptions = {MAX_PREEMPTIONS}
[qos.low]
priority = 0
preemptible = true
grace = "{GRACE}s"
min_runtime = "0s"
max_preemptions = {MAX_PREEMPTIONS}
[rates]
gpu_hour = 36.0
[security]
admins = ["{{user}}"]
[accounts.lab-c]
users = []
[[budgets]]
name = "lab-c"
account = "lab-c"
limit = BUDGET
on_exhaust = "preempt"
"""
JOB = r"""#!/bin/sh
# soak job: $1 kind (plain | ckpt | stubborn | gang), $2 seconds of work, $3 stamp directory; each stamp
# is "<kind> <restart count> <time> <pid> <rank> <node>"; a gang's part stamps every 0.25 s (the
# soak measures how soon its other parts die after one does)
S="$3/$LABQ_JOB_ID"; A="$LABQ_RESTART_COUNT"; W="$$ ${NODE_RANK:-0} $LABQ_NODE"
[ "$1" = stubborn ] && trap '' TERM
P=1; N="$2"
[ "$1" = gang ] && P=0.25 && N=$(($2 * 4))
echo "start $A $(date +%s.%N) $W" >> "$S"
i=0
if [ "$1" = ckpt ] && [ -f "$LABQ_CHECKPOINT_DIR/step" ]; then i=$(cat "$LABQ_CHECKPOINT_DIR/step"); fi
while [ "$i" -lt "$N" ]; do
  sleep $P; i=$((i+1))
  [ "$1" = ckpt ] && echo "$i" > "$LABQ_CHECKPOINT_DIR/step"
  echo "alive $A $(date +%s.%N) $W" >> "$S"
done
echo "end $A $(date +%s.%N) $W" >> "$S"
"""
# Beside the stack's own node (e2e-node, 8 GPUs): two more agents on this host, each its own node,
# so that gangs (-N 2) run across nodes and each node's agent can die alone.
EXTRA_NODES = {"g2": 2, "g3": 2}
GUARANTEED = {"lab-a": 3, "lab-b": 3}
PARKED = (states.BUDGET_EXHAUSTED, states.BUDGET_RESERVED, states.DEPENDENCY_NEVER)
WAITING = {states.RESOURCES, states.PRIORITY, states.PREEMPTING_FOR, states.NONE}


class Soak:
    def __init__(self, seconds: float, seed: int, budget: float, fixed=FIXED):
        self.rnd = random.Random(seed)
        self.seconds = seconds
        self.e = E2E(two_labs(HEAD.replace("BUDGET", repr(float(budget))), guarantee=3, borrow_limit=3, slots=16),
                     prefix="labq-soak-")
        self.dir, self.stack, self.client, self.cfg = self.e.dir, self.e.stack, self.e.client, self.e.cfg
        self.stamps = os.path.join(self.dir, "stamps")
        os.makedirs(self.stamps)
        os.makedirs(os.path.join(self.dir, "out"))
        self.script = os.path.join(self.dir, "job.sh")
        with open(self.script, "w") as f:
            f.write(JOB)
        os.chmod(self.script, 0o755)
        self.ids: list[int] = []
        self.t0 = time.time()
        # the jobs on a dead node end NF when its lease runs out, and are requeued: the guarantee
        # watch leaves that out too
        self.chaos = Chaos(self.e, self.rnd, self.t0, self.cfg.node_lease + self.cfg.fence_margin + GRACE + KILL_WAIT + 2,
                           self._node_configs())
        self.fixed = fixed
        for node in EXTRA_NODES:
            self.chaos.start_agent(node)
        # a standby scheduler: the leader's kill -9 or SIGSTOP hands over to it
        self.stack.start("standby", "scheduler")
        self.gpus = 8 + sum(EXTRA_NODES.values())
        wait_for(lambda: len([n for n in self.client.nodes() if n.state == "up"]) == 1 + len(EXTRA_NODES), 120, 0.1,
                 what=f"every agent to register (see {self.e.log.name})")
        self.budget = budget
        self.overrides = 0                      # micro-$ of lab-c overrides granted (each one expires)
        self.override_until = 0.0               # monotonic: while one is active, lab-c submits low work
        self.short_max = 0.0
        self.short_since: dict = {}
        self.done = threading.Event()

    def _node_configs(self) -> dict[str, str]:
        """node -> its agent's config: the stack's, with its own name, GPUs, slots and spool."""
        with open(self.e.cfg_path) as f:
            text = f.read()
        out = {}
        for node, gpus in EXTRA_NODES.items():
            path = os.path.join(self.dir, f"{node}.toml")
            with open(path, "w") as f:
                f.write(text.replace('name = "e2e-node"', f'name = "{node}"').replace("gpus = 8", f"gpus = {gpus}")
                        .replace("slots = 16", "slots = 4").replace(os.path.join(self.dir, "spool"),
                                                                     os.path.join(self.dir, f"spool-{node}")))
            out[node] = path
        return out

    # -- driving ------------------------------------------------------------------------------------
    def run(self) -> dict:
        watcher = threading.Thread(target=self._watch, daemon=True)
        watcher.start()
        start = time.monotonic()
        end = start + self.seconds
        plan = self.chaos.plan(start, self.seconds, self.fixed)
        while time.monotonic() < end:
            while plan and time.monotonic() >= plan[0][0]:
                self.chaos.inject(*plan.pop(0)[1:])
            self._submit()
            time.sleep(self.rnd.uniform(0.5, 2.0))
        for _, which, planned in plan:   # made late by a slow submit: still done, before the drain
            self.chaos.inject(which, planned)
        drained = self._drain(max(300.0, self.seconds / 3))
        self.done.set()
        watcher.join(5)
        return self.report(drained)

    def _override(self) -> None:
        """lab-c's budget can no longer pay a job: an admin raises its cap for a while. When that
        expires, its running jobs have spent + accrued past the cap: on_exhaust = "preempt" stops the
        preemptible ones (in safe mode the cap alone never stops a job: admission commits all that
        an attempt can be billed)."""
        lasts = max(30, min(120, round(0.3 * self.seconds)))
        try:
            self.client.books("budget_override", {"budget": "lab-c", "amount": self.budget, "approver": "soak",
                                                  "expires": lasts, "reason": "the soak: it expires under running jobs"})
            self.overrides += int(round(self.budget * 1_000_000))
            self.override_until = time.monotonic() + lasts
        except Exception as e:      # the scheduler is down: the next one comes
            print(f"override: {e}", file=sys.stderr)

    def _submit(self) -> None:
        try:
            active = self.client.read.active()
        except Exception as e:      # a read racing the restarted daemons: the next round submits
            print(f"read: {e}", file=sys.stderr)
            return
        # Jobs parked for good (lab-c's budget ran out, a dependency failed) do not count: 30 of them
        # once stopped every submit for the last 23 minutes of a 30-minute run.
        if sum(1 for j in active if j.state == states.PENDING and j.reason not in PARKED) > 30:
            return
        r = self.rnd
        # While lab-c has an override, more of its (preemptible) work runs when it expires.
        boost = time.monotonic() < self.override_until
        acct = r.choices(["lab-a", "lab-b", "lab-c"], [4, 4, 6 if boost else 2])[0]
        kind = r.choices(["plain", "ckpt", "stubborn", "gang"], [5, 3, 2, 2])[0]
        qos = "low" if boost and acct == "lab-c" else r.choice(["low", "normal", "high"])
        opts = {"account": acct, "chdir": self.dir, "time_": "1m", "qos": qos,
                "gpus": str(r.choice([1, 1, 1, 2])), "output": os.path.join(self.dir, "out", "%j-%n.out")}
        if kind == "gang":     # two nodes, 1 GPU each: room on g2/g3 beside e2e-node
            opts.update(nodes="2", gpus=None, gpus_per_node="1")
        elif r.random() < 0.1:
            opts["array"] = "1-3"
        elif r.random() < 0.15 and self.ids:
            opts["dependency"] = f"afterok:{r.choice(self.ids[-10:])}"
        body = build_body(opts, [self.script, kind, str(r.randint(3, 20)), self.stamps], None)
        try:
            got = self.client.submit(body, timeout=120)
        except Exception as e:      # refused (a budget that cannot pay), or the scheduler is down
            print(f"submit: {e}", file=sys.stderr)
            if "budget lab-c" in str(e) and not boost:
                self._override()
            return
        self.ids.extend(range(got["job_id"], got["job_id"] + got.get("count", 1)))

    def _drain(self, most: float) -> bool:
        end = time.monotonic() + most
        while time.monotonic() < end:
            active = self.client.read.active()
            # what can never run now: lab-c's budget ran out, or a dependency failed
            parked = [j for j in active if j.state == states.PENDING and j.reason in PARKED]
            if parked:
                self.client.cancel([str(j.id) for j in parked])
            if not active:
                return True
            time.sleep(1)
        return False

    # -- the guarantee, watched ------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self.done.is_set():
            try:
                self._sample(time.time())
            except Exception as e:       # Redis away, or a read racing a write: the next sample
                print(f"watch: {e}", file=sys.stderr)
            time.sleep(0.25)

    def _sample(self, now: float) -> None:
        if any(a <= now <= b for a, b in self.chaos.windows) or self.stack.dead():
            self.short_since.clear()
            return
        jobs = self.client.read.active()
        on = [j for j in jobs if j.state in states.ON_NODE]
        kept = {u for j in jobs if j.state == states.PENDING for u in j.earmark_gpus}
        used = {u for j in on for u in j.gpu_uuids}
        unclaimed = self.gpus - len(used | kept)
        for acct, owed in GUARANTEED.items():
            held = sum(j.gpus * j.nodes for j in on if j.account == acct)
            room = unclaimed + sum(j.gpus for j in on if j.state == states.RUNNING and j.borrowed
                                   and j.account != acct and j.preempt_count < MAX_PREEMPTIONS)
            # a gang's room is per node: not watched
            wants = [j for j in jobs if j.account == acct and j.state == states.PENDING and j.reason in WAITING
                     and j.gpus <= min(owed - held, room) and not j.held and not j.deps and j.nodes == 1]
            last = self.short_since.get(("held", acct))
            self.short_since[("held", acct)] = held
            if not wants or (last is not None and held > last):
                self.short_since.pop(acct, None)
                continue
            since = self.short_since.setdefault(acct, now)
            self.short_max = max(self.short_max, now - since)

    # -- the report ---------------------------------------------------------------------------------
    def report(self, drained: bool) -> dict:
        jobs = {j.id: j for j in self.client.read.jobs(self.ids) if j is not None}
        lost, double = self._runs(jobs)
        lives = {i: _lives(os.path.join(self.stamps, str(i))) for i in self.ids}
        places = {i: where(os.path.join(self.stamps, str(i))) for i in self.ids}
        stamped = stamp_checks(lives, jobs, self.chaos.agent_dead, self.chaos.agent_frozen, places)
        stamped |= gang_checks(lives, places, jobs, self.chaos.redis_down, self.chaos.lease, self.chaos.runner_frozen)
        stamped |= billed_checks(lives, places, jobs)
        spent = {k: int(v) for k, v in self.client.read.spent().items()}
        charged, over = self._charges(jobs)
        verify = subprocess.run(self.stack.command("ledger", "verify"), env=self.stack.env(), capture_output=True,
                                text=True, timeout=300)
        # An attempt ends `preempted` when the scheduler preempted it (counted in preempt_count) or
        # when its agent stopped in order (not counted); the soak never stops an agent in order.
        unasked = sorted(i for i, j in jobs.items()
                         if sum(1 for a in j.attempts if a.outcome == "preempted") != j.preempt_count)
        outcomes: dict[str, int] = {}
        for j in jobs.values():
            for a in j.attempts:
                outcomes[a.outcome or "?"] = outcomes.get(a.outcome or "?", 0) + 1
        limits = {b.name: int(b.limit) + self.overrides for b in self.cfg.budgets}     # micro-units
        with open(self.e.log.name) as f:
            budget_preempts = f.read().count("(on_exhaust = preempt)")
        return {
            "seconds": round(self.seconds), "jobs": len(self.ids), "drained": drained,
            "attempts": sum(len(j.attempts) for j in jobs.values()), "outcomes": outcomes,
            "kills": {"scheduler": self.chaos.counts["scheduler_kill"], "worker": self.chaos.counts["agent_kill"]},
            **self.chaos.report(), "lost": lost, "double_runs": double,
            "max_preemptions_per_job": max((j.preempt_count for j in jobs.values()), default=0),
            "max_preempted_attempts_per_job": max((sum(1 for a in j.attempts if a.outcome == "preempted")
                                                   for j in jobs.values()), default=0),
            "preempted_unasked": unasked, "max_preemptions": MAX_PREEMPTIONS, "budget_preempts": budget_preempts,
            "guarantee_short_max_s": round(self.short_max, 2),
            "guarantee_bound_s": GRACE + KILL_WAIT + TICK,
            "guarantee_within_bound": self.short_max <= GRACE + KILL_WAIT + TICK,
            "spent": spent, "charged": charged, "limits_with_overrides": limits,
            "charges_equal_attempts": spent == charged,
            "within_limits": all(v <= limits.get(k, v) for k, v in spent.items()),
            "ledger_verify": {"rc": verify.returncode, "out": (verify.stdout + verify.stderr).strip()[-400:]},
            "above_commitment": over,
            **stamped,
        }

    def _runs(self, jobs: dict) -> tuple[list, list]:
        """(lost, double): from the jobs' own stamps. Lost: accepted and never ended, or COMPLETED
        without its last attempt's end stamp. Double: an attempt started twice, or stamped after a
        later attempt of the job had started."""
        stamps = {i: _stamps(os.path.join(self.stamps, str(i))) for i in self.ids}
        ranks = {i: rows(os.path.join(self.stamps, str(i))) for i in self.ids}
        lost = [i for i in self.ids if i not in jobs or jobs[i].state not in states.TERMINAL]
        double = []
        for i, lines in stamps.items():
            starts = [(a, rank) for kind, a, _, _, rank, _ in ranks[i] if kind == "start"]
            begun = {a: t for kind, a, t in lines if kind == "start"}
            if len(starts) != len(set(starts)) or any(b > a and t > begun[b] for _, a, t in lines for b in begun):
                double.append(i)
        for i, j in jobs.items():
            if j.state == states.COMPLETED and not any(kind == "end" and a == j.restart_count
                                                       for kind, a, _ in stamps.get(i, [])):
                lost.append(i)
        return sorted(set(lost)), sorted(double)

    def _charges(self, jobs: dict) -> tuple[dict, list]:
        """(charged per budget, summed over the attempts; attempts charged above what safe mode commits)."""
        charged: dict[str, int] = {}
        over = []
        budgets = {b.name: b for b in self.cfg.budgets}
        for j in jobs.values():
            for a in j.attempts:
                for name, amount in a.charges:
                    charged[name] = charged.get(name, 0) + amount
                    if amount > pricing.forecast(j, budgets[name].unit, "fake", self.cfg):
                        over.append((j.id, a.attempt, amount))
        return charged, over

    def close(self, keep: bool = False) -> None:
        if keep:
            self.stack.stop_all(timeout=30)
            self.e.log.close()
            print(f"kept {self.dir}", file=sys.stderr)
        else:
            self.e.close()


def soak(seconds: float, seed: int = 1, budget: float = 3.0, keep: bool = False, fixed=FIXED) -> dict:
    s = Soak(seconds, seed, budget, fixed)
    try:
        return s.run()
    finally:
        s.close(keep)


def failures(out: dict) -> list[str]:
    """What the report says is broken (empty: the soak kept every promise it checks)."""
    bad = [k for k in ("lost", "double_runs", "preempted_unasked", "above_commitment", "overlaps",
                       "started_after_agent_died", "started_while_agent_frozen", "rerun_after_end", "finished_not_completed",
                       "gang_parts_outlived", "ran_unbilled", "billed_past_run", "schedulers_not_stepped_down")
           if out.get(k)]
    bad += [k for k in ("drained", "charges_equal_attempts", "within_limits") if not out[k]]
    if out["max_preemptions_per_job"] > out["max_preemptions"]:
        bad.append("max_preemptions_per_job")
    if out["ledger_verify"]["rc"] != 0:
        bad.append("ledger_verify")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=3.0, help="lab-c's budget, $ (on_exhaust = preempt)")
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("--keep", action="store_true", help="keep the stamps and daemons.log")
    a = ap.parse_args()
    out = soak(a.minutes * 60, a.seed, a.budget, a.keep)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    bad = failures(out)
    if bad:
        print(f"broken: {', '.join(bad)}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
