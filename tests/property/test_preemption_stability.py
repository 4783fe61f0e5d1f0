"""Preemption stability as a property (issue 14). Random streams of submits, cancels, early ends,
fair-share swings, node losses, orderly agent stops, withdrawn attempts and time run through the pure
plan(), the budget's stop policy (on_exhaust = "preempt", budgetwatch.stop) and the daemon's
transitions, applied as Scheduler._schedule and the bookkeeper apply them (victims end `preempted` when
their grace is over). After every pass:

- no job has been preempted more than `max_preemptions` times, by any path (QoS, reclaim, budget);
- `preempt_count` counts exactly the preemptions the scheduler decided (the attempt ended `preempted`
  after the preempt control): an agent's orderly stop (its runner also reports `preempted`), a node
  loss and a withdrawn attempt are not preemptions (DESIGN §5);
- a preemptor's room stays earmarked for it: while it waits, the node's free GPUs plus what its
  victims hold still cover its request, and once the victims are gone it starts, or gives up for a
  reason that is not capacity (nobody else took the room);
- an account that demands no more than its guarantee holds it within grace + a tick;
- the budget's spending plus what running jobs have committed never passes its cap (no override),
  and no attempt is charged above its commitment.
"""
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu, Job, Node, Snapshot
from labq.scheduler.money import budgetwatch
from tests.harness import cfg

GRACE = 3
TICK = 1.0
MAX_PREEMPTIONS = 2
TOML = f"""
[scheduler]
kill_wait = "2s"
[qos.high]
priority = 200
max_preemptions = {MAX_PREEMPTIONS}
grace = "{GRACE}s"
[qos.normal]
priority = 100
max_preemptions = {MAX_PREEMPTIONS}
grace = "{GRACE}s"
[qos.low]
priority = 0
preemptible = true
grace = "{GRACE}s"
min_runtime = "0s"
max_preemptions = {MAX_PREEMPTIONS}
[rates]
gpu_hour = 3600.0
[accounts.lab-a]
guarantee = 3
borrow_limit = 3
[accounts.lab-b]
guarantee = 3
borrow_limit = 3
[accounts.lab-c]
[[budgets]]
name = "c"
account = "lab-c"
limit = 400.0
on_exhaust = "preempt"
"""
CFG = cfg(TOML)
ACCOUNTS = ("lab-a", "lab-b", "lab-c")
QOS = ("low", "normal", "high")
GUARANTEE = {a.name: a.guarantee for a in CFG.accounts if a.guarantee}
CAP = 400_000_000
# The pass that reclaims, the victims' grace, the pass that starts the job. The clock runs while the
# account is short and there is room it could take: free GPUs nobody has earmarked, or borrowed work
# of other accounts running (not already draining for another preemptor: then it waits for that drain
# first, and the note of issue 14 says so).
GUARANTEE_WITHIN = GRACE + 2 * TICK
# Reasons that mean "no room": a preemptor whose victims are gone must never give up for one of these.
CAPACITY = {states.RESOURCES, states.PRIORITY, states.RESERVATION, states.PREEMPTING_FOR, states.NODE_DOWN}


class World:
    """One node of 8 GPUs, the jobs, and the ends that are due."""

    def __init__(self):
        self.now = 1_000_000.0
        self.node = Node("n1", 64, 1 << 40, 64, tuple(Gpu(f"G{i}", i, "fake") for i in range(8)), "up",
                         float("inf"), 0.0)
        self.jobs: dict[int, Job] = {}
        self.due: list[tuple[float, int, int, str]] = []     # (when, job, attempt, outcome)
        self.runs: dict[int, float] = {}                     # job -> how long it runs when left alone
        self.usage: dict[str, float] = {}
        self.spent = 0
        self.next_id = 1
        self.short_since: dict[str, float] = {}              # account -> since when it is owed GPUs
        self.asked: set[tuple[int, int]] = set()             # (job, attempt) the scheduler preempted
        self.decided: dict[int, int] = {}                    # job -> its preemptions that counted

    # -- what happens ---------------------------------------------------------------------------
    def submit(self, account: int, qos: int, gpus: int, run: int) -> None:
        j = Job(id=self.next_id, user=f"u{account}", account=ACCOUNTS[account], argv=("x",), gpus=gpus,
                qos=QOS[qos], time_limit=60, submit_time=self.now)
        self.jobs[j.id] = j
        self.runs[j.id] = run
        self.next_id += 1
        self.plan()

    def cancel(self, k: int) -> None:
        active = sorted(self.jobs)
        if not active:
            return
        j = self.jobs[active[k % len(active)]]
        if j.state == states.PENDING:
            self._write(tr.end_pending(j, states.CANCELLED, "cancelled", self.now))
        else:
            self._end(j, j.current.attempt, "cancelled", self.now)
        self.plan()

    def finish_early(self, k: int) -> None:
        on = sorted(i for i, j in self.jobs.items() if j.state in states.ON_NODE)
        if on:
            j = self.jobs[on[k % len(on)]]
            self._end(j, j.current.attempt, "completed", self.now)
            self.plan()

    def swing(self, a: float, b: float, c: float) -> None:
        """Fair-share usage changes (other work ended): the ranking of pending jobs changes."""
        self.usage = {"lab-a": a, "lab-b": b, "lab-c": c}
        self.plan()

    def node_loss(self) -> None:
        """The node's lease ran out under its jobs: `NF`, requeued at once (not a preemption)."""
        for j in [j for j in self.jobs.values() if j.state in states.ON_NODE]:
            new, charges = tr.node_failed(j, self.now, self.now, CFG)
            self._book(j, charges)
            self._write(new)
        self.plan()

    def agent_stop(self) -> None:
        """The agent's orderly stop (SIGTERM): each runner gives its job the grace and reports the
        attempt `preempted` (worker/runner.py), whether or not the scheduler ever asked."""
        for j in self.jobs.values():
            if j.state in states.ON_NODE:
                self.due.append((self.now + GRACE, j.id, j.current.attempt, "preempted"))
        self.plan()

    def withdraw(self, k: int) -> None:
        """An attempt no runner claimed within start_timeout, taken back (nothing ran)."""
        on = sorted(i for i, j in self.jobs.items() if j.state in states.ON_NODE)
        if on:
            self._write(tr.withdrawn(self.jobs[on[k % len(on)]], "timeout", self.now, 30))
            self.plan()

    def tick(self) -> None:
        until = self.now + TICK
        for when, jid, attempt, outcome in sorted(d for d in self.due if d[0] <= until):
            self.due.remove((when, jid, attempt, outcome))
            j = self.jobs.get(jid)
            if j is not None:
                self._end(j, attempt, outcome, when)
        self.now = until
        self.plan()

    def _end(self, j: Job, attempt: int, outcome: str, at: float) -> None:
        got = tr.finished(j, attempt, {"outcome": outcome, "end_time": at}, max(at, self.now), CFG)
        if got is None:
            return
        new, charges = got
        self._book(j, charges)
        if outcome == "preempted" and (j.id, attempt) in self.asked:
            self.decided[j.id] = self.decided.get(j.id, 0) + 1
        assert new.preempt_count == self.decided.get(j.id, 0), (
            f"job {j.id}: preempt_count {new.preempt_count}, but the scheduler preempted it "
            f"{self.decided.get(j.id, 0)} times (attempt {attempt} ended {outcome})")
        self._write(new)

    def _book(self, j: Job, charges) -> None:
        for c in charges:
            assert c.amount <= dict(j.commit)[c.budget], "charged above the commitment"
            self.spent += c.amount

    def _write(self, j: Job) -> None:
        if j.state in states.ACTIVE:
            self.jobs[j.id] = j
        else:
            self.jobs.pop(j.id, None)

    # -- one pass, applied as Scheduler._schedule applies it -------------------------------------
    def plan(self) -> None:
        snap = Snapshot(self.now, (self.node,), tuple(self.jobs.values()), (("c", self.spent),),
                        usage=tuple(sorted(self.usage.items())))
        before = {i: j for i, j in self.jobs.items() if j.state == states.PENDING and j.earmark}
        draining = {j.preempted_for for j in self.jobs.values() if j.state == states.PREEMPTING}
        p = policy.plan(snap, CFG)
        for place in p.places:
            j = tr.admit(self.jobs[place.job_id], place, self.now)
            self.jobs[j.id] = j
            self.due.append((self.now + self.runs[j.id], j.id, j.current.attempt, "completed"))
        for e in p.expires:
            self._write(tr.end_pending(self.jobs[e.job_id], e.state, e.detail, self.now))
        self._preempt(p.preempts)
        verdicts = {pd.job_id: pd for pd in p.pending}
        for pd in p.pending:
            self.jobs[pd.job_id] = tr.pend(self.jobs[pd.job_id], pd.reason, pd.detail, pd.earmark, pd.earmark_gpus)
        # the bookkeeper's stop policy, each tick (its lead: a tick plus the runner's control poll)
        on = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        stop = budgetwatch.stop(CFG.budgets, {"c": self.spent}, on, CFG, self.now,
                                lead=TICK + budgetwatch.CONTROL_POLL)
        self._preempt(stop.preempts)
        self.check(before, draining, verdicts, {pl.job_id for pl in p.places})

    def _preempt(self, preempts) -> None:
        for pr in preempts:
            j = self.jobs[pr.job_id]
            self.jobs[j.id] = tr.preempting(j, pr.for_job, pr.detail, self.now)
            self.asked.add((j.id, j.current.attempt))
            self.due.append((self.now + pr.grace, j.id, j.current.attempt, "preempted"))

    # -- the properties ---------------------------------------------------------------------------
    def check(self, before, draining, verdicts, placed) -> None:
        for j in self.jobs.values():
            assert j.preempt_count <= MAX_PREEMPTIONS, f"job {j.id} preempted {j.preempt_count} times"
        on = [j for j in self.jobs.values() if j.state in states.ON_NODE]
        free = len(self.node.gpus) - sum(j.gpus for j in on)
        for jid, j in before.items():
            if jid in placed or jid not in self.jobs:
                continue
            v = verdicts[jid]
            if jid not in draining:
                # its victims are gone: the room was its own, so only a gate that is not capacity stops it
                assert v.reason not in CAPACITY, f"preemptor {jid} lost its room: {v.reason} {v.detail}"
            elif v.earmark:
                victims = sum(x.gpus for x in on if x.state == states.PREEMPTING and x.preempted_for == jid)
                assert free + victims >= j.gpus, f"preemptor {jid}'s room was given away"
        committed = sum(dict(j.commit).get("c", 0) for j in on)
        assert self.spent + committed <= CAP, "budget c committed past its cap"
        kept = {u for j in self.jobs.values() if j.state == states.PENDING for u in j.earmark_gpus}
        used = {u for j in on for u in j.gpu_uuids}
        unclaimed = sum(1 for g in self.node.gpus if g.uuid not in used and g.uuid not in kept)
        for acct, owed in GUARANTEE.items():
            held = sum(j.gpus for j in on if j.account == acct)
            room = unclaimed + sum(j.gpus for j in on if j.state == states.RUNNING and j.borrowed
                                   and j.account != acct and j.preempt_count < MAX_PREEMPTIONS)
            # (A higher job's backfill reservation may hold a guaranteed job back longer: not counted.)
            wants = [j for j in self.jobs.values() if j.account == acct and j.state == states.PENDING
                     and j.gpus <= min(owed - held, room) and j.reason != states.RESERVATION]
            if not wants:
                self.short_since.pop(acct, None)
                continue
            since = self.short_since.setdefault(acct, self.now)
            last = self.short_since.get(("held", acct))
            if last is not None and held > last:
                since = self.short_since[acct] = self.now       # it is getting its GPUs back
            self.short_since[("held", acct)] = held
            assert self.now - since <= GUARANTEE_WITHIN, (
                f"{acct} holds {held} of its guarantee {owed} for {self.now - since:.0f}s with "
                f"{[(j.id, j.gpus, j.reason) for j in wants]} pending")


SUBMIT = st.tuples(st.just("submit"), st.integers(0, 2), st.integers(0, 2), st.integers(1, 3), st.integers(1, 30))
OPS = st.one_of(
    SUBMIT, SUBMIT, SUBMIT,
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("finish_early"), st.integers(0, 50)),
    st.tuples(st.just("swing"), st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6)),
    st.tuples(st.just("tick")), st.tuples(st.just("tick")),
    st.tuples(st.just("node_loss")), st.tuples(st.just("agent_stop")),
    st.tuples(st.just("withdraw"), st.integers(0, 50)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=60, max_size=200))
def test_preemption_is_stable_under_any_stream(ops):
    w = World()
    for op, *args in ops:
        getattr(w, op)(*args)
    for _ in range(40):          # let everything settle: the properties hold to the end
        w.tick()
