"""Judging trials: is a configuration safe against the baseline, how much faster is it, and which is best.

Every trial trains on the same samples in the same order, then measures its loss on the same fixed probe
batches; a trial whose probe loss drifts from the baseline's beyond ``DRIFT_TOLERANCE`` is unsafe and never
chosen, and so is one whose evaluation metric (when the workload has an ``evaluate`` function) moves the bad
way by more than ``METRIC_TOLERANCE``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpufly.tune.trial import TrialResult

DRIFT_TOLERANCE = 0.02
"""Largest relative gap between a trial's probe loss and the baseline's, after the same training samples."""
METRIC_TOLERANCE = 0.01
"""Largest relative move of the evaluation metric the bad way (down for an accuracy, up for a loss)."""
MIN_GAIN = 1.03
"""A configuration must be at least this much faster than the baseline to be chosen over it (a smaller gain is
within the noise of a short trial)."""


def loss_drift(mine: float | None, baseline: float | None) -> float | None:
    """Relative difference of the probe loss from the baseline's; inf for a non-finite loss.

    >>> round(loss_drift(0.52, 0.5), 6), loss_drift(float("nan"), 0.5), loss_drift(None, 0.5)
    (0.04, inf, None)
    """
    if mine is None or baseline is None:
        return None
    if not math.isfinite(mine) or not math.isfinite(baseline):
        return float("inf")
    return abs(mine - baseline) / max(abs(baseline), 1e-8)


def metric_drop(mine: float | None, baseline: float | None, higher_is_better: bool = True) -> float | None:
    """Relative move of the evaluation metric the bad way (positive: worse); inf for a non-finite metric.

    >>> round(metric_drop(0.88, 0.9), 4), metric_drop(0.5, 0.4, higher_is_better=False) > 0, metric_drop(None, 0.9)
    (0.0222, True, None)
    """
    if mine is None or baseline is None:
        return None
    if not math.isfinite(mine) or not math.isfinite(baseline):
        return float("inf")
    worse = baseline - mine if higher_is_better else mine - baseline
    return worse / max(abs(baseline), 1e-8)


def judge(result: TrialResult, baseline: TrialResult | None, tolerance: float = DRIFT_TOLERANCE,
          metric_tolerance: float = METRIC_TOLERANCE) -> TrialResult:
    """Set the speedup, drift, metric drop and verdict of a trial against the baseline (in place); with no
    baseline, the trial is the baseline. Unsafe when the probe loss drifts beyond ``tolerance`` or the metric
    drops beyond ``metric_tolerance``."""
    if baseline is None:
        return _as_baseline(result)
    if result.usable:
        result.loss_drift = loss_drift(result.eval_loss, baseline.eval_loss)
        result.metric_drop = metric_drop(result.eval_metric, baseline.eval_metric, baseline.higher_is_better)
        if (result.loss_drift is not None and result.loss_drift > tolerance) or (
                result.metric_drop is not None and result.metric_drop > metric_tolerance):
            result.status = "unsafe"
    if result.throughput and baseline.throughput:
        result.speedup = result.throughput / baseline.throughput
    return result


def _as_baseline(result: TrialResult) -> TrialResult:
    """The baseline is its own reference; one whose probe loss or metric is not finite cannot judge anything."""
    unjudgeable = [name for name, value in (("probe loss", result.eval_loss), ("metric", result.eval_metric))
                   if value is not None and not math.isfinite(value)]
    if result.usable and unjudgeable:
        result.status = "failed"
        result.error = (f"the baseline's {' and '.join(unjudgeable)} is not finite, so no trial can be judged "
                        "against it: the workload diverges as it stands")
        return result
    if result.usable:
        result.speedup, result.loss_drift = 1.0, 0.0
        result.metric_drop = None if result.eval_metric is None else 0.0
    return result


def best(results: Iterable[TrialResult], min_gain: float = MIN_GAIN) -> TrialResult | None:
    """The fastest safe trial at least ``min_gain`` times the baseline; else the baseline itself (speedup 1);
    None when not even the baseline ran. The search, the recsys stages, ``gpufly report`` and ``gpufly.apply``
    all choose with this.

    >>> base = TrialResult("baseline", {}, "ok", throughput=100.0, speedup=1.0)
    >>> noise = TrialResult("a", {"a": 1}, "ok", throughput=102.0, speedup=1.02)
    >>> fast = TrialResult("b", {"b": 1}, "unsafe", throughput=900.0, speedup=9.0)
    >>> best([base, noise, fast]).name, best([noise]), best([])
    ('baseline', None, None)
    """
    usable = [r for r in results if r.usable and r.speedup is not None]
    gains = [r for r in usable if (r.speedup or 0.0) >= min_gain]
    if gains:
        return max(gains, key=lambda r: r.speedup or 0.0)
    return next((r for r in usable if r.speedup == 1.0), None)
