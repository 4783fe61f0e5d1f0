from scheduler.model import Job
from scheduler.whatif import what_if
from tests.harness import G, ClusterBuilder, cfg


def test_the_worked_example():
    """4 GPUs, 16 CPUs, 64 GiB; 12 jobs × (1 GPU, 4 CPUs, 12 GiB, 2 h) at $2/GPU-h against $120."""
    nodes = ClusterBuilder().node("n", gpus=4, cpus=16, mem=64 * G, slots=16).build().nodes
    job = Job(id=0, user="a", account="eta", gpus=1, cpus=4, mem=12 * G, time_limit=7200)
    w = what_if(nodes, job, 12, cfg("[rates]\ngpu_hour = 2.0\n"), budget_limit=120_000_000)
    assert w.concurrency == {"gpus": 4, "cpus": 4, "mem": 5, "slots": 16, "overall": 4}
    assert (w.waves, w.makespan_s, w.cost, w.budget_remaining) == (3, 6 * 3600, 48_000_000, 72_000_000)
    assert w.warn_levels == ((0.7, 84_000_000), (0.9, 108_000_000))
    assert w.binding in ("gpus", "cpus")


def test_a_cpu_job_is_not_limited_by_gpus():
    nodes = ClusterBuilder().node("a", gpus=0, cpus=8).node("b", gpus=2, cpus=8).build().nodes
    w = what_if(nodes, Job(id=0, user="a", account="x", cpus=3, time_limit=60), 10, cfg())
    assert w.concurrency["gpus"] is None and w.concurrency["overall"] == 4 and w.waves == 3
