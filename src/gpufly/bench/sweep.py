"""A ceiling is the best rate over a sweep of sizes, as mamf-finder finds it, not one size timed once.

mamf-finder (https://github.com/stas00/ml-engineering/tree/master/compute/accelerator/benchmarks) sweeps M, N and
K over a range, times each shape with repeats and reports the best median: a matmul library's speed depends on
the shape (tiles, cache, threads), so one size understates the machine by whatever that size loses. gpufly sweeps
square sizes (M = N = K) in a range, each timed with a few repeats, stops before a size whose single call would
take too long, and keeps the size with the best median. That size is then measured afresh with the full repeats
(bench/run.py), so the figure reported is not the luckiest of several noisy medians.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpufly.bench.benchmark import Kernel
from gpufly.bench.timing import Timing

GROWTH_EXPONENT = 3.0
"""A square matmul's time grows as n**3: how the next size's call time is predicted from this one's."""


@dataclass(frozen=True)
class SweepPoint:
    """One size of the sweep: its median seconds per call and the rate that gives."""

    size: int
    median_s: float
    value: float

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "median_s": self.median_s, "value": self.value}


def sweep_sizes(build: Callable[[int], Kernel], sizes: Sequence[int], time_kernel: Callable[[Kernel], Timing], *,
                max_call_s: float) -> tuple[Kernel, list[SweepPoint]]:
    """The kernel at the size with the highest rate (work / median), and every size's point, smallest first.

    The smallest size is always timed; a larger one is skipped, with all after it, once the last call time
    scaled by (next / size)**3 exceeds ``max_call_s`` (bf16 on a CPU without bf16 units runs a hundred times
    slower than fp32, and a fixed list of sizes would take minutes there).
    """
    if not sizes:
        raise ValueError("no sizes to sweep")
    ordered = sorted(sizes)
    points: list[SweepPoint] = []
    best: tuple[Kernel, float] | None = None
    for size, following in zip(ordered, (*ordered[1:], None), strict=True):
        kernel = build(size)
        timing = time_kernel(kernel)
        point = SweepPoint(size, timing.median_s, kernel.work / timing.median_s if timing.median_s > 0 else 0.0)
        points.append(point)
        if best is None or point.value > best[1]:
            best = kernel, point.value
        if following is None or timing.median_s * (following / size) ** GROWTH_EXPONENT > max_call_s:
            break
    assert best is not None
    return best[0], points
