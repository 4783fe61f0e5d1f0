"""The golden replay: what `labq simulate tests/data/sim_small.csv --nodes 2x4 --json` reports under
each policy, pinned in tests/data/sim_golden.json. A change to plan(), the transitions or the
report shows up here; when it is intended, rewrite the file:

    LABQ_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_sim_golden.py
"""
import json
import os

import pytest
from click.testing import CliRunner

from labq.cli.group import cli
from tests.harness import DATA

GOLDEN = os.path.join(DATA, "sim_golden.json")
POLICIES = ("fifo", "priority", "backfill", "fairshare", "config")


def replay(tmp_path, policy: str) -> dict:
    empty = tmp_path / "labq.toml"
    empty.write_text("")
    r = CliRunner().invoke(cli, ["--config", str(empty), "simulate", os.path.join(DATA, "sim_small.csv"),
                                 "--nodes", "2x4", "--policy", policy, "--json", "--no-progress"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    out.pop("wall_s")
    out.pop("config_file")      # a temporary path
    return out


def test_golden(tmp_path):
    got = {p: replay(tmp_path, p) for p in POLICIES}
    if os.environ.get("LABQ_REGEN_GOLDEN"):
        with open(GOLDEN, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
        pytest.skip(f"rewrote {GOLDEN}")
    with open(GOLDEN) as f:
        want = json.load(f)
    for p in POLICIES:
        assert got[p] == want[p], f"policy {p}"
