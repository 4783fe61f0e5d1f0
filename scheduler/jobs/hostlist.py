"""Node lists in SLURM's compact form: ["node1", "node2", "gpu07"] -> "gpu07,node[1-2]". Pure.

Names that end in digits are grouped by their prefix and the digits' width (node01 and node1 are
different names); runs of consecutive numbers become ranges. The order of the groups is the order
of their first names; `SLURM_NODELIST` readers (scontrol show hostnames, Lightning) expand it again.
"""
from __future__ import annotations

TYPE_CHECKING = False    # typing.TYPE_CHECKING without importing typing (mypy reads the name alike)
if TYPE_CHECKING:
    from collections.abc import Iterable



def _split(name: str) -> tuple[str, str]:
    """(prefix, the digits it ends in); digits "" where it ends in none. By hand, not by `re`, whose
    import `labq stat` would pay for this alone (issue 39 item 4)."""
    i = len(name)
    while i and name[i - 1].isdecimal():
        i -= 1
    return name[:i], name[i:]


def compact(names: Iterable[str]) -> str:
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[str | tuple[str, int]] = []
    for name in names:
        prefix, digits = _split(name)
        if not digits:
            order.append(name)
            continue
        key = (prefix, len(digits) if digits.startswith("0") else 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    return ",".join(_group(k, groups[k]) if isinstance(k, tuple) else k for k in order)


def _group(key: tuple[str, int], nums: list[int]) -> str:
    prefix, width = key
    nums = sorted(set(nums))
    if len(nums) == 1:
        return f"{prefix}{nums[0]:0{width}d}"
    runs, start = [], nums[0]
    for a, b in zip(nums, nums[1:] + [-1]):     # -1: no next number, the last run ends
        if b != a + 1:
            runs.append(f"{start:0{width}d}" if start == a else f"{start:0{width}d}-{a:0{width}d}")
            start = b
    return f"{prefix}[{','.join(runs)}]"
