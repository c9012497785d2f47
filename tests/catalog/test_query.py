"""Filters, rankings and the derived ratios, on hand-made specs where the arithmetic is visible."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields

import pytest

from gpufly.catalog.query import METRICS, Filters, by_generation, metric, rank, select
from gpufly.catalog.spec import GpuSpec, peak_matmul_tflops
from gpufly.errors import GpuflyError


def make(id: str, **fields) -> GpuSpec:
    base = dict(id=id, name=id.upper(), full_name=id, vendor="nvidia", segment="consumer",
                architecture="Ampere", vram_gib=24, memory_type="GDDR6X", memory_bandwidth_gbps=900,
                launch_year=2020, sources=("https://example.org",))
    return GpuSpec(**{**base, **fields})


CHEAP = make("cheap", fp32_tflops=10, fp16_tensor_tflops=40, tdp_w=200, launch_price_usd=400, vram_gib=12)
BIG = make("big", fp32_tflops=50, fp16_tensor_tflops=400, bf16_tensor_tflops=400, fp8_tensor_tflops=800,
           tdp_w=700, vram_gib=80, architecture="Hopper", segment="datacenter", memory_bandwidth_gbps=3350)
OLD = make("old", fp32_tflops=8, fp16_tflops=0.14, tdp_w=180, launch_price_usd=600, vram_gib=8,
           architecture="Pascal", vendor="nvidia")
SOC = make("soc", vendor="apple", segment="soc", architecture="Apple M4 GPU", vram_gib=128)
ALL = [CHEAP, BIG, OLD, SOC]


def test_derived_ratios_follow_their_formulas() -> None:
    assert CHEAP.derived["peak_tflops"] == 40
    assert CHEAP.derived["tflops_per_usd"] == pytest.approx(40 / 400)
    assert CHEAP.derived["tflops_per_watt"] == pytest.approx(40 / 200)
    assert CHEAP.derived["gbps_per_usd"] == pytest.approx(900 / 400)
    assert CHEAP.derived["vram_gib_per_usd"] == pytest.approx(12 / 400)
    assert BIG.derived["tflops_per_usd"] is None, "no price published, no ratio invented"


def test_price_ratios_are_ranked_and_shown_per_thousand_dollars() -> None:
    per_thousand = METRICS["tflops_per_usd"]
    assert per_thousand(CHEAP) == pytest.approx(1000 * 40 / 400) and per_thousand.unit == "TFLOPS/$1k"
    assert METRICS["gbps_per_usd"](CHEAP) == pytest.approx(1000 * 900 / 400)
    assert METRICS["vram_gib_per_usd"].unit == "GiB per $1k"
    assert per_thousand(BIG) is None


def test_peak_rate_takes_fp32_where_half_precision_is_slow() -> None:
    assert peak_matmul_tflops(OLD) == 8
    assert peak_matmul_tflops(SOC) is None


def test_peak_rate_never_ranks_fp32_against_tensor_figures() -> None:
    unpublished = make("turing", compute_capability="7.5", fp32_tflops=6.5)
    assert unpublished.has_tensor_cores
    assert peak_matmul_tflops(unpublished) is None


def test_filters_combine() -> None:
    assert select(ALL, Filters(min_vram_gib=24)) == [BIG, SOC]
    assert select(ALL, Filters(has=("fp8",))) == [BIG]
    assert select(ALL, Filters(has=("bf16", "fp8"), min_vram_gib=100)) == []
    assert select(ALL, Filters(vendor="APPLE")) == [SOC]
    assert select(ALL, Filters(arch="hop")) == [BIG]
    assert select(ALL, Filters(segment="consumer")) == [CHEAP, OLD]


@pytest.mark.parametrize("filters, message", [
    (Filters(min_vram_gib=-1), "--min-vram must be a number of GiB, zero or more"),
    (Filters(vendor="nvdia"), "unknown vendor 'nvdia'; did you mean nvidia"),
    (Filters(arch="volta"), "unknown architecture 'volta'"),
    (Filters(has=("fp9",)), "unknown precision 'fp9'"),
])
def test_bad_filters_say_what_is_wrong(filters: Filters, message: str) -> None:
    with pytest.raises(GpuflyError, match=message):
        select(ALL, filters)


def test_rank_puts_best_first_and_unknowns_last() -> None:
    assert rank(ALL, METRICS["peak_tflops"]) == [BIG, CHEAP, OLD, SOC]
    assert rank(ALL, METRICS["tflops_per_usd"]) == [CHEAP, OLD, BIG, SOC]
    assert rank(ALL, METRICS["launch_price_usd"]) == [CHEAP, OLD, BIG, SOC], "cheapest first"
    assert rank(ALL, METRICS["vram_gib"], reverse=True) == [OLD, CHEAP, BIG, SOC]


@pytest.mark.parametrize("typed, key", [
    ("tflops-per-usd", "tflops_per_usd"), ("TFLOPS_per_watt", "tflops_per_watt"), ("vram", "vram_gib"),
    ("bandwidth", "memory_bandwidth_gbps"), ("fp16", "fp16_tensor_tflops"), ("gbps_per_usd", "gbps_per_usd"),
    ("vram_gib_per_usd", "vram_gib_per_usd"), ("fp32_tflops", "fp32_tflops"), ("cc", "compute_capability"),
])
def test_metric_names_are_forgiving(typed: str, key: str) -> None:
    assert metric(typed).key == key


def test_unknown_metric_suggests() -> None:
    with pytest.raises(GpuflyError, match="unknown metric 'bandwith'; did you mean bandwidth"):
        metric("bandwith")


def test_compute_capability_sorts_numerically() -> None:
    newer = make("newer", compute_capability="12.0")
    older = make("older", compute_capability="9.0")
    assert rank([older, newer], metric("cc")) == [newer, older]


def test_every_numeric_field_is_sortable() -> None:
    numeric = [f.name for f in dataclass_fields(GpuSpec)
               if f.name not in ("derived",) and f.type in ("int", "float", "int | None", "float | None")]
    assert "pcie_lanes" in numeric and len(numeric) >= 16
    assert set(numeric) <= set(METRICS)
    wide, narrow = make("wide", pcie_lanes=16), make("narrow", pcie_lanes=8)
    assert rank([narrow, wide], metric("pcie_lanes")) == [wide, narrow]
    assert metric("pcie_lanes").label == "PCIe lanes"


def test_the_default_order_is_newest_architecture_first_then_the_16_bit_rate() -> None:
    blackwell = make("b200", architecture="Blackwell", launch_year=2024, fp16_tensor_tflops=2250)
    blackwell_slow = make("rtx-5050", architecture="Blackwell", launch_year=2025, fp16_tensor_tflops=26)
    blackwell_unrated = make("gb10", architecture="Blackwell", launch_year=2025)
    hopper = make("h100", architecture="Hopper", launch_year=2022, fp16_tensor_tflops=989)
    ada = make("rtx-4090", architecture="Ada Lovelace", launch_year=2022, fp16_tensor_tflops=165)
    ampere = make("a100", architecture="Ampere", launch_year=2020, fp16_tensor_tflops=312)
    pascal = make("gtx-1080", architecture="Pascal", launch_year=2016, fp32_tflops=8.9)
    shuffled = [pascal, ada, blackwell_unrated, ampere, blackwell_slow, hopper, blackwell]
    assert by_generation(shuffled) == [blackwell, blackwell_slow, blackwell_unrated, hopper, ada, ampere, pascal], (
        "the architecture's first year, then its fastest card (Hopper before Ada, both 2022); a card without a "
        "16-bit rate last in its architecture")
    assert by_generation(list(reversed(shuffled))) == by_generation(shuffled), "never the file order"


def test_a_filter_does_not_move_an_architecture() -> None:
    early_ampere = make("a100", architecture="Ampere", launch_year=2020, fp16_tensor_tflops=312)
    late_ampere = make("a800", architecture="Ampere", launch_year=2022, fp16_tensor_tflops=312)
    ada = make("rtx-4090", architecture="Ada Lovelace", launch_year=2022, fp16_tensor_tflops=165)
    filtered = [late_ampere, ada]
    assert by_generation(filtered, catalog=[early_ampere, *filtered]) == [ada, late_ampere], (
        "Ampere first shipped in 2020, whatever the filter left")
