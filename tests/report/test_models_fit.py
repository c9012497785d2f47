"""The report's advisor rows: a speed only where the model fits."""

from __future__ import annotations

from gpufly.report.models_fit import model_fit_rows


def test_rows_carry_a_speed_only_where_the_model_fits(catalog) -> None:
    rows = model_fit_rows([(catalog.get("rtx 4090"), 1)], models=("llama-3.2-1b", "llama-3.1-70b"))
    assert {(row.model, row.quant) for row in rows} == {
        ("Llama 3.2 1B", "bf16"), ("Llama 3.2 1B", "q4_k_m"), ("Llama 3.1 70B", "bf16"), ("Llama 3.1 70B", "q4_k_m")}
    for row in rows:
        assert (row.decode_tok_s is not None) == row.fits, row
    assert any(not row.fits for row in rows) and any(row.fits for row in rows)
