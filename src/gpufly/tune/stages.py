"""The recommender case study as tuner trials: data, then compute, then communication, stage by stage.

`gpufly tune recsys` and benchmarks/tune_speedups.py both run these stages. Each stage is a real trial
of the built-in ``recsys`` workload through the same worker as any tuner trial (its own process, a
timeout, the median per-step throughput, the same training samples), so the table measures the
pipeline a user would run, not a special benchmark loop. The stages are cumulative: each adds its
knobs to the last stage that stayed safe, so a change that costs accuracy (the bigger batch, here) is
shown, rejected and not carried into the stages after it.

Cost-performance is samples per dollar: the throughput over an hour divided by the machine's price
per hour, given, or on a GPU the catalog prices, its launch price spread over three years of hours.

Torch-free at import: the trials import torch in their own processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufly.tune.engine import DRIFT_TOLERANCE, METRIC_TOLERANCE, ResultsLog, Trial, TrialResult, judge

WORKLOAD = "recsys"


@dataclass(frozen=True)
class Stage:
    label: str
    stage: str
    """baseline, data, compute or communication."""
    adds: dict[str, Any]
    """The knobs this stage adds to the last safe stage's."""


def stages(processes: int = 2) -> list[Stage]:
    """The case study's stages, in order; the last runs DDP over ``processes`` processes."""
    return [
        Stage("naive: per-sample dataset, dense Adam, batch 256", "baseline", {}),
        Stage("+ batched (vectorized) collation", "data", {"batched": True}),
        Stage("+ sparse embedding gradients, SparseAdam", "compute", {"sparse": True}),
        Stage("+ fused embedding bag (one table)", "compute", {"fused": True}),
        Stage("+ batch 2048 (lr x4)", "compute", {"batch_size": 2048, "lr": 4e-3}),
        Stage("+ 1 loader worker, persistent", "data", {"num_workers": 1}),
        Stage(f"+ DDP over {processes} processes", "communication", {"ddp": processes}),
    ]


@dataclass
class StageResult:
    stage: Stage
    result: TrialResult
    samples_per_dollar: float | None = None
    """Samples one dollar of machine time buys at this stage's throughput; None without a price."""


OWNED_HOURS = 3 * 365 * 24
"""A bought GPU's launch price spread over three years of hours: the ownership cost an hour, when none is given."""


def samples_per_dollar(throughput: float | None, price_per_hour: float | None) -> float | None:
    """Samples per dollar of machine time: an hour's samples over the hour's price.

    >>> samples_per_dollar(1000.0, 2.0), samples_per_dollar(1000.0, None)
    (1800000.0, None)
    """
    if throughput is None or not price_per_hour or price_per_hour <= 0:
        return None
    return throughput * 3600 / price_per_hour


def catalog_price_per_hour(device_name: str, total_memory: int) -> tuple[float, str] | None:
    """On a GPU the catalog knows, (its launch price per owned hour, where that came from); None when the
    catalog has no price for it (data-centre cards have no published price)."""
    from gpufly.catalog import default_catalog

    spec = default_catalog().match_device(device_name, total_memory)
    if spec is None or spec.launch_price_usd is None:
        return None
    price = spec.launch_price_usd / OWNED_HOURS
    return price, (f"{spec.name} launch price ${spec.launch_price_usd:,.0f} over {OWNED_HOURS:,} hours = "
                   f"${price:.3f}/h (catalog; --price-per-hour overrides)")


def run_stages(runner: Callable[[Trial], TrialResult], log: ResultsLog, identity: dict[str, Any] | None = None,
               processes: int = 2, price_per_hour: float | None = None,
               on_result: Callable[[StageResult], None] | None = None, tolerance: float = DRIFT_TOLERANCE,
               metric_tolerance: float = METRIC_TOLERANCE) -> list[StageResult]:
    """Every stage as a trial, judged against the naive baseline (probe-loss drift and held-out loss), each
    appended to ``log`` as it ends; trials already in the log (``--resume``) are not run again."""
    if identity is not None:
        log.start(identity)
    done = log.done()
    baseline: TrialResult | None = None
    carried: dict[str, Any] = {}
    out = []
    for stage in stages(processes):
        trial = Trial(stage.label, {**carried, **stage.adds})
        result = done.get(trial.key)
        if result is None:
            result = judge(runner(trial), baseline, tolerance, metric_tolerance)
            log.append(result)
        entry = StageResult(stage, result, samples_per_dollar(result.throughput, price_per_hour))
        out.append(entry)
        if on_result is not None:
            on_result(entry)
        if baseline is None:
            if not result.usable:
                break  # the naive pipeline failed: nothing to compare against
            baseline = result
        if result.usable:
            carried = dict(trial.knobs)
    return out


def best_stage(results: list[StageResult]) -> StageResult | None:
    """The fastest stage that stayed safe."""
    usable = [r for r in results if r.result.usable and r.result.speedup is not None]
    return max(usable, key=lambda r: r.result.speedup or 0.0) if usable else None


def row(entry: StageResult) -> dict[str, Any]:
    """One stage as the CLI's JSON and the HTML page take it (the tuner's row, plus the stage's fields)."""
    r = entry.result
    return {"stage": entry.stage.stage, "configuration": r.name, "knobs": r.knobs, "status": r.status,
            "throughput": r.throughput, "mean_throughput": r.mean_throughput, "unit": r.unit, "speedup": r.speedup,
            "held_out_loss": r.eval_metric, "loss_drift": r.loss_drift, "metric_drop": r.metric_drop,
            "world_size": r.world_size, "samples_per_dollar": entry.samples_per_dollar,
            "peak_memory_bytes": r.peak_memory_bytes, "error": r.error, "seconds": round(r.seconds, 2)}
