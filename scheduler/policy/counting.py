"""A class walk's count of its pass's calls that may change the pass's state (classes._Walk.touched:
budget quotes, admission, preemption, reservation): the pass's methods wrapped for the walk and
unwrapped once it ends. Each wrapper holds the pass (its method) and is held by it: left in place,
that cycle left every pass's whole state (~150 objects: the walk, its Reach, Timelines, Placer,
Snapshot...) to the cyclic garbage collector, a fifth of a deep replay's CPU and its garbage kept
until then (tests/unit/test_plan_garbage.py)."""
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

COUNTED = ("_admit", "_budget_even_if_room", "_preempt", "_reserve")


@contextmanager
def counting(walk: Any) -> Iterator[None]:
    """While in it, each call of `walk.p`'s COUNTED methods adds one to `walk.touched`."""
    p = walk.p
    for name in COUNTED:
        setattr(p, name, _counted(walk, getattr(p, name)))
    try:
        yield
    finally:
        for name in COUNTED:
            delattr(p, name)


def _counted(walk: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*a: Any) -> Any:
        walk.touched += 1
        return fn(*a)
    return counted
