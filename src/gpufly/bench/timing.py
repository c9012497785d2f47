"""The timing harness: warm up, synchronize around the clock, repeat, and report the median with its interval.

The clock and the synchronization are injected, so a test can drive ``measure`` with a fake clock and
a fake asynchronous kernel, and the CUDA path can pass ``torch.cuda.synchronize``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Clock = Callable[[], float]
Sync = Callable[[], object]


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one kernel: the median of ``repeats`` samples, how far they spread, and the interval
    that holds the true median with probability ``ci_level`` (order statistics: no assumption on the shape of
    the noise, which on a shared machine is anything but normal).

    Each sample times ``inner`` back-to-back calls and is divided by ``inner``, so a kernel far
    shorter than the clock's resolution still gets a true figure. ``warmup`` calls ran untimed first.
    The interval fields are None in runs saved before gpufly computed them.
    """

    median_s: float
    min_s: float
    max_s: float
    p10_s: float
    p90_s: float
    repeats: int
    warmup: int
    inner: int = 1
    samples_s: tuple[float, ...] = ()
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    ci_level: float | None = None

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: 0.05 means the middle 80% of samples lie within 5% of each other."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0

    @property
    def relative_width(self) -> float | None:
        """(high - low) / median of the median's interval: 0.1 means the median is known to within about 10%."""
        if self.ci_low_s is None or self.ci_high_s is None or self.median_s <= 0:
            return None
        return (self.ci_high_s - self.ci_low_s) / self.median_s

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples_s"] = list(self.samples_s)
        return data


CI_LEVEL = 0.95
"""The confidence the median's interval aims for; with few samples the best reachable is less (5 samples: 93.75%)."""


def median_ranks(count: int, level: float = CI_LEVEL) -> tuple[int, int, float]:
    """The 1-based ranks (j, count + 1 - j) of the sorted samples that bracket the median with at least ``level``
    confidence, and the confidence they give: the number of samples below the true median is Binomial(count, 1/2),
    so [X(j), X(count+1-j)] misses it with probability 2 * P(B <= j - 1). Where even the extremes fall short of
    ``level`` (fewer than 6 samples), min and max with their own confidence.

    >>> median_ranks(10)
    (2, 9, 0.978515625)
    >>> median_ranks(5)
    (1, 5, 0.9375)
    """
    def confidence(rank: int) -> float:
        below = sum(math.comb(count, i) for i in range(rank)) / 2 ** count
        return 1 - 2 * below

    rank = 1
    while rank + 1 <= (count + 1) // 2 and confidence(rank + 1) >= level:
        rank += 1
    return rank, count + 1 - rank, confidence(rank)


def summarize(samples_s: Sequence[float], *, warmup: int, inner: int = 1) -> Timing:
    """A Timing from per-call samples (seconds), warm-up already left out.

    >>> summarize([0.3, 0.1, 0.2], warmup=1).median_s
    0.2
    """
    if not samples_s:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples_s)
    if len(ordered) > 1:
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = ordered[0]
    low, high, level = median_ranks(len(ordered))
    return Timing(median_s=statistics.median(ordered), min_s=ordered[0], max_s=ordered[-1], p10_s=p10, p90_s=p90,
                  repeats=len(ordered), warmup=warmup, inner=inner, samples_s=tuple(samples_s),
                  ci_low_s=ordered[low - 1], ci_high_s=ordered[high - 1], ci_level=level)


def _no_sync() -> None:
    return None


def measure(fn: Callable[[], object], *, warmup: int = 3, repeats: int = 10, inner: int = 1,
            sync: Sync | None = None, clock: Clock = time.perf_counter) -> Timing:
    """Time ``fn``: ``warmup`` untimed calls, then ``repeats`` samples of ``inner`` calls each.

    ``sync`` waits for queued device work; it runs before each clock read, so a sample covers the
    work its calls queued and nothing that came before it.
    """
    if repeats < 1 or inner < 1 or warmup < 0:
        raise ValueError("repeats and inner must be at least 1, warmup at least 0")
    sync = sync or _no_sync
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        for _ in range(inner):
            fn()
        sync()
        samples.append((clock() - start) / inner)
    return summarize(samples, warmup=warmup, inner=inner)


def calls_per_sample(fn: Callable[[], object], *, target_s: float, limit: int = 100_000, sync: Sync | None = None,
                     clock: Clock = time.perf_counter) -> int:
    """How many back-to-back calls of ``fn`` fill about ``target_s``: one warm call, then one timed call.

    >>> ticks = iter([0.0, 0.001])
    >>> calls_per_sample(lambda: None, target_s=0.01, clock=lambda: next(ticks))
    10
    """
    sync = sync or _no_sync
    fn()
    sync()
    start = clock()
    fn()
    sync()
    once = clock() - start
    if once <= 0:
        return limit
    return max(1, min(limit, math.ceil(target_s / once - 1e-9)))
