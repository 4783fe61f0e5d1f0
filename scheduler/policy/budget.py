"""The budget gate: every budget a job is charged to must have room for its forecast.

For each budget B of the job: spent(B) + committed(B) + forecast(job) ≤ limit(B) × (1 − reserve).
`committed` is what running jobs may still spend (their commitment minus what they have accrued),
plus what this pass has already admitted. A job that would fit once those commitments settle pends
`BudgetReserved`; one that would not fit even then pends `BudgetExhausted`.
"""
from .. import ledger, states
from ..config import Config
from ..model import Job
from ..units import fmt_money


class BudgetBook:
    """Per-budget spent and committed amounts during one plan pass."""

    def __init__(self, cfg: Config, spent: dict, running, now: float):
        self.cfg, self.now = cfg, now
        self.spent = {b.name: spent.get(b.name, 0) for b in cfg.budgets}
        self.committed = {b.name: 0 for b in cfg.budgets}
        for j in running:
            for name, _ in j.commit:
                if name in self.committed:
                    # What has accrued is not yet settled: it still counts against the budget.
                    self.committed[name] += ledger.outstanding(j, name, now) + ledger.accrued(j, name, now)

    def quote(self, job: Job, gpu_model: str, node=None):
        """(commit, rates) the job would take on `node`, which has `gpu_model` GPUs."""
        bs = ledger.budgets_for(job, self.cfg.budgets)
        commit = tuple((b.name, ledger.forecast(job, b.unit, gpu_model, self.cfg, node)) for b in bs)
        rates = tuple((b.name, ledger.rate(job, b.unit, gpu_model, self.cfg, node)) for b in bs)
        return commit, rates

    def blocked(self, commit):
        """(reason, detail) for the first budget without room for `commit`, else None."""
        for b in self.cfg.budgets:
            need = dict(commit).get(b.name)
            if need is None:
                continue
            cap, spent, held = ledger.cap(b), self.spent[b.name], self.committed[b.name]
            if spent + held + need <= cap:
                continue
            avail = cap - spent - held
            detail = (f"needs {fmt_money(need, b.unit)}; budget {b.name}: limit {fmt_money(b.limit, b.unit)}"
                      f" (reserve {b.reserve:.0%}), spent {fmt_money(spent, b.unit)},"
                      f" committed {fmt_money(held, b.unit)}, available {fmt_money(avail, b.unit)}")
            reason = states.BUDGET_RESERVED if spent + need <= cap else states.BUDGET_EXHAUSTED
            return reason, detail
        return None

    def commit(self, commit) -> None:
        for name, amount in commit:
            self.committed[name] += amount


def never_affordable(job: Job, gpu_model: str, cfg: Config, spent: dict | None = None) -> str | None:
    """The refusal line for a job whose forecast exceeds what a budget could ever allow: its cap, or,
    for a budget without periods (spending never starts again), what is left of it after `spent`.
    What running jobs have committed is not counted: it settles, and the job can then be paid
    (it pends BudgetReserved meanwhile)."""
    for b in ledger.budgets_for(job, cfg.budgets):
        need = ledger.forecast(job, b.unit, gpu_model, cfg)
        if need > ledger.cap(b):
            return (f"budget {b.name}: job would cost {fmt_money(need, b.unit)}, "
                    f"limit {fmt_money(b.limit, b.unit)}, available at most {fmt_money(ledger.cap(b), b.unit)}"
                    f" (reserve {b.reserve:.0%})")
        used = (spent or {}).get(b.name, 0) if b.period == "none" else 0
        if need > ledger.cap(b) - used:
            return (f"budget {b.name}: job would cost {fmt_money(need, b.unit)}, only "
                    f"{fmt_money(max(0, ledger.cap(b) - used), b.unit)} is left of its limit "
                    f"{fmt_money(b.limit, b.unit)} (spent {fmt_money(used, b.unit)}, reserve {b.reserve:.0%}, "
                    f"no period: it is never renewed)")
    return None
