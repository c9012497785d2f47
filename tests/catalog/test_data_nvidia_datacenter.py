"""The added NVIDIA data-centre, China-market, cloud, workstation and embedded GPUs resolve by the names people
type and drivers report, carry dense (not sparse) tensor rates, and say where a figure is not NVIDIA's own."""

from __future__ import annotations

import tomllib

import pytest

from gpufly.catalog.load import DATA_DIR

DATA_FILE = DATA_DIR / "nvidia_more_datacenter.toml"
ENTRIES = tomllib.loads(DATA_FILE.read_text())["gpu"]
NO_TENSOR_CORES = {"p40", "p4"}
UNPUBLISHED_TENSOR_RATES = {
    "a10g": "neither NVIDIA nor AWS publishes its rates, SM count or clock",
}
VENDOR_DOMAINS = ("nvidia.com", "nvidia.cn", "nvidianews", "nvdam.widen.net")


@pytest.mark.parametrize(("typed", "expected"), [
    ("H20", "h20"), ("hgx h20", "h20"), ("h200 sxm", "h200-sxm"), ("h200 nvl", "h200-nvl"),
    ("H800", "h800-sxm"), ("h800 pcie", "h800-pcie"),
    ("a800 sxm", "a800-sxm4-80gb"), ("a800 80gb pcie", "a800-pcie-80gb"), ("a800 40gb", "a800-pcie-40gb"),
    ("L20", "l20"), ("L2", "l2"), ("l40", "l40"), ("A10G", "a10g"), ("a10", "a10"),
    ("A2", "a2"), ("A16", "a16"), ("gh200", "gh200-96gb"), ("gh200 144gb", "gh200-144gb"),
    ("GB200", "gb200"), ("B300", "b300"), ("b200", "b200"), ("B100", "b100"), ("hgx b100", "b100"),
    ("v100 pcie", "v100-pcie-16gb"), ("v100 pcie 32gb", "v100-pcie-32gb"),
    ("p40", "p40"), ("tesla p4", "p4"),
    ("rtx 4000 ada", "rtx-4000-ada"), ("rtx 4500 ada", "rtx-4500-ada"), ("rtx 5000 ada", "rtx-5000-ada"),
    ("rtx 2000 ada", "rtx-2000-ada"), ("a4000", "rtx-a4000"), ("rtx a4500", "rtx-a4500"), ("a5000", "rtx-a5000"),
    ("rtx pro 5000", "rtx-pro-5000-blackwell"), ("rtx pro 5000 72gb", "rtx-pro-5000-blackwell-72gb"),
    ("rtx pro 4500", "rtx-pro-4500-blackwell"), ("rtx pro 6000", "rtx-pro-6000-blackwell"),
    ("agx orin", "jetson-agx-orin-64gb"), ("jetson agx orin 32gb", "jetson-agx-orin-32gb"),
    ("orin nx", "jetson-orin-nx-16gb"), ("orin nano", "jetson-orin-nano-8gb"),
    ("DGX Spark", "dgx-spark"), ("GB10", "dgx-spark"),
])
def test_typed_names_reach_the_added_entries(catalog, typed: str, expected: str) -> None:
    assert catalog.get(typed).id == expected


@pytest.mark.parametrize(("reported", "memory_gib", "expected"), [
    ("NVIDIA H20", 95.0, "h20"),
    ("NVIDIA H800", 79.6, "h800-sxm"),
    ("NVIDIA A800-SXM4-80GB", 79.2, "a800-sxm4-80gb"),
    ("NVIDIA A800 80GB PCIe", 79.2, "a800-pcie-80gb"),
    ("NVIDIA A10G", 22.5, "a10g"),
    ("NVIDIA H200 NVL", 139.8, "h200-nvl"),
    ("Tesla V100-PCIE-16GB", 15.8, "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", 31.7, "v100-pcie-32gb"),
    ("Tesla P40", 22.4, "p40"),
    ("NVIDIA RTX 4000 Ada Generation", 19.5, "rtx-4000-ada"),
    ("NVIDIA RTX A5000", 23.6, "rtx-a5000"),
    ("NVIDIA GB10", 119.7, "dgx-spark"),
])
def test_driver_names_reach_the_added_entries(catalog, reported: str, memory_gib: float, expected: str) -> None:
    spec = catalog.match_device(reported, int(memory_gib * 2**30))
    assert spec is not None and spec.id == expected


def test_the_h20_is_not_the_h200(catalog) -> None:
    h20, h200 = catalog.get("h20"), catalog.get("h200 sxm")
    assert (h20.vram_gib, h20.fp16_tensor_tflops) == (96, 148)
    assert (h200.vram_gib, h200.fp16_tensor_tflops) == (141, 989.5)


def test_sparse_datasheet_figures_are_stored_halved(catalog) -> None:
    assert catalog.get("h200 nvl").fp16_tensor_tflops == 1671 / 2
    assert catalog.get("rtx 5000 ada").fp8_tensor_tflops == pytest.approx(1044.4 / 2, abs=0.1)
    assert catalog.get("a4000").fp16_tensor_tflops == pytest.approx(153.4 / 2, abs=0.1)
    assert catalog.get("gb200").fp4_tensor_tflops == 40_000 / 2 / 2
    b100 = catalog.get("b100")
    sparse = (14_000, 7_000, 3_500)
    assert (b100.fp4_tensor_tflops, b100.fp8_tensor_tflops, b100.bf16_tensor_tflops) == tuple(x / 2 for x in sparse)
    assert catalog.get("jetson agx orin 32gb").int8_tensor_tops == 108 / 2


def test_export_parts_keep_their_compute_but_lose_interconnect(catalog) -> None:
    h800, h100 = catalog.get("h800"), catalog.get("h100 sxm")
    assert h800.fp16_tensor_tflops == pytest.approx(h100.fp16_tensor_tflops, rel=0.001)
    assert h800.interconnect_gbps == 400
    assert catalog.get("a800 sxm").interconnect_gbps == 400


@pytest.mark.parametrize(("variant", "same_memory_as"), [
    ("h800", "h100 sxm"), ("h800 pcie", "h100 pcie"), ("h200 nvl", "h200 sxm"), ("gb200", "b200"), ("b300", "b200"),
    ("b100", "b200"),
])
def test_a_variant_on_the_same_hbm_stacks_has_the_same_bus_width(catalog, variant: str, same_memory_as: str) -> None:
    assert catalog.get(variant).memory_bus_bits == catalog.get(same_memory_as).memory_bus_bits


def test_hopper_bus_width_counts_the_enabled_hbm_stacks(catalog) -> None:
    stack_bits = 1024
    assert catalog.get("h100 sxm").memory_bus_bits == 5 * stack_bits
    all_six = ("h20", "h100 nvl", "h200 sxm", "h200 nvl", "gh200", "gh200 144gb")
    assert {catalog.get(name).memory_bus_bits for name in all_six} == {6 * stack_bits}


def test_the_b100_is_the_700_w_blackwell_not_the_b200(catalog) -> None:
    b100, b200 = catalog.get("b100"), catalog.get("b200")
    assert (b100.tdp_w, b200.tdp_w) == (700, 1000)
    assert b100.bf16_tensor_tflops < b200.bf16_tensor_tflops
    assert b100.interconnect_gbps == b200.interconnect_gbps == 1800


def test_a_board_of_four_gpus_is_four_devices(catalog) -> None:
    a16 = catalog.get("a16")
    assert a16.dies == 4 and a16.vram_gib / a16.dies == 16


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_every_card_with_tensor_cores_has_a_dense_rate(catalog, entry: dict) -> None:
    if entry["id"] in NO_TENSOR_CORES:
        pytest.skip("no tensor cores")
    spec = catalog.get(entry["id"])
    has_rate = any(rate is not None for rate in (spec.fp16_tensor_tflops, spec.bf16_tensor_tflops,
                                                 spec.int8_tensor_tops, spec.fp4_tensor_tflops))
    if entry["id"] in UNPUBLISHED_TENSOR_RATES:
        assert not has_rate, "it has a rate now: take it out of UNPUBLISHED_TENSOR_RATES"
        pytest.xfail(UNPUBLISHED_TENSOR_RATES[entry["id"]])
    assert has_rate


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_nvlink_cards_give_their_bandwidth_as_a_number(entry: dict) -> None:
    if "nvlink" in entry:
        assert entry.get("interconnect_gbps", 0) > 0


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["id"])
def test_an_entry_without_an_nvidia_source_says_its_figures_are_secondary(entry: dict) -> None:
    if not any(domain in url for url in entry["sources"] for domain in VENDOR_DOMAINS):
        assert "secondary" in entry["notes"] or "no public datasheet" in entry["notes"] \
            or "Neither NVIDIA" in entry["notes"]


def test_every_system_on_a_chip_says_so_in_its_form_factor(catalog) -> None:
    """Apple's M-series, NVIDIA's GB10 (DGX Spark) and the Jetson modules: CPU and GPU on one chip, one GPU per
    machine; the fit check that refuses two in one node reads form_factor "SoC"."""
    chips = [spec for spec in catalog if spec.segment in ("soc", "embedded")]
    assert {"dgx-spark", "jetson-agx-orin-64gb", "m3-ultra"} <= {spec.id for spec in chips}
    assert {spec.id: spec.form_factor for spec in chips if spec.form_factor != "SoC"} == {}


def test_the_gb10_is_a_superchip_with_unified_memory(catalog) -> None:
    gb10 = catalog.get("gb10")
    assert gb10.form_factor == "SoC" and gb10.memory_type == "LPDDR5X"
    assert "Grace Blackwell Superchip" in gb10.full_name and "unified memory" in gb10.notes


@pytest.mark.parametrize("gpu", ["2xGB10", "2xdgx-spark", "2xjetson-agx-orin-64gb"])
def test_two_systems_on_a_chip_in_one_node_are_refused(cli, gpu: str) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", gpu)
    assert result.code != 0 and "system on a chip" in result.stderr and "--nodes" in result.stderr
