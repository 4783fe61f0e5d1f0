"""A pass start of the replay: the jobs a spent budget provably keeps waiting parked out of the
queue or left out of the pass by id, the others brought back (parked.py decides which)."""
from .parked import NONE


def settle(sim, t: float) -> None:
    """At the start of a pass of the replay `sim` (an engine.Simulator): find the jobs a budget now
    provably keeps waiting and bring back the others. Those count as held by their budget; they are
    parked, or, while recently affordable, left out of the pass by id (`sim.idle`). When a pass over
    the rest might not decide what the pass over every pending job does, every parked job comes
    back and none is left out."""
    pk = sim.parking
    sim.idle = NONE
    if pk is None:
        return
    spent = sim.spent_now(t)[0]
    new, park, back = pk.update(t, spent, sim.running, sim.attempts)
    for i in back:
        bring_back(sim, i)
    sim.budget_held.update(new)
    if not pk.excludes(sim.queue, pk.idle):
        for i in list(pk.jobs):
            bring_back(sim, i)
        return
    for i in park:
        move_out(sim, i)
    if pk.idle:
        sim.idle = pk.idle


def move_out(sim, job_id: int) -> None:
    # burst tails are of every pending job (Parking.excludes): a parked job stays in them
    sim.parking.park(sim.queue.remove(job_id, pending=True))


def bring_back(sim, job_id: int) -> None:
    sim.queue.add(sim.parking.unpark(job_id), pending=True)
