"""Every catalog entry is well-formed, sourced, and free of well-known wrong numbers."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gpufly.catalog.load import DATA_DIR, SCHEMA_PATH, load_specs, read_entries, spec_from_entry
from gpufly.catalog.spec import RATE_FIELDS, TENSOR_FIELDS
from gpufly.errors import GpuflyError

ENTRIES = read_entries(sorted(DATA_DIR.glob("*.toml")))
REQUIRED_GPUS = [
    "GTX 1060 6GB", "GTX 1070", "GTX 1080", "GTX 1080 Ti", "RTX 2060", "RTX 2070", "RTX 2080 Ti",
    "RTX 3060 12GB", "RTX 3060 Ti", "RTX 3070", "RTX 3070 Ti", "RTX 3080 10GB", "RTX 3080 12GB",
    "RTX 3080 Ti", "RTX 3090", "RTX 3090 Ti", "RTX 4060", "RTX 4060 Ti 16GB", "RTX 4070", "RTX 4070 SUPER",
    "RTX 4070 Ti SUPER", "RTX 4080", "RTX 4080 SUPER", "RTX 4090", "RTX 5060 Ti 16GB", "RTX 5070",
    "RTX 5070 Ti", "RTX 5080", "RTX 5090", "RTX A6000", "RTX 6000 Ada", "RTX PRO 6000 Blackwell", "P100",
    "V100 16GB", "V100 32GB", "T4", "A10", "A30", "A40", "A100 40GB SXM", "A100 80GB SXM", "A100 40GB PCIe",
    "A100 80GB PCIe", "L4", "L40", "L40S", "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "B200", "MI250X",
    "MI300X", "RX 7900 XTX", "M2 Ultra", "M3 Max", "M4 Max", "B100", "RTX 5070 Ti Laptop",
]


def _entry_id(entry: dict) -> str:
    return entry.get("id", "?")


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_entry_matches_schema(entry: dict) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate({k: v for k, v in entry.items() if k != "_file"}, schema)


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_entry_is_sane(entry: dict) -> None:
    spec = spec_from_entry(entry)
    assert spec.vram_gib > 0 and spec.memory_bandwidth_gbps > 0
    assert spec.sources and all(url.startswith(("https://", "http://")) for url in spec.sources)
    if spec.vendor == "nvidia":
        assert spec.compute_capability is not None, "every NVIDIA GPU carries its compute capability"
    if spec.fp32_tflops is not None:
        for name in TENSOR_FIELDS:
            rate = getattr(spec, name)
            assert rate is None or rate >= spec.fp32_tflops, f"{name} below FP32: sparse/dense mix-up?"
    for name in RATE_FIELDS:
        rate = getattr(spec, name)
        assert rate is None or rate < 20_000, f"{name}={rate} is beyond any single GPU"


def _resolves(catalog, name: str) -> bool:
    try:
        catalog.resolve(name)
    except GpuflyError:
        return False
    return True


def test_catalog_covers_the_cards_people_ask_about(catalog) -> None:
    assert len(catalog) >= 130, "issue 16: at least 130 GPUs"
    missing = [name for name in REQUIRED_GPUS if not _resolves(catalog, name)]
    assert missing == []


def test_no_lookup_key_names_two_gpus_and_no_name_has_two_defaults(catalog) -> None:
    assert catalog.ambiguous_keys() == {}


@pytest.mark.parametrize("spec", [s for s in load_specs() if s.segment == "datacenter" and s.nvlink],
                         ids=lambda spec: spec.id)
def test_data_centre_cards_with_a_gpu_link_give_its_bandwidth_or_say_why_not(spec) -> None:
    assert spec.interconnect_gbps is not None or "interconnect_gbps is left out" in (spec.notes or "")


NO_SOURCED_BUS_WIDTH = {
    "l2": "NVIDIA publishes no L2 datasheet and no secondary source seen gives its bus width (databases seen "
          "confuse it with the L20's 384 bits)",
    "a10g": "neither NVIDIA nor AWS publishes the A10G's bus width or memory data rate; 600 GB/s alone does not fix it",
}


def _data_centre_card(spec) -> object:
    reason = NO_SOURCED_BUS_WIDTH.get(spec.id)
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(spec, id=spec.id, marks=marks)


@pytest.mark.parametrize("spec", [_data_centre_card(s) for s in load_specs() if s.segment == "datacenter"])
def test_data_centre_cards_give_their_memory_bus_width(spec) -> None:
    """Issue 16: the multi-GPU estimates need every data-centre card's bus width (split between its dies)."""
    assert spec.memory_bus_bits is not None and spec.memory_bus_bits % 64 == 0


DEFAULT_WITHOUT_A_WHY: dict[str, str] = {}


def _default_card(spec) -> object:
    reason = DEFAULT_WITHOUT_A_WHY.get(spec.id)
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(spec, id=spec.id, marks=marks)


@pytest.mark.parametrize("spec", [_default_card(s) for s in load_specs() if s.default_for])
def test_a_declared_default_says_so_in_its_notes(spec) -> None:
    assert "default" in (spec.notes or "").lower(), "say in notes why this variant is the common default"


def test_rtx_4090_tf32_is_the_whitepaper_figure_not_the_marketing_one(catalog) -> None:
    rtx4090 = catalog.get("4090")
    assert rtx4090.tf32_tensor_tflops == pytest.approx(82.6, abs=0.1)
    assert rtx4090.fp16_tensor_tflops == pytest.approx(165.2, abs=0.1)


def test_consumer_pascal_half_precision_is_slow(catalog) -> None:
    gtx1080 = catalog.get("gtx 1080")
    assert gtx1080.has_tensor_cores is False
    assert gtx1080.fp16_tflops is not None and gtx1080.fp16_tflops < gtx1080.fp32_tflops / 32


def test_data_center_hopper_figures_are_dense(catalog) -> None:
    h100 = catalog.get("h100 sxm")
    assert h100.bf16_tensor_tflops == pytest.approx(989.4, rel=0.01)
    assert h100.fp8_tensor_tflops == pytest.approx(1979, rel=0.01)


@pytest.mark.parametrize(("change", "message"), [
    (lambda e: e.update(vram_gb=24), "{where} has unknown field(s) vram_gb"),
    (lambda e: e.pop("memory_bandwidth_gbps"), "{where}: memory_bandwidth_gbps is missing (a required field)"),
    (lambda e: e.update(vram_gib="24"), '{where}: vram_gib must be a number, got "24"'),
    (lambda e: e.update(sources="https://example.com"), '{where}: sources must be a list, got "https://example.com"'),
    (lambda e: e.update(launch_year=2020.5), "{where}: launch_year must be a whole number, got 2020.5"),
], ids=["unknown", "missing", "text for a number", "text for a list", "fraction for a year"])
def test_a_broken_entry_is_refused_by_field_name(change, message: str) -> None:
    entry = dict(ENTRIES[0])
    change(entry)
    with pytest.raises(GpuflyError) as caught:
        spec_from_entry(entry)
    where = f"catalog entry {ENTRIES[0]['_file']}: {ENTRIES[0]['id']}"
    assert caught.value.message == message.format(where=where)
    assert caught.value.hint


def test_unreadable_catalog_file_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[gpu]\nid = ")
    with pytest.raises(GpuflyError, match="cannot read catalog file"):
        read_entries([bad])
