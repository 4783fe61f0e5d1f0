"""The soak (bench/soak.py), short: two minutes of two guaranteed accounts borrowing from each other, a
budget that preempts when it runs out, three QoS classes, arrays, dependencies, checkpointing,
SIGTERM-deaf jobs and gangs (-N 2) over three agents on this host, with a leader and a standby
scheduler. Faults, planned (never drawn): kill -9 of the leading scheduler (at 30%), SIGSTOP of the
leader past its lease and SIGCONT once the standby leads (45%), kill -9 of one agent (60%) and of the
runner of a gang's part (75%). The assertions are the soak's invariants, read from the jobs' own
stamps, never its timing: on a loaded machine the run is slower, not different.
The long run is `python bench/soak.py --minutes 30`."""

import pytest

from tests.harness import E2E_MARKS, bench_module

pytestmark = [*E2E_MARKS, pytest.mark.timeout(1200)]


def _soak():
    return bench_module("soak", "soak")


FAULTS = ((0.3, "scheduler_kill"), (0.45, "scheduler_stop"), (0.6, "agent_kill"), (0.75, "gang_runner_kill"))


def test_a_short_soak_loses_nothing_runs_nothing_twice_and_keeps_its_promises():
    soak = _soak()
    # a small budget for lab-c (one job at a time), raised by an override that expires under its jobs
    r = soak.soak(120, seed=3, budget=1.0, fixed=FAULTS)
    failed = soak.failures(r)
    # the failing checks' findings and the whole report as text (pytest cuts a dict's repr to a line, and a
    # soak's run is not repeatable)
    assert failed == [], f"{ {k: r.get(k) for k in failed} }\n{r}"
    assert r["kills"] == {"scheduler": 1, "worker": 1}, r
    # the frozen leader was succeeded by the standby, and resumed it stepped down: alive, not leading
    assert r["faults"]["scheduler_stop"] == 1 and len(r["scheduler_failovers"]) == 1, r
    assert r["scheduler_failovers"][0]["standby_led_after_s"] is not None, r
    assert r["scheduler_failovers"][0]["stepped_down"], r
    # gangs ran, and one lost a part's runner: its other part died with it (failures() checks how soon)
    assert r["faults"]["gang_runner_kill"] == 1 and r["runner_kills_of_gang_parts"] == 1, r
    assert r["gang_attempts_broken"] >= 1 and r["gangs_run"] > r["gang_attempts_broken"], r
    # the run did contend: jobs were preempted (QoS, reclaim or the budget) and lab-c's budget ran out
    assert r["outcomes"].get("preempted", 0) >= 1 and r["spent"].get("lab-c", 0) > 0, r
    # the guarantee's delay is measured and reported (timing on a loaded machine), not asserted
    assert r["guarantee_short_max_s"] >= 0
