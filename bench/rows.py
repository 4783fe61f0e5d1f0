"""One result row: a measured figure beside its DESIGN §11 target."""
from dataclasses import dataclass


@dataclass
class Row:
    name: str
    value: float | None = None      # in `unit`; None when skipped
    unit: str = "ms"                # "ms", "jobs/s", "s"
    target: float | None = None     # same unit
    better: str = "lower"           # "lower" or "higher" is better
    note: str = ""
    skipped: str = ""               # the reason, when not measured

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.target is None:
            return "—"
        ok = self.value <= self.target if self.better == "lower" else self.value >= self.target
        return "pass" if ok else "miss"

    def measured(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        return f"{fmt(self.value, self.unit)}"

    def target_text(self) -> str:
        if self.target is None:
            return "—"
        return ("≤ " if self.better == "lower" else "≥ ") + fmt(self.target, self.unit)


def fmt(v: float, unit: str) -> str:
    if unit == "ms":
        return f"{v:.1f} ms" if v < 1000 else f"{v / 1000:.2f} s"
    if unit == "jobs/s":
        return f"{v:,.0f} jobs/s" if v >= 100 else f"{v:.1f} jobs/s"
    return f"{v:.2f} {unit}"


def skipped(names, reason: str) -> list[Row]:
    return [Row(n, skipped=reason) for n in names]
