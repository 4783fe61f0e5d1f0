"""Malformed traces (issue 19 part 4): each one answered by `labq simulate` with one line naming the
file, the line and the column, exit 2, nothing on stdout and nothing written (no --plot file) —
never a traceback. The two that a replay used to accept silently, unsorted rows (sorted) and a job
larger than the cluster (a `capacity` refusal in the report), are refused too, each with a flag that
replays the trace anyway: `--sort`, `--drop-too-large`."""
import json
import os
import subprocess
import sys

import pytest

from tests.harness import ROOT

HEADER = "job_id,submit_s,duration_s,gpus,cpus,mem_gib"


def labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


def refused(p, *needles):
    """One line on stderr with every needle, exit 2, nothing on stdout."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


CASES = {
    # name: (file text, expected pieces of the one line; {f} is the file's path)
    "unsorted": (f"{HEADER}\na,10,5,1,1,1\nb,20,5,1,1,1\nc,15,5,1,1,1\n",
                 ["{f}:4: submit_s:", "15 is before 20, line 3's", "--sort"]),
    "too many GPUs": (f"{HEADER}\na,0,5,1,1,1\nb,1,5,9,1,1\nc,2,5,12,1,1\n",
                      ["{f}:3: gpus:", "job b asks for 9 GPUs; the cluster has 8", "2 nodes: 8 GPUs",
                       "1 more of the trace's 3 jobs", "--drop-too-large"]),
    "too many CPUs": (f"{HEADER}\na,0,5,1,40,1\n", ["{f}:2: cpus:", "40 CPUs", "largest node of the cluster has 16"]),
    "too much memory": (f"{HEADER}\na,0,5,1,1,100\n", ["{f}:2: mem_gib:", "100 GiB", "has 64 GiB"]),
    "missing column": ("job_id,submit_s,gpus\na,0,1\n", ["{f}: missing column 'duration_s'"]),
    "empty file": ("", ["{f}: empty"]),
    "comments only": ("# nothing here\n\n", ["{f}: empty"]),
    "header only": (f"{HEADER}\n", ["{f}: no jobs"]),
    "short row": (f"{HEADER}\na,0,5,1,1,1\nb,1,5\n", ["{f}:3: gpus: missing: 3 fields, the header has 6"]),
    "long row": (f"{HEADER}\na,0,5,1,1,1,lab,x\n", ["{f}:2: 8 fields, the header has 6"]),
    "huge number": (f"{HEADER}\na,0,1e300,1,1,1\n", ["{f}:2: duration_s:", "100 years"]),
    "huge integer": (f"{HEADER}\na,0,5,1,99999999999999999999999,1\n", ["{f}:2: cpus:", "past the most"]),
    "infinity": (f"{HEADER}\na,inf,5,1,1,1\n", ["{f}:2: submit_s:"]),
    "unclosed quote": (f"{HEADER}\na,0,5,1,1,1\nb,1,5,1,1,\"lab\nc,2,5,1,1,1\n",
                       ["{f}:3: mem_gib: a quoted value holds a line break (an unclosed quote?)"]),
    "duplicate id": (f"{HEADER}\na,0,5,1,1,1\na,1,5,1,1,1\n", ["{f}:3: job_id: 'a' appears twice"]),
    "duplicate column": (f"{HEADER},gpus\na,0,5,1,1,1,2\n", ["{f}: header: column 'gpus' appears twice"]),
    "line numbers count comments and blank lines": (f"# a comment\n{HEADER}\n\na,0,5,1,1,1\n# b\nb,1,x,1,1,1\n",
                                                    ["{f}:6: duration_s: expected a number, got 'x'"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_malformed_trace_is_one_line_naming_row_and_column(tmp_path, name):
    text, needles = CASES[name]
    f = tmp_path / "t.csv"
    f.write_text(text)
    plot = tmp_path / "out.png"
    p = labq("simulate", str(f), "--nodes", "2x4", "--policy", "fifo", "--plot", str(plot))
    if p.returncode == 2 and "matplotlib" in p.stderr:          # no plot extra: the same, without --plot
        p = labq("simulate", str(f), "--nodes", "2x4", "--policy", "fifo")
    refused(p, *(n.format(f=f) for n in needles))
    assert not plot.exists(), "nothing written"


def test_crlf_line_ends_replay_as_lf(tmp_path):
    rows = [HEADER, "a,0,5,1,1,1", "b,3,5,4,1,1", "c,4,5,4,1,1"]
    lf, crlf = tmp_path / "lf.csv", tmp_path / "crlf.csv"
    lf.write_bytes(("\n".join(rows) + "\n").encode())
    crlf.write_bytes(("\r\n".join(rows) + "\r\n").encode())
    reps = []
    for f in (lf, crlf):
        p = labq("simulate", str(f), "--nodes", "1x4", "--policy", "fifo", "--json")
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        rep.pop("wall_s"), rep.pop("trace")
        reps.append(rep)
    assert reps[0] == reps[1] and reps[0]["jobs"]["completed"] == 3


def test_sort_replays_an_unsorted_trace_as_the_sorted_one(tmp_path):
    unsorted, ordered = tmp_path / "u.csv", tmp_path / "o.csv"
    unsorted.write_text(f"{HEADER}\nb,20,5,4,1,1\na,10,30,4,1,1\nc,15,5,4,1,1\n")
    ordered.write_text(f"{HEADER}\na,10,30,4,1,1\nc,15,5,4,1,1\nb,20,5,4,1,1\n")
    refused(labq("simulate", str(unsorted), "--nodes", "1x4"), f"{unsorted}:3: submit_s:")
    got = [labq("simulate", str(f), "--nodes", "1x4", "--policy", "fifo", "--json", *flag)
           for f, flag in ((unsorted, ["--sort"]), (ordered, []))]
    assert all(p.returncode == 0 for p in got), [p.stderr for p in got]
    a, b = (json.loads(p.stdout) for p in got)
    for rep in (a, b):
        rep.pop("wall_s"), rep.pop("trace")
    assert a == b and a["wait_s"]["mean"] == pytest.approx((0 + 25 + 25) / 3, abs=0.05)   # c then b, after a


def test_drop_too_large_replays_the_rest_and_counts_them(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(f"{HEADER}\na,0,5,1,1,1\nb,1,5,9,1,1\nc,2,5,1,40,1\nd,3,5,2,1,1\n")
    p = labq("simulate", str(f), "--nodes", "2x4", "--policy", "fifo", "--json", "--drop-too-large")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["jobs"]["completed"] == 2 and rep["refused"]["count"] == 2
    assert rep["refused"]["by_kind"] == {"capacity": 2}
    both = labq("simulate", str(f), "--nodes", "2x4", "--compare", "fifo,backfill")
    refused(both, f"{f}:3: gpus:")
    both = labq("simulate", str(f), "--nodes", "2x4", "--compare", "fifo,backfill", "--json", "--drop-too-large")
    assert [r["refused"]["count"] for r in json.loads(both.stdout)["compare"]] == [2, 2], both.stderr


def test_a_job_larger_than_its_groups_nodes_names_the_group(tmp_path):
    trace, groups = tmp_path / "t.csv", tmp_path / "g.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,group\na,0,5,8,vc-a\nb,0,5,8,vc-b\n")
    groups.write_text("group,nodes\nvc-a,1x8\nvc-b,1x4\n")
    refused(labq("simulate", str(trace), "--group-nodes", str(groups)), f"{trace}:3: gpus:", "group vc-b has 4")
    p = labq("simulate", str(trace), "--group-nodes", str(groups), "--json", "--drop-too-large")
    assert p.returncode == 0 and json.loads(p.stdout)["jobs"]["completed"] == 1, p.stderr


def test_a_cpu_trace_as_gpus_names_the_cpus_column(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("job_id,submit_s,duration_s,cpus\na,0,5,4\nb,1,5,16\n")
    refused(labq("simulate", str(f), "--nodes", "1x8", "--gpus-from-cpus"), f"{f}:3: cpus:", "16 GPUs; the cluster has 8")


def test_a_gpu_model_the_cluster_lacks(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("job_id,submit_s,duration_s,gpus,gpu_type\na,0,5,1,H100\n")
    refused(labq("simulate", str(f), "--nodes", "1x4:16:64G:A100"), f"{f}:2: gpu_type:", "'H100'", "A100")


def test_a_short_row_in_the_extra_file(tmp_path):
    f, x = tmp_path / "t.csv", tmp_path / "x.csv"
    f.write_text(f"{HEADER}\na,0,5,1,1,1\n")
    x.write_text("job_id,req_time_s,queue\na,60\n")
    refused(labq("simulate", str(f), "--nodes", "1x4", "--extra", str(x)), f"--extra: {x}:2: queue: missing")
