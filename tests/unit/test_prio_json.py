"""`labq prio --json` (prio.json_text: each job one %-format of its values' JSON texts) is the text
json.dumps(indent=2) gave of the same object (cli/prio.py before it): singles and array tasks, names
to escape (quotes, backslashes, non-ASCII), integer and float weights, negative zeros, no jobs, and a
nan (json spells NaN: the whole falls back to json.dumps)."""
import json
import random

import pytest

from labq.cli import prio
from labq.scheduler.jobs.model import Job
from labq.scheduler.multifactor import Factors
from labq.scheduler.priotable import Weights


def _dumps(shown, f, w, usage) -> str:
    return json.dumps({"weights": {k: w[k] for k in ("qos_weight", "age_weight", "fairshare_weight",
                                                     "burst_penalty", "short_job_weight")},
                       "usage": dict(sorted(usage.items())),
                       "jobs": [{"id": j.display_id, "job_id": j.id, "user": j.user, "account": j.account,
                                 "qos": j.qos, **f[j.id].as_json(w)} for j in shown]}, indent=2)


@pytest.mark.parametrize("seed", range(8))
def test_json_text_is_json_dumps_indent_2(seed):
    rng = random.Random(seed)
    jobs, f = [], {}
    for i in range(rng.randrange(0, 40)):
        aid = rng.choice((None, 1000))
        jobs.append(Job(i + 1, rng.choice(("alice", 'b"o\\b', "zoë", "x\ty")), rng.choice(("eta", "phi")),
                        qos=rng.choice(("normal", "low")), array_id=aid, array_index=i if aid else None))
        age, fs = rng.random(), rng.choice((1.0, 0.5, 0.123456789, 0.0, -0.0))
        f[i + 1] = Factors(i + 1, rng.choice((0.0, 100.0, -0.0, 3.0)), age, fs, rng.choice((0.0, 1.0)),
                           rng.random() * 1000 - 10, rng.choice((0.0, 0.25, 1 / 3)))
    w = Weights(dict(qos_weight=rng.choice((1, 1.5)), age_weight=rng.choice((10, 7.25)), fairshare_weight=50.0,
                          burst_penalty=rng.choice((20, 0.0)), short_job_weight=rng.choice((0, 7.0))))
    usage = {"eta": 12.5, "phi": 0.0} if seed % 2 else {}
    assert prio.json_text(jobs, f, w, usage) == _dumps(jobs, f, w, usage)
    if jobs:
        f[jobs[0].id] = f[jobs[0].id]._replace(priority=float("nan"))
        assert prio.json_text(jobs, f, w, usage) == _dumps(jobs, f, w, usage)
