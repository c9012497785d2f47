"""The added AMD, Intel and Apple entries resolve by the names people type and drivers report, keep dense (not
sparse) matrix rates, count their dies, say how they talk to each other, and every one with matrix hardware ends up
with a dense 16-bit rate, published or derived."""

from __future__ import annotations

import tomllib

import pytest

from gpufly.catalog.load import DATA_DIR
from gpufly.errors import GpuflyError

DATA_FILE = DATA_DIR / "amd_intel_apple_more.toml"
ENTRIES = tomllib.loads(DATA_FILE.read_text())["gpu"]
APPLE_CHIPS = {entry["id"] for entry in ENTRIES if entry["vendor"] == "apple"}
NO_PUBLISHED_RATE = {"gaudi3-pcie"}
AWAITING_A_RATE_ROW: dict[str, str] = {}
NO_INTERCONNECT_FIGURE = {"max-1550", "gaudi3-pcie"}
GIB = 2**30


@pytest.mark.parametrize(("typed", "expected"), [
    ("MI325X", "mi325x"), ("mi355x", "mi355x"), ("MI350X", "mi350x"), ("mi300a", "mi300a"),
    ("mi250", "mi250"), ("mi250x", "mi250x"), ("MI210", "mi210"), ("mi100", "mi100"),
    ("RX 9070 XT", "rx-9070-xt"), ("9070", "rx-9070"), ("7900 xt", "rx-7900-xt"), ("7900 xtx", "rx-7900-xtx"),
    ("7900 GRE", "rx-7900-gre"), ("rx 7800 xt", "rx-7800-xt"), ("7600 xt", "rx-7600-xt"),
    ("Arc B580", "arc-b580"), ("B60", "arc-pro-b60"), ("a770 16gb", "arc-a770-16gb"), ("a750", "arc-a750"),
    ("gaudi 2", "gaudi2"), ("gaudi3 pcie", "gaudi3-pcie"), ("max 1550", "max-1550"),
    ("m1", "m1"), ("m1 ultra", "m1-ultra"), ("Apple M2", "m2"), ("m2 max", "m2-max"),
    ("m3", "m3"), ("m3 pro", "m3-pro"), ("m3 max", "m3-max"), ("m3 ultra", "m3-ultra"),
    ("m4", "m4"), ("m4 pro", "m4-pro"), ("m4 max", "m4-max"),
])
def test_typed_names_reach_the_added_entries(catalog, typed: str, expected: str) -> None:
    assert catalog.get(typed).id == expected


@pytest.mark.parametrize(("reported", "memory_gib", "expected"), [
    ("AMD Instinct MI325X", 255.98, "mi325x"),
    ("AMD Radeon RX 7900 XT", 19.98, "rx-7900-xt"),
    ("Intel(R) Arc(TM) B580 Graphics", 11.9, "arc-b580"),
    ("Intel(R) Arc(TM) A770 Graphics", 15.9, "arc-a770-16gb"),
    ("Intel(R) Arc(TM) A770 Graphics", 7.9, None),
])
def test_driver_names_pick_the_entry_of_that_memory_or_none(catalog, reported: str, memory_gib: float,
                                                             expected: str | None) -> None:
    spec = catalog.match_device(reported, int(memory_gib * GIB))
    assert (spec.id if spec else None) == expected


@pytest.mark.parametrize("typed", ["rx 7600", "MI300", "a770 8gb"])
def test_names_of_cards_not_in_the_catalog_are_not_passed_off_as_a_neighbour(catalog, typed: str) -> None:
    with pytest.raises(GpuflyError):
        catalog.resolve(typed)


def test_gaudi_3_link_bandwidth_is_the_card_to_card_share_of_its_ports(catalog) -> None:
    scale_up_ports, gbit_per_port = 21, 200
    assert catalog.get("gaudi 3 oam").interconnect_gbps == scale_up_ports * gbit_per_port / 8 * 2


def test_mi300a_link_bandwidth_is_two_links_to_each_of_three_peers(catalog) -> None:
    peers, links_per_peer, gbps_per_link = 3, 2, 128
    mi300a = catalog.get("mi300a")
    assert mi300a.interconnect_gbps == peers * links_per_peer * gbps_per_link
    assert mi300a.interconnect_gbps < catalog.get("mi300x").interconnect_gbps


def test_max_1550_matrix_rates_are_derived_from_the_xe_hpc_row(catalog) -> None:
    max1550 = catalog.get("max 1550")
    xe_cores, mhz = 128, 1600
    assert (max1550.sm_count, max1550.boost_clock_mhz) == (xe_cores, mhz)
    assert max1550.bf16_tensor_tflops == pytest.approx(4096 * xe_cores * mhz / 1e6, abs=0.1)
    assert max1550.tf32_tensor_tflops == pytest.approx(max1550.bf16_tensor_tflops / 2, abs=0.1)
    assert max1550.int8_tensor_tops == pytest.approx(max1550.bf16_tensor_tflops * 2, abs=0.1)
    assert {"bf16_tensor_tflops", "fp16_tensor_tflops", "tf32_tensor_tflops", "int8_tensor_tops"} <= set(
        max1550.derivations)
    fp64_ops_per_clock_per_xe_core, intel_fp64_headline = 256, 52
    assert fp64_ops_per_clock_per_xe_core * xe_cores * mhz / 1e6 == pytest.approx(intel_fp64_headline, rel=0.03)


def test_gaudi_3_means_the_oam_module_and_says_so(catalog) -> None:
    resolution = catalog.resolve("gaudi 3")
    assert resolution.spec.id == "gaudi3-oam"
    assert resolution.assumed is not None and "Gaudi 3 PCIe" in resolution.assumed


@pytest.mark.parametrize(("gpu_id", "dies", "gib_per_die"), [("mi250", 2, 64), ("max-1550", 2, 64)])
def test_two_die_packages_count_their_devices(catalog, gpu_id: str, dies: int, gib_per_die: int) -> None:
    spec = catalog.get(gpu_id)
    assert spec.dies == dies
    assert spec.vram_gib / spec.dies == gib_per_die


def test_instinct_rates_are_dense_not_the_sparse_headline(catalog) -> None:
    mi355x, mi325x, mi300x = catalog.get("mi355x"), catalog.get("mi325x"), catalog.get("mi300x")
    assert mi355x.fp8_tensor_tflops == pytest.approx(5033.2)
    assert mi355x.fp4_tensor_tflops == pytest.approx(2 * mi355x.fp8_tensor_tflops)
    assert mi325x.bf16_tensor_tflops == mi300x.bf16_tensor_tflops == pytest.approx(1307.4)
    assert catalog.get("rx 9070 xt").int8_tensor_tops == pytest.approx(779 / 2, rel=0.01)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["segment"] == "datacenter"], ids=lambda e: e["id"])
def test_data_centre_entries_give_their_interconnect_or_say_why_not(entry: dict) -> None:
    if entry["id"] in NO_INTERCONNECT_FIGURE:
        assert "interconnect_gbps is left out" in entry["notes"]
    else:
        assert entry["interconnect_gbps"] > 0 and entry["nvlink"]


def _matrix_card(gpu_id: str) -> object:
    reason = AWAITING_A_RATE_ROW.get(gpu_id)
    return pytest.param(gpu_id, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else gpu_id


@pytest.mark.parametrize("gpu_id", [_matrix_card(e["id"]) for e in ENTRIES
                                    if e["id"] not in APPLE_CHIPS | NO_PUBLISHED_RATE])
def test_every_card_with_matrix_units_has_a_dense_16_bit_rate(catalog, gpu_id: str) -> None:
    spec = catalog.get(gpu_id)
    rate = spec.fp16_tensor_tflops or spec.bf16_tensor_tflops
    assert rate is not None and rate >= (spec.fp32_tflops or 0)


@pytest.mark.parametrize("gpu_id", sorted(APPLE_CHIPS))
def test_apple_chips_give_gpu_cores_and_their_memory_choice(catalog, gpu_id: str) -> None:
    spec = catalog.get(gpu_id)
    assert spec.segment == "soc" and spec.sm_count is not None
    assert not spec.has_tensor_cores
    assert spec.notes is not None and "Largest configuration" in spec.notes
