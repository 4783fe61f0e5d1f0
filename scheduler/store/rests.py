"""Rests in Redis (jobs/rest.py): a held array's tasks not made into records yet, as two keys.

`labq:rest:<A>` holds the rest itself ({lo, step, runs, template}: the template is its task 0's
record text, codec.dumps), and the hash `labq:rests` maps A to {lo, step, runs, row}: the
`stat` row its tasks share (statrows.dumps), which `stat` reads in the same MULTI as the other
rows and spreads over the tasks (statrows.rest_texts). Both are O(runs) bytes, whatever the task
count. The scheduler writes them in the transaction that makes or changes the rest; clients read.
"""
import json

from ..jobs.rest import Rest, tasks_of
from . import codec, envs, statrows
from .keys import Keys

_ENC = json.JSONEncoder(separators=(",", ":"))


def dumps(rest: Rest) -> str:
    return _ENC.encode({"lo": rest.lo, "step": rest.step, "runs": rest.runs, "template": codec.dumps(rest.template)})


def loads(text, specs=None) -> Rest:
    d = json.loads(text)
    template = codec.loads(d["template"], specs)
    return Rest(template=template, lo=d["lo"], step=d["step"], runs=tuple((a, b) for a, b in d["runs"]))


def row(rest: Rest) -> str:
    return _ENC.encode({"lo": rest.lo, "step": rest.step, "runs": rest.runs, "row": statrows.dumps(rest.template)})


def put(p, k: Keys, rest: Rest, new: bool = False) -> None:
    """The rest as it now is; `new` (made by this submit): its submission's script, spec and exported
    environment too, stored once under the array id as an array's first task stores them."""
    a = rest.array_id
    p.set(k.rest(a), dumps(rest))
    p.hset(k.rests, str(a), row(rest))
    if new:
        t = rest.template
        if t.script:
            p.set(k.script(a), t.script)
        if codec.shares_spec(t):
            p.set(k.spec(a), codec.spec(t))
        if t.env:
            envs.put(p, k, a, t)


def drop(p, k: Keys, array_id: int) -> None:
    """Every task has left the rest (each is a record now)."""
    p.delete(k.rest(array_id))
    p.hdel(k.rests, str(array_id))


def put_changed(p, k: Keys, changed: dict, new: set) -> None:
    """A batch's rests (store/batch.Batch.rests): each as it now is, or gone."""
    for a, rest in changed.items():
        if rest is None:
            drop(p, k, a)
        else:
            put(p, k, rest, new=a in new)


def load(r, k: Keys, specs=None) -> dict[int, Rest]:
    """Every rest, by array id (a leader's recovery; a reader looking for a task with no record)."""
    ids = sorted(int(a) for a in r.hkeys(k.rests))
    texts = r.mget([k.rest(a) for a in ids]) if ids else []
    return {a: loads(t, specs) for a, t in zip(ids, texts) if t}


def fill(found: list, ids: list, load) -> list:
    """`found` (the records of `ids` there are) with the tasks of `ids` that rest, in the order of
    `ids`; `load()` reads the rests, only when some id has no record."""
    if len(found) >= len(ids):
        return found
    have = {j.id for j in found}
    rests = load()
    extra = tasks_of(rests, [i for i in ids if i not in have]) if rests else {}
    if not extra:
        return found
    by_id = {**{j.id: j for j in found}, **extra}
    return [by_id[i] for i in ids if i in by_id]


def every_task(rests: dict) -> list:
    """Every resting task, by id (the readers' `active()`: --json, -o, report, prio)."""
    return [t for a in sorted(rests) for t in rests[a].tasks()]
