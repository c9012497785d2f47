"""Judging trials: is a configuration safe against the baseline, is it faster beyond the noise, and which wins.

Every trial trains on the same samples in the same order, then measures its loss on the same fixed probe
batches (and the workload's evaluation metric, when it has one). A trial whose probe loss moves from the
baseline's by more than ``DRIFT_TOLERANCE``, or whose metric moves the bad way by more than
``METRIC_TOLERANCE``, is unsafe. Whether that test means anything at the run's step count is measured, not
assumed: the baseline trains twice, with two seeds, and a measure whose two seeds already end further apart than
the tolerance over ``SEED_MARGIN`` (a loss that still jumps from step to step, a few steps into a chaotic start)
is not used; when neither is usable the run cannot judge accuracy and says so, with the step count. So a knob
that costs accuracy is rejected at every step count the tuner accepts, instead of its verdict flipping with
``--steps``.

Speed is decided by ``decide``: the baseline runs again and again during the search (its spread is the noise
floor), the fastest candidates are run against it in A/B rounds, and a configuration wins only when its
speedup's interval clears 1x and its estimate reaches ``MIN_GAIN``. A machine too noisy to tell, or two
candidates the rounds cannot tell apart, give no winner and say why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufly.i18n import gettext as _
from gpufly.tune.trial import TrialResult

DRIFT_TOLERANCE = 0.02
"""Largest relative gap between a trial's probe loss and the baseline's, after the same training samples."""
METRIC_TOLERANCE = 0.01
"""Largest relative move of the evaluation metric the bad way (down for an accuracy, up for a loss)."""
SEED_MARGIN = 2.0
"""A measure judges a tolerance only when two seeds of the baseline agree within the tolerance over this: the
seed's own noise is then at most half of what a knob may cost, so a knob that costs twice the tolerance is
rejected whatever the seed noise does to it."""
MIN_GAIN = 1.03
"""A configuration must be at least this much faster than the baseline to be chosen over it (a smaller gain is
not worth a change, even when measured)."""
MAX_NOISE_FLOOR = 0.10
"""The largest run-to-run spread of the baseline's throughput (standard deviation of the logs) the tuner decides
under; on a machine noisier than that, an A/B round cannot separate a 10% gain from the noise in a few rounds."""


def judgeable(seed_drift: float | None, tolerance: float) -> bool:
    """Whether a measure whose two seeds moved by ``seed_drift`` can judge ``tolerance`` (None: not measured, and
    judged as before the tuner measured it).

    >>> judgeable(0.005, 0.02), judgeable(0.3, 0.02), judgeable(None, 0.02)
    (True, False, True)
    """
    return seed_drift is None or (math.isfinite(seed_drift) and seed_drift <= tolerance / SEED_MARGIN)


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
    drops beyond ``metric_tolerance``, each where two seeds of the baseline agree closely enough to tell."""
    if baseline is None:
        return _as_baseline(result)
    if result.usable:
        result.loss_drift = loss_drift(result.eval_loss, baseline.eval_loss)
        result.metric_drop = metric_drop(result.eval_metric, baseline.eval_metric, baseline.higher_is_better)
        drifted = (result.loss_drift is not None and result.loss_drift > tolerance
                   and judgeable(baseline.seed_loss_drift, tolerance))
        dropped = (result.metric_drop is not None and result.metric_drop > metric_tolerance
                   and judgeable(baseline.seed_metric_drift, metric_tolerance))
        if drifted or dropped:
            result.status = "unsafe"
            result.unsafe_because = ", ".join(
                ([_("metric dropped {drop:.1%}").format(drop=result.metric_drop)] if dropped else [])
                + ([_("probe loss drifted {drift:.1%}").format(drift=result.loss_drift)] if drifted else []))
        else:
            result.unjudged = seeds_apart(baseline)
    if result.throughput and baseline.throughput:
        result.speedup = result.throughput / baseline.throughput
        result.paired_throughput, result.paired_baseline = result.throughput, baseline.throughput
    return result


def _as_baseline(result: TrialResult) -> TrialResult:
    """The baseline is its own reference; one whose probe loss or metric is not finite cannot judge anything."""
    result.role = "baseline"
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


@dataclass(frozen=True)
class Decision:
    """What a run concluded: ``faster`` (a winner, confirmed), ``no gain`` (the baseline stays: nothing was
    confirmed faster), ``undecided`` (the rounds, or the accuracy test, cannot tell), ``too noisy`` (the
    machine's noise hides the differences) or ``failed`` (no baseline). ``winner`` is None unless the verdict is
    ``faster`` or ``no gain``."""

    verdict: str
    winner: TrialResult | None
    reason: str
    tie_break: str | None = None
    """Why this winner, when the A/B rounds could not rank it against others as confirmed: the second key."""

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "winner": None if self.winner is None else self.winner.name,
                "reason": self.reason, "tie_break": self.tie_break}


def decide(results: Iterable[TrialResult], min_gain: float = MIN_GAIN) -> Decision:
    """The run's conclusion from its results alone (so the search, ``gpufly report`` and ``gpufly.apply`` all
    conclude the same from the file). Results written before the tuner confirmed its winners (no result has the
    baseline's role) are judged as they were: the fastest safe point estimate past ``min_gain``."""
    results = list(results)
    baseline = next((r for r in results if r.role == "baseline"), None)
    if baseline is None:
        return _unconfirmed(results, min_gain)
    if not baseline.usable:
        return Decision("failed", None, f"the baseline did not run ({baseline.status}): nothing to compare against")
    accuracy = accuracy_unjudgeable(baseline)
    if accuracy is not None:
        return Decision("undecided", None, accuracy)
    floor = baseline.noise_floor
    if floor is None:
        return Decision("undecided", None, "the baseline ran once: no noise floor to judge a speedup against")
    if floor > MAX_NOISE_FLOOR:
        return Decision("too noisy", None,
                        _("the baseline's throughput varied {spread}: a noise floor (standard deviation of the log "
                          "throughput) of {floor:.1%}, over the {limit:.0%} limit; the machine is too noisy to tell a "
                          "gain from the noise: stop the other work on it, or tune on a quiet machine").format(
                              spread=spread_text(baseline), floor=floor, limit=MAX_NOISE_FLOOR))
    return _confirmed(results, baseline, min_gain)


def spread_text(baseline: TrialResult) -> str:
    """How far apart the baseline's runs were, in figures a reader can check: the lowest and highest throughput
    and their ratio.

    >>> spread_text(TrialResult("b", {}, "ok", throughputs=[4786.0, 33000.0, 33677.0, 4043.0]))
    'from 4,043 to 33,677 samples/s over 4 runs (8.33x apart)'
    """
    runs = [t for t in baseline.throughputs if t > 0]
    if not runs:
        return _("over no measured run")
    low, high = min(runs), max(runs)
    return _("from {low:,.0f} to {high:,.0f} {unit}/s over {count} runs ({ratio:.2f}x apart)").format(
        low=low, high=high, unit=baseline.unit, count=len(runs), ratio=high / low)


def seeds_apart(baseline: TrialResult) -> str | None:
    """Why a trial's accuracy cannot be judged against this baseline, in a few words (``seeds 10.1% apart``), or
    None when one measure (the probe loss, or the metric) is steady enough over two seeds to judge it: a trial
    that is not unsafe is then safe, else its accuracy is *unjudged*, never called safe.

    >>> base = TrialResult("b", {}, "ok", throughput=1.0, eval_loss=0.5, seed_loss_drift=0.101)
    >>> seeds_apart(base), seeds_apart(TrialResult("b", {}, "ok", eval_loss=0.5, seed_loss_drift=0.001))
    ('seeds 10.1% apart', None)
    """
    if accuracy_unjudgeable(baseline) is None:
        return None
    measures = [("probe loss", baseline.seed_loss_drift, baseline.eval_loss),
                ("metric", baseline.seed_metric_drift, baseline.eval_metric)]
    gaps = [(what, drift) for what, drift, value in measures if value is not None and drift is not None]
    if len(gaps) == 1:
        return f"seeds {gaps[0][1]:.1%} apart"
    return "seeds " + ", ".join(f"{what} {drift:.1%}" for what, drift in gaps) + " apart"


def accuracy_unjudgeable(baseline: TrialResult) -> str | None:
    """Why two seeds of the baseline leave nothing to judge accuracy with, or None when one measure (the probe
    loss, or the metric) is steady enough."""
    measures = [("probe loss", baseline.seed_loss_drift, DRIFT_TOLERANCE, baseline.eval_loss),
                ("metric", baseline.seed_metric_drift, METRIC_TOLERANCE, baseline.eval_metric)]
    present = [m for m in measures if m[3] is not None]
    if not present or any(judgeable(drift, tolerance) for _what, drift, tolerance, _value in present):
        return None
    moved = "; ".join(f"{what} {drift:.1%} (needs {tolerance / SEED_MARGIN:.1%} or less)"
                      for what, drift, tolerance, _value in present if drift is not None)
    return (f"too few steps to judge accuracy: two seeds of the baseline end apart by {moved}; give --steps "
            "more, or give the workload an evaluate() metric that settles sooner")


def _confirmed(results: list[TrialResult], baseline: TrialResult, min_gain: float) -> Decision:
    """The winner among the trials confirmed by A/B rounds: its interval clears 1x and its estimate reaches
    ``min_gain``; of winners the rounds cannot tell apart (overlapping intervals), the one with the fewest knobs,
    and no winner when several tie on that too."""
    confirmed = [r for r in results if r.role == "trial" and r.usable and r.rounds >= 2 and r.speedup is not None
                 and r.speedup_low is not None and r.speedup_high is not None]
    winners = [r for r in confirmed if (r.speedup_low or 0.0) > 1.0 and (r.speedup or 0.0) >= min_gain]
    if not winners:
        maybe = [r for r in confirmed if (r.speedup_high or 0.0) >= min_gain]
        if maybe:
            shown = "; ".join(f"{r.name} {_interval(r)}" for r in maybe)
            return Decision("undecided", None, f"not confirmed: {shown} after {maybe[0].rounds} A/B rounds each "
                                               "(the interval reaches both sides of the gain): run it again, or "
                                               "with --steps more")
        return Decision("no gain", baseline, "no configuration was confirmed faster than the baseline beyond the "
                                             f"noise (floor {baseline.noise_floor or 0.0:.1%})")
    top = max(winners, key=lambda r: r.speedup or 0.0)
    alike = [r for r in winners if (r.speedup_high or 0.0) >= (top.speedup_low or 0.0)]
    fewest = min(len(r.knobs) for r in alike)
    simplest = [r for r in alike if len(r.knobs) == fewest]
    if len(simplest) > 1:
        return _closest_to_the_baseline(simplest)
    chosen = simplest[0]
    why = f"{chosen.name}: {_interval(chosen)} the baseline over {chosen.rounds} A/B rounds"
    if chosen is not top:
        why += f" (as fast as {top.name} {_interval(top)} within the noise, with fewer knobs)"
    return Decision("faster", chosen, why)


def _closest_to_the_baseline(tied: list[TrialResult]) -> Decision:
    """Winners the A/B rounds cannot rank, with as many knobs each: every one is confirmed faster than the
    baseline, so the run still names one, by a stated second key: the one whose model ends closest to the
    baseline's (the smallest probe-loss drift), as the safer change. When that cannot separate them either (no drift
    measured, or equal), no winner is named."""
    listed = "; ".join(f"{r.name} {_interval(r)}" for r in tied)
    drifts = [abs(r.loss_drift) if r.loss_drift is not None and math.isfinite(r.loss_drift) else None for r in tied]
    if any(d is None for d in drifts) or len(set(drifts)) < len(drifts):
        return Decision("undecided", None, f"the A/B rounds cannot tell these apart: {listed}")
    chosen = tied[drifts.index(min(d for d in drifts if d is not None))]
    tie_break = (f"the rounds cannot rank it against the others ({listed}), so the one whose probe loss ends "
                 f"closest to the baseline's is named ({abs(chosen.loss_drift or 0.0):.2%} drift)")
    return Decision("faster", chosen,
                    f"{chosen.name}: {_interval(chosen)} the baseline over {chosen.rounds} A/B rounds; {tie_break}",
                    tie_break)


def _interval(result: TrialResult) -> str:
    return f"{result.speedup or 0.0:.2f}x [{result.speedup_low or 0.0:.2f}-{result.speedup_high or 0.0:.2f}]"


def _unconfirmed(results: list[TrialResult], min_gain: float) -> Decision:
    """Results without a baseline role (an older gpufly): the fastest safe point estimate at least ``min_gain``,
    else the baseline (speedup 1)."""
    usable = [r for r in results if r.usable and r.speedup is not None]
    gains = [r for r in usable if (r.speedup or 0.0) >= min_gain]
    if gains:
        return Decision("faster", max(gains, key=lambda r: r.speedup or 0.0), "unconfirmed: one run per trial")
    base = next((r for r in usable if r.speedup == 1.0), None)
    if base is None:
        return Decision("failed", None, "the baseline did not run: nothing to compare against")
    return Decision("no gain", base, "nothing measured faster (one run per trial)")


def best(results: Iterable[TrialResult], min_gain: float = MIN_GAIN) -> TrialResult | None:
    """The run's winner (``decide``): the confirmed fastest safe trial, the baseline itself when nothing was
    confirmed faster, and None when not even the baseline ran or the run could not decide. The search, the
    recsys stages, ``gpufly report`` and ``gpufly.apply`` all choose with this.

    >>> base = TrialResult("baseline", {}, "ok", throughput=100.0, speedup=1.0)
    >>> noise = TrialResult("a", {"a": 1}, "ok", throughput=102.0, speedup=1.02)
    >>> fast = TrialResult("b", {"b": 1}, "unsafe", throughput=900.0, speedup=9.0)
    >>> best([base, noise, fast]).name, best([noise]), best([])
    ('baseline', None, None)
    """
    return decide(results, min_gain).winner
