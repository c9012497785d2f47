"""Two bench runs side by side: each figure in both, and the ratio of the second to the first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufly.bench.results import BenchResult, BenchRun, DeviceFacts


@dataclass(frozen=True)
class Row:
    """One benchmark in both runs (or in one: the other's value is None)."""

    name: str
    metric: str
    unit: str
    a: float | None
    b: float | None
    note: str | None = None

    @property
    def ratio(self) -> float | None:
        """b / a: above 1 means b measured more (for latencies, in seconds, that is worse)."""
        return self.b / self.a if self.a and self.b is not None else None

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "seconds"

    @property
    def b_speedup(self) -> float | None:
        """How many times faster b is than a, whichever way the metric points."""
        ratio = self.ratio
        if ratio is None or ratio == 0:
            return None
        return ratio if self.higher_is_better else 1 / ratio

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "unit": self.unit, "a": self.a, "b": self.b,
                "ratio_b_over_a": self.ratio, "b_speedup": self.b_speedup, "higher_is_better": self.higher_is_better,
                "note": self.note}


@dataclass(frozen=True)
class Comparison:
    a_label: str
    b_label: str
    a_device: DeviceFacts
    b_device: DeviceFacts
    rows: list[Row] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"a": {"file": self.a_label, "device": self.a_device.to_dict()},
                "b": {"file": self.b_label, "device": self.b_device.to_dict()},
                "rows": [row.to_dict() for row in self.rows]}


def _size_note(a: BenchResult, b: BenchResult) -> str | None:
    differing = [f"{key} {a.params.get(key)} vs {b.params.get(key)}" for key in ("shape", "dtype")
                 if a.params.get(key) != b.params.get(key)]
    return "sizes differ: " + ", ".join(differing) if differing else None


def compare_runs(a: BenchRun, b: BenchRun, a_label: str = "a", b_label: str = "b") -> Comparison:
    """Every benchmark of either run, in a's order then b's extras, with b / a where both have it."""
    names = [r.name for r in a.results] + [r.name for r in b.results if a.result(r.name) is None]
    rows = []
    for name in names:
        left, right = a.result(name), b.result(name)
        either = left or right
        assert either is not None
        note = _size_note(left, right) if left and right else ("only in a" if left else "only in b")
        if left and right and left.unit != right.unit:
            note = f"units differ: {left.unit} vs {right.unit}"
            right = None
        rows.append(Row(name, either.metric, either.unit, left.value if left else None,
                        right.value if right else None, note))
    return Comparison(a_label, b_label, a.device, b.device, rows)
