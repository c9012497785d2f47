"""The report's advisor rows: a speed only where the model fits; on a machine without a GPU, what to buy."""

from __future__ import annotations

from gpufly.report.models_fit import JobKind, buy_rows, error_span, model_fit_rows


def test_rows_carry_a_speed_only_where_the_model_fits(catalog) -> None:
    rows = model_fit_rows([(catalog.get("rtx 4090"), 1)], models=("llama-3.2-1b", "llama-3.1-70b"))
    assert {(row.model, row.job) for row in rows} >= {
        ("Llama 3.2 1B", "infer bf16"), ("Llama 3.2 1B", "infer Q4_K_M"), ("Llama 3.1 70B", "infer bf16"),
        ("Llama 3.1 70B", "QLoRA"), ("Llama 3.1 70B", "full training")}
    for row in rows:
        assert (row.speed is not None) == row.fits, row
    assert any(not row.fits for row in rows) and any(row.fits for row in rows)


def test_each_row_says_how_to_see_it_in_full(catalog) -> None:
    rows = model_fit_rows([(catalog.get("rtx 4090"), 2)], models=("llama-3.1-8b",),
                          kinds=(JobKind("qlora", "bf16", None, "QLoRA"),))
    assert [row.command for row in rows] == [
        "gpufly fit llama-3.1-8b --gpu 2xrtx-4090 --task qlora --quant bf16 --ctx 4096"]


def test_an_unknown_model_name_is_left_out_not_fatal(catalog) -> None:
    rows = model_fit_rows([(catalog.get("rtx 4090"), 1)], models=("no-such-model", "llama-3.2-1b"))
    assert {row.model for row in rows} == {"Llama 3.2 1B"}


def test_gpus_to_buy_stay_within_the_budget(catalog) -> None:
    kinds = (JobKind("infer", "q4_k_m", "llama.cpp", "infer Q4_K_M"),)
    rows = buy_rows(catalog.specs, 800.0, models=("llama-3.1-8b", "llama-3.1-70b"), kinds=kinds)
    small, large = rows
    assert small.gpu is not None and small.price_usd is not None and small.price_usd <= 800
    assert small.command == "gpufly recommend llama-3.1-8b --task infer --quant q4_k_m --budget 800"
    assert large.gpu is None and large.speed is None, "no priced setup under $800 holds a 70B model"
    assert error_span(rows) == "8%"


def test_training_on_several_gpus_shards_the_weights_as_recommend_does(catalog) -> None:
    full = (JobKind("full", "bf16", None, "full training"),)
    one, eight = (model_fit_rows([(catalog.get("h100-sxm"), count)], models=("llama-3.1-8b",), kinds=full)[0]
                  for count in (1, 8))
    assert not one.fits and eight.fits, "ZeRO-3 over 8 GPUs holds what one cannot"
    assert one.needs_bytes - eight.needs_bytes > 0.8 * 16 * 8.03e9 * 7 / 8, (
        "weights, gradients and optimizer states (16 B a parameter) split 8 ways")
