"""A replay's `spent` hash (NAME or NAME@PERIOD -> settled micro-units, as the daemon's ledger keeps it)
and what each budget has settled in its current period, as plan()'s Snapshot has it."""
import math

from ..money import periods
from ..settings.config import Config


class Spent:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.budgets = {b.name: b for b in cfg.budgets}
        self.spent: dict[str, int] = {}
        # `now`'s memos: (start, end, ((budget, its `spent` field), ...)) of the periods of its last
        # read, and (charges settled then, the balances, as a Snapshot has them)
        self.charges = 0
        self._fields: tuple = (math.inf, -math.inf, ())
        self._balances: tuple = (-1, {}, ())

    def settle(self, charges, t: float) -> None:
        """An attempt's charges, each into its budget's period (the current one at `t` if unnamed)."""
        self.charges += len(charges)
        for c in charges:
            b = self.budgets.get(c.budget)
            key = periods.field(c.budget, c.period or (periods.current(b, t) if b else ""))
            self.spent[key] = self.spent.get(key, 0) + c.amount

    def now(self, t: float) -> tuple[dict, tuple]:
        """What each budget has settled in its current period at `t` (periods.spent_now), and as
        plan()'s Snapshot has it: read again only after a charge, the fields named again only in
        other periods."""
        start, end, fields = self._fields
        if not start <= t < end:
            budgets = self.cfg.budgets
            spans = [periods.bounds(b.period, periods.current(b, t), b.timezone) for b in budgets if b.period != "none"]
            fields = tuple((b.name, periods.field(b.name, periods.current(b, t))) for b in budgets)
            self._fields = (max((s for s, _ in spans), default=-math.inf), min((e for _, e in spans), default=math.inf),
                            fields)
            self._balances = (-1, {}, ())
        if self._balances[0] != self.charges:
            spent = {name: int(self.spent.get(key, 0)) for name, key in fields}
            self._balances = (self.charges, spent, tuple(sorted(spent.items())))
        return self._balances[1], self._balances[2]
