"""A gang's part on its node (pure pieces): which part a node runs, its environment for torchrun
and SLURM tools, its log file (%n, %N), the compact node list, the stop control's wake-ups."""
from dataclasses import replace

from labq.scheduler.jobs import hostlist, logpath
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.store.dispatchq import control_nodes
from labq.worker import gang, jobenv, runner, waiting

PARTS = (("gpu1", ("GPU-1a", "GPU-1b")), ("gpu2", ("GPU-2a", "GPU-2b")))
ATTEMPT = Attempt(1, "gpu1", ("GPU-1a", "GPU-1b", "GPU-2a", "GPU-2b"), parts=PARTS)
JOB = Job(id=7, user="alice", account="ml", name="ddp", workdir="/w", gpus=2, cpus=8, nodes=2, state="R",
          node="gpu1", gpu_uuids=ATTEMPT.gpus, parts=PARTS, attempts=(ATTEMPT,), out="out-%j-%n-%N.log")


def test_each_node_runs_its_own_part_and_no_other():
    assert gang.rank_of(ATTEMPT, "gpu1") == 0 and gang.rank_of(ATTEMPT, "gpu2") == 1
    assert gang.rank_of(ATTEMPT, "gpu3") is None
    assert runner.fence(JOB, 1, "gpu2") is None and "belongs to node" in runner.fence(JOB, 1, "gpu3")
    one = Attempt(1, "n", ("g",))
    assert gang.rank_of(one, "n") == 0 and gang.rank_of(one, "m") is None
    assert gang.part_of(ATTEMPT, 1) == gang.Part(1, ("gpu1", "gpu2"), ("GPU-2a", "GPU-2b"))


def test_a_parts_environment_is_what_torchrun_and_slurm_tools_read():
    part = gang.Part(1, ("gpu1", "gpu2"), ("GPU-2a", "GPU-2b"), "10.0.0.1", 29511)
    where = jobenv.Place(node="gpu2", user="alice", home="/home/alice", shell="/bin/sh", gpus=part.gpus,
                         start=1000.0, checkpoint_dir="/ck", part=part)
    env = jobenv.build(JOB, where)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-2a,GPU-2b" and env["LABQ_GPUS"] == "2"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["NODE_RANK"]) == ("10.0.0.1", "29511", "1")
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("4", "2")
    assert (env["LABQ_NODELIST"], env["LABQ_NODEID"], env["LABQ_NUM_NODES"]) == ("gpu1,gpu2", "1", "2")
    assert env["SLURM_NODELIST"] == env["SLURM_JOB_NODELIST"] == "gpu[1-2]"
    assert (env["SLURM_NNODES"], env["SLURM_JOB_NUM_NODES"], env["SLURM_NODEID"], env["SLURM_PROCID"]) == \
        ("2", "2", "1", "1")
    assert "SLURM_NTASKS" not in env
    quiet = jobenv.build(JOB, replace(where, slurm_env=False))
    assert "SLURM_NODELIST" not in quiet and quiet["NODE_RANK"] == "1"
    single = jobenv.build(JOB, replace(where, part=None))
    assert "MASTER_ADDR" not in single and single["SLURM_NNODES"] == "1"


def test_a_cpu_gang_has_one_process_per_node():
    part = gang.Part(0, ("a", "b", "c"), (), "127.0.0.1", 1234)
    env = jobenv.build(replace(JOB, gpus=0), jobenv.Place(node="a", user="u", home="/", shell="", gpus=(),
                                                          start=0.0, checkpoint_dir="", part=part))
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["SLURM_NODELIST"]) == ("3", "1", "a,b,c")


def test_output_per_node_with_percent_n():
    assert logpath.out_path(JOB, 1, "gpu2") == "/w/out-7-1-gpu2.log"
    assert logpath.out_path(JOB) == "/w/out-7-0-gpu1.log"
    assert logpath.out_path(replace(JOB, out="", err="e-%n")) == "/w/labq-7.out"
    assert logpath.err_path(replace(JOB, err="e-%n"), 1) == "/w/e-1"


def test_compact_node_lists():
    assert hostlist.compact(["node1", "node2"]) == "node[1-2]"
    assert hostlist.compact(["n3", "n1", "n2", "gpu07", "n5"]) == "n[1-3,5],gpu07"
    assert hostlist.compact(["a", "b"]) == "a,b" and hostlist.compact(["x"]) == "x" and hostlist.compact([]) == ""
    assert hostlist.compact(["n01", "n02"]) == "n[01-02]"


def test_the_gang_stop_names_its_attempt_and_wakes_that_attempts_nodes():
    assert waiting.stops_part("stop:1", 1) and not waiting.stops_part("stop:1", 2)
    assert not waiting.stops_part("cancel", 1) and not waiting.stops_part(None, 1)
    later = replace(JOB, node="gpu3", parts=(("gpu3", ()), ("gpu1", ())),
                    attempts=(ATTEMPT, Attempt(2, "gpu3", (), parts=(("gpu3", ()), ("gpu1", ())))))
    assert control_nodes(later, "stop:1") == ["gpu1", "gpu2"]
    assert control_nodes(later, "preempt:30") == ["gpu3", "gpu1"]
    assert control_nodes(replace(JOB, parts=(), node="n", attempts=(Attempt(1, "n", ()),)), "cancel") == ["n"]
    assert control_nodes(later, "stop:9") == []
