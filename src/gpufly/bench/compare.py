"""Two bench runs side by side: each figure in both, the ratio of the second to the first, and whether the
difference is beyond noise: the two figures' intervals (each the ~95% interval of its median) do not overlap.

Non-overlapping 95% intervals is a strict test (two figures can differ at 95% with slightly overlapping
intervals), so "beyond noise" is said only of differences that are surely real; a difference inside the
intervals is "within noise", never called a speed-up. A figure its own run marked noisy decides nothing: its
interval did not settle, and what disturbed it (another process for the whole measurement) can shift a figure
without widening it, so the verdict is "noisy". Nor does a steady figure measured while other processes were busy
(just before or during it): a process holding one of two cores for the whole measurement leaves a narrow
interval around a low figure, so the verdict is "disturbed", and the note says on which side.

Two figures measured at different sizes (a GEMM ceiling is the best size of a sweep, and two runs can pick
different sizes) are "not comparable": a shape's speed is part of the figure, so their ratio says nothing about
the machine. And where a sweep ran, the sweep's own measurement at the chosen size beside the final figure shows
how far one measurement of that size can move from the next on this machine; a difference no larger than that
spread is "within the sweep's spread", even where the two intervals (each taken over seconds) do not overlap.
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
    unlike: str | None = None
    """Why the two figures cannot be compared (measured at different sizes), or None."""
    sweep_spread: float | None = None
    """The largest relative gap, in either run, between its figure and its sweep's measurement at the same size
    (0.25: 25%); None where neither figure came from a sweep."""
    busy: tuple[str, ...] = ()
    """The sides ("a", "b") whose figure was steady but measured while other processes were busy."""

    @property
    def verdict(self) -> str | None:
        """"faster" or "slower" (b against a, beyond noise), "within noise", "noisy" (either figure was marked so),
        "not comparable" (measured at different sizes), "disturbed" (either figure was measured while other
        processes were busy, so neither a difference nor its absence is established), "within the sweep's spread"
        (no larger than the run-to-run spread the sweeps show, with or without intervals), "no interval" (a run
        saved before gpufly measured intervals), or None where one side is missing."""
        if self.a is None or self.b is None:
            return None
        if self.noisy:
            return "noisy"
        if self.unlike is not None:
            return "not comparable"
        if self.busy:
            return "disturbed"
        if self.within_spread:
            return "within the sweep's spread"
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
    def within_spread(self) -> bool:
        """Whether b and a differ by no more than the sweeps' run-to-run spread."""
        if self.sweep_spread is None or not self.a or not self.b or self.a * self.b <= 0:
            return False
        return max(self.a, self.b) / min(self.a, self.b) <= 1 + self.sweep_spread

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        """The range of ``b_speedup`` the two intervals allow: b_low / a_high .. b_high / a_low for a rate (for a
        latency, a_low / b_high .. a_high / b_low); None without both intervals."""
        if self.a_interval is None or self.b_interval is None:
            return None
        (a_low, a_high), (b_low, b_high) = self.a_interval, self.b_interval
        if min(a_low, b_low) <= 0:
            return None
        if self.higher_is_better:
            return b_low / a_high, b_high / a_low
        return a_low / b_high, a_high / b_low

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
                "b_interval": list(self.b_interval) if self.b_interval else None,
                "b_speedup_range": list(self.speedup_range) if self.speedup_range else None,
                "sweep_spread": self.sweep_spread, "busy": list(self.busy), "verdict": self.verdict,
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


def _best_size(result: BenchResult) -> int | None:
    """The size a swept figure was measured at: its sweep's best point (bench/run.py keeps that size)."""
    points = [p for p in result.params.get("sweep") or [] if isinstance(p, dict)
              and isinstance(p.get("size"), int) and isinstance(p.get("value"), int | float)]
    return max(points, key=lambda p: p["value"])["size"] if points else None


def _sweep_value(result: BenchResult) -> float | None:
    """What the sweep measured at the size the figure was measured at, or None without a sweep."""
    size = _best_size(result)
    return next((float(p["value"]) for p in result.params.get("sweep") or []
                 if isinstance(p, dict) and p.get("size") == size), None) if size is not None else None


def _spread(*results: BenchResult) -> float | None:
    """The largest relative gap between a figure and its own sweep at that size, over the given results."""
    gaps = []
    for result in results:
        swept = _sweep_value(result)
        if swept and swept > 0 and result.value > 0:
            gaps.append(max(swept, result.value) / min(swept, result.value) - 1)
    return max(gaps) if gaps else None


def _unlike(a: BenchResult, b: BenchResult) -> str | None:
    """Why two figures were measured at different sizes and so cannot be compared, or None."""
    a_size, b_size = _best_size(a), _best_size(b)
    if a_size is not None and b_size is not None and a_size != b_size:
        return f"not comparable: best sizes differ ({a_size} vs {b_size})"
    differing = [f"{key} {a.params.get(key)} vs {b.params.get(key)}" for key in ("shape", "dtype")
                 if a.params.get(key) != b.params.get(key)]
    return "not comparable: sizes differ: " + ", ".join(differing) if differing else None


def _interval(result: BenchResult | None) -> tuple[float, float] | None:
    if result is None or result.value_low is None or result.value_high is None:
        return None
    return result.value_low, result.value_high


def _busy(left: BenchResult, right: BenchResult) -> tuple[str, ...]:
    """The sides whose steady (not noisy) figure was measured while other processes were busy."""
    return tuple(side for side, result in (("a", left), ("b", right)) if not result.noisy and result.busy_processes)


def _notes(left: BenchResult | None, right: BenchResult | None) -> str | None:
    if not (left and right):
        return "only in a" if left else "only in b"
    noisy = [side for side, result in (("a", left), ("b", right)) if result.noisy]
    busy = _busy(left, right)
    spread = _spread(left, right)
    within = (spread is not None and left.value > 0 and right.value > 0
              and max(left.value, right.value) / min(left.value, right.value) <= 1 + spread)
    parts = [_unlike(left, right),
             f"within the sweep's spread: a sweep and its figure at the same size differ by up to {spread:.0%}"
             if within and spread is not None and _unlike(left, right) is None and not noisy and not busy else None,
             f"noisy in {' and '.join(noisy)}" if noisy else None,
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
                        noisy=any(result.noisy for result in (left, right) if result),
                        unlike=_unlike(left, right) if left and right else None,
                        sweep_spread=_spread(left, right) if left and right else None,
                        busy=_busy(left, right) if left and right else ()))
    return Comparison(a_label, b_label, a.device, b.device, rows)
