"""What the scheduler's tick reads of the nodes' side and takes back from it (daemon/events.py), over
the store's connection, which stays in store/: the health marks and runner signs of unhealthy nodes
(nodehealth.py), the runners' claims of dispatched attempts, which nodes run persistent runners, and
a withdrawal (dispatchq.py: a claim the scheduler races the runners for)."""
from . import dispatchq, nodehealth
from .keys import Keys


class NodeSide:
    def __init__(self, r, keys: Keys):
        self._r, self.k = r, keys

    def health_signs(self, nodes) -> tuple[dict[str, float], dict[str, float]]:
        """(when each marked node was marked, its runners' newest state time): nodehealth.signs."""
        return nodehealth.signs(self._r, self.k, nodes)

    def claims(self, attempts) -> dict[tuple[int, int], str | None]:
        return dispatchq.claims(self._r, self.k, attempts)

    def with_runners(self, nodes) -> set[str]:
        return dispatchq.with_runners(self._r, self.k, nodes)

    def withdraw(self, job_id: int, attempt: int | str) -> bool:
        """True when the scheduler won the claim (dispatchq.withdraw)."""
        return dispatchq.withdraw(self._r, self.k, job_id, attempt)
