"""How sure the tuner is of a speedup: the noise floor of the baseline and the interval of a ratio of throughputs.

A run's throughput moves between two runs of the same configuration (another process, a clock that moved, the
allocator). The tuner measures that: the baseline runs again and again during the search, and the spread of its
throughputs (the standard deviation of their logarithms) is the run's *noise floor*. A speedup is a ratio of two
throughputs, each as noisy as the baseline, so one pair of runs has a log-ratio standard deviation of
``sqrt(2)`` times the floor; several A/B rounds give several ratios, and a Student t interval of their mean
logarithm (few rounds: t, not a normal quantile, whose interval would be too narrow) gives the speedup's interval.
Logarithms, since a ratio's noise is multiplicative: 0.5x and 2x are equally far from 1x.

Pure arithmetic on floats: no clock, no torch, tested with numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
"""The two-sided level of every interval the tuner prints."""
T_QUANTILES = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
               10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
"""Student t's 97.5% quantile by degrees of freedom (any statistics table; e.g.
https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm): the half-width of a 95% interval in
standard errors. Between rows the next smaller degrees of freedom is taken (a wider interval); past 30, 1.96."""


def t_quantile(degrees: int) -> float:
    """Student t's 97.5% quantile for ``degrees`` of freedom, rounded towards the wider interval.

    >>> t_quantile(3), t_quantile(11), t_quantile(100)
    (3.182, 2.228, 1.96)
    """
    if degrees < 1:
        raise ValueError("an interval needs at least two values")
    if degrees > 30:
        return 1.96
    return T_QUANTILES[max(d for d in T_QUANTILES if d <= degrees)]


def noise_floor(throughputs: Sequence[float]) -> float | None:
    """The relative spread of one configuration's throughputs across the run: the standard deviation of their
    logarithms (0.05 is about 5% from run to run); None with fewer than two.

    >>> round(noise_floor([100.0, 110.0, 90.0, 100.0]), 3), noise_floor([100.0])
    (0.082, None)
    """
    logs = [math.log(t) for t in throughputs if t > 0]
    if len(logs) < 2:
        return None
    return statistics.stdev(logs)


@dataclass(frozen=True)
class Interval:
    """A speedup (the geometric mean of per-round ratios) and its 95% interval."""

    estimate: float
    low: float
    high: float

    def clears(self, level: float = 1.0) -> bool:
        """Whether the whole interval lies above ``level`` (1: faster than the baseline beyond the noise)."""
        return self.low > level

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def ratio_interval(ratios: Sequence[float], floor: float | None, floor_runs: int = 3) -> Interval | None:
    """The interval of a speedup measured as ``ratios`` (each a candidate's throughput over the baseline's beside
    it). With two ratios or more, a t interval of their mean log; with one, the noise floor stands in for their
    spread (a pair of runs, each as noisy as the baseline: ``sqrt(2)`` times the floor, at the t quantile of the
    floor's own degrees of freedom: ``floor_runs`` baseline runs, one fewer). None without ratios, or with one
    ratio and no floor.

    >>> i = ratio_interval([1.30, 1.25, 1.35, 1.28], None)
    >>> round(i.estimate, 3), round(i.low, 3), round(i.high, 3)
    (1.294, 1.23, 1.363)
    >>> i = ratio_interval([1.3], 0.05)
    >>> round(i.low, 3), round(i.high, 3)
    (0.959, 1.762)
    """
    logs = [math.log(r) for r in ratios if r > 0]
    if not logs:
        return None
    centre = statistics.fmean(logs)
    if len(logs) >= 2:
        half = t_quantile(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    elif floor is not None and floor_runs >= 2:
        half = t_quantile(floor_runs - 1) * math.sqrt(2) * floor
    else:
        return None
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half))


def interpolate(before: tuple[int, float], after: tuple[int, float] | None, at: int) -> float:
    """The baseline's throughput at position ``at`` of the run, on the line between its measurements just before
    and just after: a machine that slows down (or speeds up) over the run moves both alike, so a trial is
    compared with what the baseline gave at the same moment, whatever its place in the order.

    >>> interpolate((0, 100.0), (4, 80.0), 1), interpolate((0, 100.0), None, 3)
    (95.0, 100.0)
    """
    if after is None or after[0] == before[0]:
        return before[1]
    share = (at - before[0]) / (after[0] - before[0])
    return before[1] + share * (after[1] - before[1])


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean of the positive ``values`` (None without one): the mean of throughputs whose ratio is the
    geometric mean of their pairwise ratios, so a speedup over several A/B pairs is one throughput over another.

    >>> round(geometric_mean([100.0, 400.0]), 6), geometric_mean([])
    (200.0, None)
    """
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(statistics.fmean(logs)) if logs else None
