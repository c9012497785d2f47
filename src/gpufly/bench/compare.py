"""Two bench runs side by side: each figure in both, the ratio of the second to the first, and whether the
difference is beyond noise: the two figures' intervals (each the ~95% interval of its median) do not overlap.

Non-overlapping 95% intervals is a strict test (two figures can differ at 95% with slightly overlapping
intervals), so "beyond noise" is said only of differences that are surely real; a difference inside the
intervals is "within noise", never called a speed-up. A figure its own run marked noisy decides nothing: its
interval did not settle, and what disturbed it (another process for the whole measurement) can shift a figure
without widening it, so the verdict is "noisy".
"""

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
    a_interval: tuple[float, float] | None = None
    b_interval: tuple[float, float] | None = None
    noisy: bool = False

    @property
    def verdict(self) -> str | None:
        """"faster" or "slower" (b against a, beyond noise), "within noise", "noisy" (either figure was marked so),
        "no interval" (a run saved before gpufly measured intervals), or None where one side is missing."""
        if self.a is None or self.b is None:
            return None
        if self.noisy:
            return "noisy"
        if self.a_interval is None or self.b_interval is None:
            return "no interval"
        (a_low, a_high), (b_low, b_high) = self.a_interval, self.b_interval
        if b_low > a_high:
            return "faster" if self.higher_is_better else "slower"
        if b_high < a_low:
            return "slower" if self.higher_is_better else "faster"
        return "within noise"

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
                "a_interval": list(self.a_interval) if self.a_interval else None,
                "b_interval": list(self.b_interval) if self.b_interval else None, "verdict": self.verdict,
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


def _interval(result: BenchResult | None) -> tuple[float, float] | None:
    if result is None or result.value_low is None or result.value_high is None:
        return None
    return result.value_low, result.value_high


def _notes(left: BenchResult | None, right: BenchResult | None) -> str | None:
    if not (left and right):
        return "only in a" if left else "only in b"
    noisy = [side for side, result in (("a", left), ("b", right)) if result.noisy]
    busy = [side for side, result in (("a", left), ("b", right)) if not result.noisy and result.busy_processes]
    parts = [_size_note(left, right), f"noisy in {' and '.join(noisy)}" if noisy else None,
             f"other processes busy during {' and '.join(busy)}" if busy else None]
    return "; ".join(part for part in parts if part) or None


def compare_runs(a: BenchRun, b: BenchRun, a_label: str = "a", b_label: str = "b") -> Comparison:
    """Every benchmark of either run, in a's order then b's extras, with b / a and a verdict where both have it."""
    names = [r.name for r in a.results] + [r.name for r in b.results if a.result(r.name) is None]
    rows = []
    for name in names:
        left, right = a.result(name), b.result(name)
        either = left or right
        assert either is not None
        note = _notes(left, right)
        if left and right and left.unit != right.unit:
            note = f"units differ: {left.unit} vs {right.unit}"
            right = None
        rows.append(Row(name, either.metric, either.unit, left.value if left else None,
                        right.value if right else None, note, _interval(left), _interval(right),
                        noisy=any(result.noisy for result in (left, right) if result)))
    return Comparison(a_label, b_label, a.device, b.device, rows)
