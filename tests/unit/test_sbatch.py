"""#SBATCH → labq flags (cli/sbatch.py), pure."""
import pytest

from labq.cli import sbatch
from labq.scheduler.errors import UsageError


@pytest.mark.parametrize("tokens, flags", [
    (["-J", "x"], ["--name", "x"]), (["--job-name=x"], ["--name", "x"]), (["-Jx"], ["--name", "x"]),
    (["-A", "ml", "-q", "low"], ["--account", "ml", "--qos", "low"]),
    (["-t", "1:00:00"], ["--time", "1:00:00"]), (["--time=2-0"], ["--time", "2-0"]),
    (["--mem=12G"], ["--mem", "12G"]),
    (["--gres=gpu:2"], ["--gpus", "2"]), (["--gres=gpu:a100:2"], ["--gpus", "a100:2"]),
    (["--gres=gpu"], ["--gpus", "1"]), (["--gres", "gpu:a100"], ["--gpus", "a100:1"]),
    (["--gpus=2"], ["--gpus", "2"]), (["-G", "h100:1"], ["--gpus", "h100:1"]),
    (["-c", "4"], ["--cpus", "4"]), (["--cpus-per-task=4"], ["--cpus", "4"]),
    (["-o", "o-%j.out", "-e", "e-%j.err"], ["--output", "o-%j.out", "--error", "e-%j.err"]),
    (["-a", "0-15%4"], ["--array", "0-15%4"]), (["--array=1-3"], ["--array", "1-3"]),
    (["-d", "afterok:12"], ["--dependency", "afterok:12"]), (["--begin=now+1hour"], ["--begin", "now+1hour"]),
    (["--signal=B:USR1@120"], ["--signal", "B:USR1@120"]), (["--signal=10"], ["--signal", "10"]),
    (["--mem-per-cpu=4G"], ["--mem-per-cpu", "4G"]), (["--kill-on-invalid-dep=yes"], ["--kill-on-invalid-dep=yes"]),
    (["--kill-on-invalid-dep"], ["--kill-on-invalid-dep"]),
    (["--requeue"], ["--requeue"]), (["--no-requeue"], ["--no-requeue"]), (["-H"], ["--hold"]),
    (["--export=NONE"], ["--export", "NONE"]), (["-N", "1", "-n", "1"], []), (["--nodes=1-1"], []),
])
def test_translate(tokens, flags):
    assert sbatch.translate(tokens) == (flags, [])


def test_what_labq_does_not_use_is_named():
    flags, ignored = sbatch.translate(["-p", "gpu", "--mail-type=END,FAIL", "--mail-user", "a@b", "--exclusive",
                                       "--constraint=a100", "-t", "5"])
    assert flags == ["--time", "5"]
    assert ignored == ["-p gpu", "--mail-type=END,FAIL", "--mail-user a@b", "--exclusive", "--constraint=a100"]


def test_more_than_one_node_is_a_gang_and_one_task_per_node():
    assert sbatch.translate(["-N", "2", "--gpus-per-node=8", "--ntasks-per-node=1"]) == (
        ["--nodes", "2", "--gpus-per-node", "8"], [])
    with pytest.raises(UsageError, match="one task per node"):
        sbatch.translate(["--ntasks-per-node=8"])


def test_directives_stop_at_the_first_command_and_drop_comments():
    text = "#!/bin/bash\n#SBATCH -J a  # the name\n\n# note\n#SBATCHX -t 9\n#SBATCH -t 5\nsrun x\n#SBATCH -c 9\n"
    assert sbatch.directives(text) == ["-J", "a", "-t", "5"]
