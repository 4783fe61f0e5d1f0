"""A SLURM user's habits, end to end on real processes: an sbatch script runs with its #SBATCH
resources, limit and output file."""
import os

from labq.scheduler import states
from tests.test_e2e import pytestmark  # noqa: F401
from tests.test_e2e_env import labq, stack, user_env  # noqa: F401  (the module's stack fixture)

SCRIPT = """#!/bin/bash
#SBATCH --job-name=sb-test
#SBATCH --gres=gpu:1
#SBATCH --time=00:01:00
#SBATCH --output=sb-%j.out
#SBATCH -c 2 --mem=1G
#SBATCH --partition=gpu          # labq has no partitions
#SBATCH --mail-type=END
#SBATCH --signal=B:USR1@30
echo "gpus=$CUDA_VISIBLE_DEVICES cpus=$SLURM_CPUS_PER_TASK name=$SLURM_JOB_NAME"
#SBATCH --gres=gpu:4            (after the first command: not a directive, as in sbatch)
"""


def test_an_sbatch_script_runs_with_its_directives(stack):
    path = os.path.join(stack.work, "job.sbatch")
    with open(path, "w") as f:
        f.write(SCRIPT)
    p = labq(stack, "sub", "--parsable", "-A", "eta", "job.sbatch", env=user_env(stack))
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert warnings == ["labq: warning: #SBATCH directives ignored: --partition=gpu --mail-type=END"]
    jid = int(p.stdout)
    j = stack.wait_state(jid, states.TERMINAL, 90)
    assert j.state == states.COMPLETED, j.detail
    assert (j.gpus, j.cpus, j.mem, j.time_limit, j.name) == (1, 2, 1 << 30, 60, "sb-test")
    assert tuple(j.warn_signal) == ("USR1", 30)
    with open(os.path.join(stack.work, f"sb-{jid}.out")) as f:
        out = f.read()
    assert out.startswith("gpus=GPU-") and "cpus=2 name=sb-test" in out


def test_a_command_line_flag_beats_the_directive(stack):
    path = os.path.join(stack.work, "t.sbatch")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n#SBATCH -t 5\n#SBATCH -J from-script\ntrue\n")
    p = labq(stack, "sub", "--parsable", "-A", "eta", "-t", "7", "t.sbatch", env=user_env(stack))
    assert p.returncode == 0 and not p.stderr, p.stderr
    j = stack.wait_state(int(p.stdout), states.TERMINAL, 90)
    assert (j.time_limit, j.name) == (7 * 60, "from-script")
