"""One result row: a measured figure beside its DESIGN §11 target and, where a peer does the same
work, the peer's figure from the same run."""
from dataclasses import dataclass, field

PEERS = ("task-spooler", "SLURM")


@dataclass
class Fig:
    """A peer's figure for the same work as a row (same unit), or why there is none."""
    value: float | None = None
    note: str = ""
    skipped: str = ""               # the reason, when not measured (missing, could not start, no such feature)


@dataclass
class Row:
    name: str
    value: float | None = None      # in `unit`; None when skipped
    unit: str = "ms"                # "ms", "jobs/s", "MB", "bytes", "%", "s"
    target: float | None = None     # same unit
    better: str = "lower"           # "lower" or "higher" is better
    note: str = ""
    skipped: str = ""               # the reason, when not measured
    failed: str = ""                # what went wrong, when the work itself did not complete
    key: str = ""                   # stable id, to attach peers' figures and explanations
    peers: dict = field(default_factory=dict)   # peer name -> Fig
    data: dict = field(default_factory=dict)    # figures behind the note, for the explanations of misses

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.failed:
            return "fail"
        if self.target is None:
            return "—"
        ok = self.value <= self.target if self.better == "lower" else self.value >= self.target
        return "pass" if ok else "miss"

    def factor(self, other: float) -> float:
        """How many times worse this row's figure is than `other` (< 1: better)."""
        if self.better == "lower":
            return self.value / other if other else float("inf")
        return other / self.value if self.value else float("inf")

    def result(self) -> str:
        """pass / miss by N× / skipped / — (no target)."""
        v = self.verdict
        if v == "miss":
            f = self.factor(self.target)
            return f"miss ({f:.1f}× the target)" if self.better == "lower" else f"miss ({1 / f:.2f} of the target)"
        return v

    def measured(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.failed:
            return f"failed: {self.failed}"
        return fmt(self.value, self.unit)

    def target_text(self) -> str:
        if self.target is None:
            return "—"
        return ("≤ " if self.better == "lower" else "≥ ") + fmt(self.target, self.unit)

    def peer_text(self, peer: str) -> str:
        f = self.peers.get(peer)
        if f is None:
            return ""
        if f.skipped or f.value is None:
            return f.skipped or "—"
        return fmt(f.value, self.unit)

    def ratio_text(self, peer: str) -> str:
        """labq beside the peer: "3.2× slower" / "4.0× faster" (by the row's own sense of better)."""
        f = self.peers.get(peer)
        if self.skipped or self.failed or f is None or f.skipped or f.value is None or not f.value or not self.value:
            return ""
        x = self.factor(f.value)
        if 0.95 <= x <= 1.05:
            return "about the same"
        word = ("slower" if self.unit in ("ms", "s") or self.better == "higher" else "worse") if x > 1 else \
               ("faster" if self.unit in ("ms", "s") or self.better == "higher" else "better")
        m = max(x, 1 / x)
        return f"{m:.0f}× {word}" if m >= 10 else f"{m:.1f}× {word}"


def fmt(v: float, unit: str) -> str:
    if unit == "ms":
        if v >= 1000:
            return f"{v / 1000:.2f} s"
        return f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"
    if unit == "jobs/s":
        return f"{v:,.0f} jobs/s" if v >= 100 else f"{v:.1f} jobs/s"
    if unit == "MB":
        return f"{v:,.0f} MB"
    if unit == "bytes":
        return f"{v:,.0f} B"
    if unit == "%":
        return f"{v:.2f} %"
    return f"{v:.2f} {unit}"


def skipped(names, reason: str) -> list[Row]:
    return [Row(n, skipped=reason) for n in names]
