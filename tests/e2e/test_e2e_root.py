"""Root on their own machine: `labq up` run by root runs root's jobs (one warning at start), and a
job that no registered node would ever run is refused at submit with the reason, never accepted and
then failed. Real redis-server, scheduler and worker processes; the tests need to run as root."""
import os
import re

import pytest

from tests.harness import E2E, E2E_CONFIG, E2E_MARKS, LabqUp

pytestmark = E2E_MARKS

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
# The default config's worker: jobs run as their submitter, and not as root (worker.allow_root = false).
SUBMITTER = E2E_CONFIG.replace('run_as = "self"', 'run_as = "submitter"')


@root_only
def test_labq_up_as_root_runs_roots_jobs_with_one_warning():
    with LabqUp(SUBMITTER, prefix="labq-uproot-") as up:
        p = up.run("sub", "-A", "eta", "-W", "--", "true")
        assert p.returncode == 0, p.stdout + p.stderr
    text = up.text
    assert text.count("warning") == 1 and "root" in text.split("warning", 1)[1].splitlines()[0], text


@root_only
def test_a_job_no_node_would_run_is_refused_at_submit():
    e = E2E(SUBMITTER)
    try:
        p = e.labq("sub", "-A", "eta", "--", "true")
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        assert "root" in p.stderr and "allow_root" in p.stderr and "Traceback" not in p.stderr
        assert e.job(1) is None, "nothing was accepted"
    finally:
        e.close()


def test_money_is_printed_in_the_configured_currency():
    e = E2E(E2E_CONFIG.replace("[rates]\n", '[rates]\ncurrency = "EUR"\n'))
    try:
        jid = e.sub("-G", "1", "-t", "10m", "--", "sleep", "60")
        e.wait_state(jid, {"R"}, 60)
        outs = [e.labq("stat").stdout]
        assert e.labq("del", str(jid)).returncode == 0
        e.wait_state(jid, {"CA"}, 60)
        outs += [e.labq(*a).stdout for a in (("acct",), ("budget",), ("sub", "-A", "eta", "--test-only", "-G", "1",
                                                                       "--", "true"))]
        for out in outs:
            assert "€" in out and "$" not in out, out
        # one rule: every amount to the cent; the budget's unit and the forecast's are the currency
        amounts = re.findall(r"€[\d,]+\.(\d+)", "".join(outs))
        assert amounts and {len(d) for d in amounts} == {2}, amounts
        assert " usd" not in "".join(outs) and " USD" not in "".join(outs)
        assert re.search(r"^eta-sweep\s+-\s+eur\s", outs[2], re.M), outs[2]
        assert re.search(r"budget eta-sweep: commits €\d+\.\d\d, available after: €", outs[3]), outs[3]
    finally:
        e.close()
