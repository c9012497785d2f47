"""The added GeForce desktop cards and laptop GPUs resolve by the names people type and drivers report,
and every one with tensor cores ends up with a dense 16-bit tensor rate, published or derived."""

from __future__ import annotations

import json
import tomllib

import pytest

from gpufly.catalog.load import DATA_DIR

DATA_FILE = DATA_DIR / "nvidia_more_geforce_laptop.toml"
ENTRIES = tomllib.loads(DATA_FILE.read_text())["gpu"]
IDS = [entry["id"] for entry in ENTRIES]
NO_TENSOR_CORES = {"gtx-1660-ti", "gtx-1660-super"}
NO_VENDOR_BOOST_CLOCK = {"rtx-5090-laptop", "rtx-5080-laptop", "rtx-5070-ti-laptop"}
AWAITING_A_RATE_ROW: dict[str, str] = {}


@pytest.mark.parametrize(("typed", "expected"), [
    ("RTX 4090 D", "rtx-4090-d"), ("4090d", "rtx-4090-d"),
    ("RTX 4070 Ti", "rtx-4070-ti"), ("rtx 4070 ti 12gb", "rtx-4070-ti"),
    ("RTX 5060", "rtx-5060"), ("rtx 4060 ti 8gb", "rtx-4060-ti-8gb"), ("5060 ti 8gb", "rtx-5060-ti-8gb"),
    ("rtx 3060 8gb", "rtx-3060-8gb"), ("3050", "rtx-3050-8gb"), ("2080 super", "rtx-2080-super"),
    ("TITAN RTX", "titan-rtx"), ("gtx 1660 ti", "gtx-1660-ti"),
    ("rtx 4090 laptop", "rtx-4090-laptop"), ("4060 mobile", "rtx-4060-laptop"),
    ("rtx 5080 laptop", "rtx-5080-laptop"), ("5080 mobile", "rtx-5080-laptop"), ("rtx 5080", "rtx-5080"),
    ("rtx 5070 ti laptop", "rtx-5070-ti-laptop"), ("5070 ti mobile", "rtx-5070-ti-laptop"),
    ("rtx 5070 ti", "rtx-5070-ti"),
])
def test_typed_names_reach_the_added_entries(catalog, typed: str, expected: str) -> None:
    assert catalog.get(typed).id == expected


@pytest.mark.parametrize(("reported", "memory_gib", "expected"), [
    ("NVIDIA GeForce RTX 4090 Laptop GPU", 15.6, "rtx-4090-laptop"),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", 7.6, "rtx-4070-laptop"),
    ("NVIDIA GeForce RTX 3080 Ti Laptop GPU", 15.7, "rtx-3080-ti-laptop"),
    ("NVIDIA GeForce RTX 5080 Laptop GPU", 15.5, "rtx-5080-laptop"),
    ("NVIDIA GeForce RTX 5080", 15.5, "rtx-5080"),
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", 11.5, "rtx-5070-ti-laptop"),
    ("NVIDIA GeForce RTX 5070 Ti", 15.5, "rtx-5070-ti"),
    ("NVIDIA GeForce RTX 4090 D", 23.5, "rtx-4090-d"),
    ("NVIDIA GeForce RTX 4060 Ti", 7.6, "rtx-4060-ti-8gb"),
    ("NVIDIA GeForce RTX 4060 Ti", 15.6, "rtx-4060-ti-16gb"),
    ("NVIDIA GeForce RTX 3060", 7.6, "rtx-3060-8gb"),
    ("NVIDIA GeForce RTX 3060", 11.7, "rtx-3060-12gb"),
])
def test_driver_names_pick_the_laptop_part_or_the_memory_variant(catalog, reported: str, memory_gib: float,
                                                                 expected: str) -> None:
    spec = catalog.match_device(reported, int(memory_gib * 2**30))
    assert spec is not None and spec.id == expected


def test_a_laptop_gpu_is_its_own_smaller_part(catalog) -> None:
    laptop, desktop = catalog.get("rtx 4090 laptop"), catalog.get("rtx 4090")
    assert laptop.segment == "laptop" and desktop.segment == "consumer"
    assert laptop.vram_gib < desktop.vram_gib
    assert laptop.memory_bandwidth_gbps < desktop.memory_bandwidth_gbps


@pytest.mark.parametrize(("reported", "memory_gib"), [
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", 15.5), ("NVIDIA GeForce RTX 5070 Ti", 11.5),
])
def test_the_5070_ti_laptop_and_desktop_never_stand_in_for_each_other(catalog, reported: str,
                                                                       memory_gib: float) -> None:
    assert catalog.match_device(reported, int(memory_gib * 2**30)) is None
    laptop = catalog.match_device("NVIDIA GeForce RTX 5070 Ti Laptop GPU")
    assert laptop is not None and laptop.id == "rtx-5070-ti-laptop"


def test_the_5070_ti_laptop_rates_follow_from_its_published_fp4_figure(catalog) -> None:
    laptop = catalog.get("rtx 5070 ti laptop")
    sparse_ai_tops, sms = 992, 46
    assert laptop.fp4_tensor_tflops == sparse_ai_tops / 2 and laptop.sm_count == sms
    assert laptop.fp16_tensor_tflops == pytest.approx(laptop.fp4_tensor_tflops * 512 / 4096)
    assert laptop.is_derived("fp16_tensor_tflops") and laptop.boost_clock_mhz is None


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["segment"] == "laptop"], ids=lambda e: e["id"])
def test_laptop_entries_say_their_clock_is_the_top_of_a_range(entry: dict) -> None:
    assert any(alias.endswith("Laptop GPU") for alias in entry["aliases"]), "the NVML name is an alias"
    if entry["id"] not in NO_VENDOR_BOOST_CLOCK:
        assert "boost range" in entry["notes"] and "top of" in entry["notes"]


def _tensor_card(gpu_id: str) -> object:
    reason = AWAITING_A_RATE_ROW.get(gpu_id)
    return pytest.param(gpu_id, marks=pytest.mark.xfail(reason=reason)) if reason else gpu_id


@pytest.mark.parametrize("gpu_id", [_tensor_card(i) for i in IDS if i not in NO_TENSOR_CORES])
def test_every_added_card_with_tensor_cores_has_a_dense_16_bit_rate(catalog, gpu_id: str) -> None:
    spec = catalog.get(gpu_id)
    assert spec.fp16_tensor_tflops is not None
    assert spec.fp16_tensor_tflops >= (spec.fp32_tflops or 0)


def test_cards_without_tensor_cores_give_nothing_to_derive_from(catalog) -> None:
    for gpu_id in NO_TENSOR_CORES:
        spec = catalog.get(gpu_id)
        assert spec.sm_count is None and spec.fp16_tensor_tflops is None
        assert spec.fp16_tflops == pytest.approx(2 * spec.fp32_tflops, rel=0.01)


def test_rtx_2080_whitepaper_rate_matches_the_turing_derivation(catalog) -> None:
    rtx2080 = catalog.get("rtx 2080")
    assert "fp16_tensor_tflops" not in rtx2080.derivations
    per_sm_per_clock = 512
    derived = per_sm_per_clock * rtx2080.sm_count * rtx2080.boost_clock_mhz * 1e6 / 1e12
    assert rtx2080.fp16_tensor_tflops == pytest.approx(derived, rel=0.03)


def test_every_geforce_card_with_an_nvlink_bridge_gives_its_bandwidth_as_a_number(catalog) -> None:
    bridged = [spec for spec in catalog if spec.vendor == "nvidia" and "NVLink" in (spec.nvlink or "")]
    assert {"rtx-3090", "rtx-3090-ti", "rtx-2080-ti", "titan-rtx"} <= {spec.id for spec in bridged}
    assert [spec.id for spec in bridged if not spec.interconnect_gbps] == []


@pytest.mark.parametrize("gpu_id", ["rtx-3090", "rtx-3090-ti"])
def test_the_3090_and_3090_ti_take_a_two_card_nvlink_3_bridge(catalog, gpu_id: str) -> None:
    spec = catalog.get(gpu_id)
    assert spec.interconnect_gbps == 112.5, "GA102 whitepaper: four x4 links, 112.5 GB/s total between two GPUs"
    assert spec.nvlink.startswith("NVLink 3 bridge (2 cards)") and "4-way" not in spec.nvlink
    assert any("nvidia.com" in url for url in spec.sources)


@pytest.mark.parametrize("gpu_id", ["rtx-4090", "rtx-4080", "rtx-5090", "rtx-3080-10gb"])
def test_cards_without_nvlink_are_not_given_any(catalog, gpu_id: str) -> None:
    spec = catalog.get(gpu_id)
    assert spec.nvlink is None and spec.interconnect_gbps is None


@pytest.mark.parametrize("gpu", ["2x3090", "2xrtx-3090-ti"])
def test_two_3090s_fit_over_their_nvlink_bridge(cli, gpu: str) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", gpu, "--engine", "vllm", "--link", "nvlink", "--json")
    assert result.code == 0, result.stderr
    assert "NVLink 3 bridge" in json.dumps(json.loads(result.stdout))


def test_two_4090s_still_have_no_nvlink(cli) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", "2xrtx-4090", "--engine", "vllm", "--link", "nvlink")
    assert result.code != 0 and "no NVLink" in result.stderr
