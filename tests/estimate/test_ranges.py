"""The 80% range on every predicted number: from the fit rows' residuals, widened where the rows are thin or the
job is outside them, and saying so."""

from __future__ import annotations

import math

import pytest

from gpufly.estimate.advise import fit
from gpufly.estimate.job import Job
from gpufly.estimate.ranges import (
    FLOOR,
    MIN_ROWS,
    OUTSIDE_WIDENING,
    SMALL_GROUP_WIDENING,
    RangeTable,
    Residual,
    Where,
    band_for,
    bands_from,
    default_table,
    estimate,
    percentile,
)
from gpufly.models.resolve import load_model


def _residuals(engine: str, ratios: list[float], family: str = "Ampere", fmt: str = "16-bit",
               params_b: float = 8.0) -> list[Residual]:
    return [Residual("decode", engine, "1 GPU", family, fmt, params_b, math.log(r)) for r in ratios]


SPREAD = [0.7, 0.8, 0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.2, 1.3]
TABLE = RangeTable(tuple(bands_from(_residuals("llama.cpp", SPREAD) + _residuals("vllm", [1.0, 1.5]))))
INSIDE = Where("decode", "llama.cpp", 1, "Ampere", "16-bit", 8.0)


def test_a_band_is_the_10th_to_90th_percentile_of_the_log_ratios() -> None:
    low, high, basis = band_for(INSIDE, TABLE)
    logs = [math.log(r) for r in SPREAD]
    assert (low, high) == (pytest.approx(percentile(logs, 0.1)), pytest.approx(percentile(logs, 0.9)))
    assert basis.rows == len(SPREAD) and not basis.widened
    value = estimate(100.0, INSIDE, TABLE)
    assert value.low == pytest.approx(100 * math.exp(low)) and value.high == pytest.approx(100 * math.exp(high))
    assert value.coverage == 0.8 and value.contains(100.0)


def test_a_band_is_never_narrower_than_the_floor() -> None:
    tight = RangeTable(tuple(bands_from(_residuals("llama.cpp", [1.0] * 12))))
    low, high, _ = band_for(INSIDE, tight)
    assert (low, high) == (pytest.approx(-FLOOR), pytest.approx(FLOOR))


def test_a_small_group_borrows_the_metrics_band_widened_and_says_so() -> None:
    assert len([1.0, 1.5]) < MIN_ROWS
    _, high, basis = band_for(Where("decode", "vllm", 1, "Ampere", "16-bit", 8.0), TABLE)
    shared = TABLE.find("decode", "all", "1 GPU")
    assert shared is not None
    assert high == pytest.approx(shared.high * SMALL_GROUP_WIDENING)
    assert basis.widened == ("only 2 fit rows for vllm, 1 GPU",) and "all engines" in basis.group


@pytest.mark.parametrize(("family", "fmt", "params_b", "said"), [
    ("Hopper", "16-bit", 8.0, "no fit rows on Hopper GPUs"),
    ("Ampere", "Q4_K_M", 8.0, "no fit rows at Q4_K_M"),
    ("Ampere", "16-bit", 70.0, "no fit rows near 70.0 B params"),
])
def test_outside_the_calibrated_region_the_band_widens_and_says_why(family, fmt, params_b, said) -> None:
    inside_low, inside_high, _ = band_for(INSIDE, TABLE)
    low, high, basis = band_for(Where("decode", "llama.cpp", 1, family, fmt, params_b), TABLE)
    assert (low, high) == (pytest.approx(inside_low * OUTSIDE_WIDENING), pytest.approx(inside_high * OUTSIDE_WIDENING))
    assert any(reason.startswith(said) for reason in basis.widened)
    assert "widened: " + said in basis.text()


def test_a_metric_without_rows_gets_a_factor_of_two_and_says_so() -> None:
    value = estimate(10.0, Where("training memory", "training", 1, "Ampere", "16-bit", 8.0), TABLE)
    assert (value.low, value.high) == (pytest.approx(5.0), pytest.approx(20.0))
    assert value.basis.rows == 0 and "no published rows" in value.basis.text()


def test_a_time_takes_the_rate_band_turned_over() -> None:
    rate = estimate(1000.0, INSIDE, TABLE)
    seconds = estimate(2.0, INSIDE, TABLE, inverse=True)
    assert seconds.low == pytest.approx(2000 / rate.high) and seconds.high == pytest.approx(2000 / rate.low)


def test_the_shipped_table_has_bands_for_the_metrics_with_rows() -> None:
    table = default_table()
    for metric in ("decode", "prefill", "inference memory", "training throughput"):
        bands = [b for b in table.bands if b.metric == metric and b.engine == "all"]
        assert sum(b.rows for b in bands) >= MIN_ROWS and all(b.low <= b.high for b in bands)


def test_every_number_fit_predicts_carries_a_range(catalog) -> None:
    verdict = fit(load_model("llama-3.1-8b"), catalog.get("a100-sxm4-80gb"), Job(context=4096))
    assert verdict.memory_range is not None
    assert verdict.memory_range.low < verdict.memory.total_bytes < verdict.memory_range.high
    assert set(verdict.speed_ranges) == {"decode_tok_s", "prefill_tok_s", "time_to_first_token_s"}
    decode = verdict.speed_ranges["decode_tok_s"]
    assert decode.value == verdict.speed.decode_tok_s and decode.low < decode.value < decode.high
    data = verdict.to_dict()
    assert data["speed_ranges"]["decode_tok_s"]["coverage"] == 0.8
    assert data["memory_range"]["basis"]["rows"] > 0


def test_a_job_that_does_not_fit_keeps_its_ranges_as_if_it_fit(catalog) -> None:
    verdict = fit(load_model("llama-3.1-70b"), catalog.get("rtx-4090"), Job(context=4096))
    data = verdict.to_dict()
    assert not verdict.fits and data["speed_ranges"] is None
    assert data["speed_ranges_if_it_fit"]["decode_tok_s"]["high"] > 0


def test_training_has_ranges_for_its_memory_and_speed(catalog) -> None:
    verdict = fit(load_model("qwen2.5-0.5b"), catalog.get("a100-sxm4-80gb"), Job(task="full", context=512))
    assert "train_tokens_s" in verdict.speed_ranges
    assert verdict.memory_range is not None and verdict.memory_range.basis.rows >= MIN_ROWS


def test_a_memory_group_too_small_on_one_gpu_borrows_the_several_gpu_band_widened_and_says_so() -> None:
    """Memory on one GPU with too few rows of its own: the several-GPU band, widened, is named. A speed does not
    borrow across GPU counts (its regime differs), and falls back to a factor of 2 instead."""
    several = [Residual(metric, "training", "multi-GPU", "Ampere", "16-bit", 8.0, math.log(r))
               for metric in ("training memory", "training throughput") for r in SPREAD]
    table = RangeTable(tuple(bands_from(several)))
    low, high, basis = band_for(Where("training memory", "training", 1, "Ampere", "16-bit", 8.0), table)
    assert basis.rows == len(SPREAD) and "multi-GPU" in basis.text() and high > low
    _, _, speed = band_for(Where("training throughput", "training", 1, "Ampere", "16-bit", 8.0), table)
    assert speed.rows == 0 and "factor of 2" in speed.text()


def test_a_mixture_of_experts_speed_is_outside_the_rows_and_gaps_widen_further(catalog) -> None:
    """No fit row is an MoE model: its speed says so; and a job with several gaps (family, format, size, MoE) is
    wider than one with one gap, but never past a factor of 3 either way beyond its band doubled."""
    import math

    from gpufly.estimate.job import Job
    from gpufly.estimate.ranges import WIDEST, band_for, where
    from gpufly.models.resolve import load_model

    moe, dense = load_model("deepseek-v3"), load_model("llama-3.1-8b")
    h200 = catalog.get("h200 sxm")
    job = Job(engine="vllm", gpus=8, quant="fp8")
    low, high, basis = band_for(where("decode", moe, h200, job))
    assert "no fit rows for mixture-of-experts models" in basis.widened
    dense_low, dense_high, dense_basis = band_for(where("decode", dense, catalog.get("a100 sxm4 80gb"),
                                                        Job(engine="vllm", gpus=2)))
    assert "no fit rows for mixture-of-experts models" not in dense_basis.widened
    assert high - low > 2 * (dense_high - dense_low)
    assert high <= max(WIDEST, 2 * dense_high) + 1e-9 and -low <= max(WIDEST, 2 * -dense_low) + 1e-9
    assert math.exp(high) < 4
