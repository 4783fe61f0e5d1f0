"""How a job record names itself: `42`, `42_3`, or `42_[1-3,7]` for a record that stands for many
tasks (a held or pending array's rest, a cancelled array's end). One rule for model.Job and the
light store/jobview.JobView the rare commands read; no imports, so neither pays for the other."""


def _span(first: int, last: int, step: int) -> str:
    return str(first) if first == last else f"{first}-{last}" + (f":{step}" if step != 1 else "")


def display_id(jid: int, array_id: int | None, array_index: int | None,
               array_runs: tuple[tuple[int, int, int], ...]) -> str:
    if array_id is not None:
        if array_runs:
            return f"{array_id}_[{','.join(_span(*r) for r in array_runs)}]"
        return f"{array_id}_{array_index}"
    return str(jid)


def task_count(array_runs: tuple[tuple[int, int, int], ...]) -> int:
    """The array tasks a record stands for: 1, or many for an array_runs record."""
    return sum((b - a) // s + 1 for a, b, s in array_runs) if array_runs else 1
