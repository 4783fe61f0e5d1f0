"""policy/blocks.py and its holds(): a block's shortest span of a shape (`Block.least`), which `holds` reads to
pass all the block's classes of the shape with Reservation, stays the shortest as classes leave and join."""
from types import SimpleNamespace

from labq.scheduler.policy import blocks
from labq.scheduler.policy.delays import RESERVED

NOW = 1.7e9
WHO = ("acct", "user", 1, 4, 1)
LONG, OTHER = (1, "", 4, 32), (4, "", 16, 128)
_ids = iter(range(1, 10_000))


class _Class:
    """What a block reads of a plain class (queue.Group)."""
    def __init__(self, limit: int, shape: tuple) -> None:
        j = next(_ids)
        self.jobs = [SimpleNamespace(id=j, time_limit=limit, learned_est=None, gpus=shape[0], cpus=shape[2])]
        self.ids, self.plain, self.within, self.block = [j], (WHO, shape), None, None


def _holds(b: blocks.Block, bound: float) -> bool:
    """holds() where each shape has room and a class delays the reservation past now + span `bound` (settle.dead)."""
    d = SimpleNamespace(bounds={LONG: NOW + bound, OTHER: NOW + bound})

    def dead(job):
        return RESERVED if NOW + job.time_limit > NOW + bound else None
    return blocks.holds(b, {}, {}, lambda j: True, dead, False, d, NOW, False)


def test_a_shape_s_shortest_is_forgotten_when_its_classes_all_left():
    """A, the shape's one class, leaves and comes back (its first job changed) after C, shorter, came while the
    shape had no class in the block: the shortest is C's, not A's still (holds passed C unjudged: C can start)."""
    a, p, q, c = _Class(7200, LONG), _Class(7200, OTHER), _Class(7200, OTHER), _Class(60, LONG)
    fronts = [((1.0,), 1), ((2.0,), 2), ((3.0,), 3)]
    b = blocks.Block([a, p, q], fronts[:])
    assert _holds(b, 600)       # A's span, 7200, is the shape's shortest: kept (least)
    blocks.remove(a, fronts[0])
    blocks.insert(c, ((2.5,), 4), (p, q))
    blocks.insert(a, ((2.7,), 5), (c, q))
    assert a.within is b and c.within is b
    assert not _holds(b, 600)
