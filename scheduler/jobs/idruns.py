"""Runs of job ids with one outcome, as a reply to cancel/hold/release/requeue names them: one
entry for the 100,000 tasks of an array, not 100,000 result dicts kept, encoded and remembered.

A run is {"state": S, "array": A, "from": I, "to": J}: tasks A_I..A_J (array A), or jobs I..J
(array None), every one ok with state S. `expand` gives the per-job results the reply's `results`
listed before runs existed (the client-side shape stays the same)."""
from collections.abc import Iterable, Iterator
from typing import Any

from .model import Job

# One run as the reply carries it (JSON: state str, array int | None, from/to int).
Run = dict[str, Any]

# Up to this many ok results a reply still lists each one in `results` (beside `runs`); beyond it
# `results` holds the errors only and says so with "runs_only": the client expands the runs.
LISTED = 1000


class Runs:
    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.count = 0

    def add(self, job: Job, state: str) -> None:
        # A task's index is set with its array id (jobspec.expand); a plain job counts by its id.
        a, i = job.array_id, job.array_index
        self.add_id(a, i if a is not None and i is not None else job.id, state)

    def add_id(self, array: int | None, index: int, state: str) -> None:
        self.count += 1
        last = self.runs[-1] if self.runs else None
        if last and last["state"] == state and last["array"] == array and last["to"] == index - 1:
            last["to"] = index
        else:
            self.runs.append({"state": state, "array": array, "from": index, "to": index})

    def extend(self, runs: Iterable[Run]) -> None:
        for r in runs:
            last = self.runs[-1] if self.runs else None
            if last and last["state"] == r["state"] and last["array"] == r["array"] and last["to"] == r["from"] - 1:
                last["to"] = r["to"]
            else:
                self.runs.append(dict(r))
            self.count += r["to"] - r["from"] + 1


def display_ids(run: Run) -> Iterator[str]:
    a = run["array"]
    for i in range(run["from"], run["to"] + 1):
        yield f"{a}_{i}" if a is not None else str(i)


def expand(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """The per-job ok results the runs stand for, in order."""
    return [{"id": d, "ok": True, "state": r["state"]} for r in runs for d in display_ids(r)]


def covered(runs: Iterable[Run]) -> set[str]:
    """The display ids the runs name (only for the few runs a dead leader committed: a recovery)."""
    return {d for r in runs for d in display_ids(r)}


def without(runs: Iterable[Run], gone: set[str]) -> list[Run]:
    """`runs` less the display ids in `gone` (a recovery: what the dead leader already named)."""
    out = Runs()
    for r in runs:
        for i, d in zip(range(r["from"], r["to"] + 1), display_ids(r)):
            if d not in gone:
                out.add_id(r["array"], i, r["state"])
    return out.runs


def reply(runs: Runs, results: list[dict[str, Any]], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply of a request acting on each named job: `results` (per job: the ok ones while few,
    always the errors), `runs` (every ok one), ok, code and the joined errors."""
    ok = not errors
    out: dict[str, Any] = {"ok": ok, "results": results if runs.count <= LISTED else errors, "runs": runs.runs,
           "code": 0 if ok else 2, "error": "; ".join(r["error"] for r in errors)}
    if runs.count > LISTED:
        out["runs_only"] = True
    return out
