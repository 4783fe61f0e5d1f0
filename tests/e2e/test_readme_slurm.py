"""Every row of README's "Coming from SLURM" table runs: its labq command exits 0 on a real stack
(42 becomes a real job id prepared for the command, 42_… a task of a real array, node1 the node)."""
import os
import re
import shlex

from labq.cli.subcore import build_body
from labq.scheduler.jobs import states
from tests.harness import E2E_MARKS, ROOT, labq, user_env, wait_for

pytestmark = E2E_MARKS


def rows() -> list[tuple[str, str]]:
    text = open(os.path.join(ROOT, "README.md")).read()
    table = text.split("<!-- slurm-table -->", 1)[1].split("<!-- /slurm-table -->", 1)[0]
    out = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out.append((cells[0], re.fullmatch(r"`(.*)`", cells[1]).group(1)))
    return out


def test_the_table_is_there():
    assert len(rows()) >= 30 and all(cmd.startswith("labq ") for _, cmd in rows())


def test_every_row_runs(stack):
    env = user_env(stack)
    with open(os.path.join(stack.work, "job.sh"), "w") as f:
        f.write("#!/bin/bash\n#SBATCH -J from-sbatch\n#SBATCH -t 5\n#SBATCH --mem=1G\necho hi\n")
    with open(os.path.join(stack.work, "train.py"), "w") as f:
        f.write("print('training')\n")

    def sub(argv, **opts):        # preparation through the API: a CLI call costs ~0.4 s here
        body = build_body({"account": "eta", "chdir": stack.work, **opts}, list(argv), None)
        return str(stack.client.submit(body)["job_id"])

    node = stack.client.nodes()[0].name
    arr = sub(["true"], hold=True, array="0-5")
    failed, made = [], [arr]
    for slurm, cmd in rows():
        args = shlex.split(cmd)[1:]
        jid = "42"
        if re.search(r"\b42\b", cmd):
            if args[0] == "requeue":
                jid = sub(["sleep", "60"], time_="10m")
                wait_for(lambda: stack.job(int(jid)).state == states.RUNNING, 60, what="the job to run")
            else:
                jid = sub(["true"], hold=True, time_="10m")
            made.append(jid)
        args = [re.sub(r"\b42_", f"{arr}_", re.sub(r"\b42\b", jid, a)).replace("node1", node) for a in args]
        if args[0] == "sub" and "-A" not in args:
            args = ["sub", "-A", "eta", *args[1:]]
        p = labq(stack, *args, env=env)
        if p.returncode != 0:
            failed.append((slurm, args, p.returncode, p.stderr.strip()))
    labq(stack, "del", *made, env=env)
    assert not failed, failed
