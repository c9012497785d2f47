"""Names resolve the way people type them and drivers report them, never to another product: a name that
covers variants picks the declared default and says so, or asks."""

from __future__ import annotations

import json

import pytest

from gpufly.catalog import Catalog, normalize
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError

ASK = "matches several GPUs"
UNKNOWN = "unknown GPU"

NAMES = [
    # What drivers report (NVML, ROCm, Level Zero): always the exact entry, never an assumption.
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb", None),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb", None),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb", None),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb", None),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb", None),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb", None),
    ("NVIDIA H100 80GB HBM3", "h100-sxm", None),
    ("NVIDIA H100 PCIe", "h100-pcie", None),
    ("NVIDIA H100 NVL", "h100-nvl", None),
    ("NVIDIA H200 NVL", "h200-nvl", None),
    ("NVIDIA H20", "h20", None),
    ("NVIDIA L40S", "l40s", None),
    ("NVIDIA L4", "l4", None),
    ("Tesla T4", "t4", None),
    ("NVIDIA A10G", "a10g", None),
    ("NVIDIA GeForce RTX 4090", "rtx-4090", None),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "rtx-4090-laptop", None),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", "rtx-4070-laptop", None),
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "rtx-5070-ti-laptop", None),
    ("NVIDIA B100", "b100", None),
    ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti", None),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super", None),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada", None),
    ("NVIDIA RTX A6000", "rtx-a6000", None),
    ("AMD Instinct MI300X", "mi300x", None),
    ("AMD Radeon RX 7900 XTX", "rx-7900-xtx", None),
    ("Intel(R) Arc(TM) B580 Graphics", "arc-b580", None),
    # A model name is never stretched to another model: more digits, Ti, SUPER, D, S, Max, Laptop. A name that
    # spells the product, its closing qualifiers in any order, is taken as meant.
    ("h20", "h20", None),
    ("H20", "h20", None),
    ("l40", "l40", None),
    ("l40s", "l40s", None),
    ("l20", "l20", None),
    ("a10", "a10", None),
    ("a10g", "a10g", None),
    ("a30", "a30", None),
    ("a40", "a40", None),
    ("mi250", "mi250", None),
    ("mi250x", "mi250x", None),
    ("rtx 4090", "rtx-4090", None),
    ("RTX 4090", "rtx-4090", None),
    ("rtx-4090", "rtx-4090", None),
    ("4090 d", "rtx-4090-d", None),
    ("rtx 4090 laptop", "rtx-4090-laptop", None),
    ("4080 super", "rtx-4080-super", None),
    ("RTX 4070 Ti", "rtx-4070-ti", None),
    ("4070 ti 12gb", "rtx-4070-ti", None),
    ("4070 ti super", "rtx-4070-ti-super", None),
    ("4070 super", "rtx-4070-super", None),
    ("4060 ti 8gb", "rtx-4060-ti-8gb", None),
    ("4060 ti 16gb", "rtx-4060-ti-16gb", None),
    ("rtx 5090", "rtx-5090", None),
    ("5070 ti", "rtx-5070-ti", None),
    ("rtx 5070 ti laptop", "rtx-5070-ti-laptop", None),
    ("b100", "b100", None),
    ("hgx b100", "b100", None),
    ("RTX 5060", "rtx-5060", None),
    ("5060 ti 16gb", "rtx-5060-ti-16gb", None),
    ("3090 ti", "rtx-3090-ti", None),
    ("3080 12gb", "rtx-3080-12gb", None),
    ("3080 ti", "rtx-3080-ti", None),
    ("3060 ti", "rtx-3060-ti", None),
    ("rtx 2080", "rtx-2080", None),
    ("2080 super", "rtx-2080-super", None),
    ("2080 ti", "rtx-2080-ti", None),
    ("titan rtx", "titan-rtx", None),
    ("1080 ti", "gtx-1080-ti", None),
    ("M3", "m3", None),
    ("m3 max", "m3-max", None),
    ("m4 max", "m4-max", None),
    ("rx 7900 xtx", "rx-7900-xtx", None),
    ("7900xtx", "rx-7900-xtx", None),
    ("rtx 6000 ada", "rtx-6000-ada", None),
    ("rtx pro 6000", "rtx-pro-6000-blackwell", None),
    ("h100 sxm", "h100-sxm", None),
    ("h100 pcie", "h100-pcie", None),
    ("A100 SXM 80GB", "a100-sxm4-80gb", None),
    ("a100 sxm4 80gb", "a100-sxm4-80gb", None),
    ("a100-sxm4-80gb", "a100-sxm4-80gb", None),
    ("A100 80GB SXM", "a100-sxm4-80gb", None),
    ("a100 sxm 40gb", "a100-sxm4-40gb", None),
    ("h100 80gb pcie", "h100-pcie", None),
    ("a100 pcie 80gb", "a100-pcie-80gb", None),
    # A name that covers variants, one of them the common default: it is picked, and the lookup says so.
    ("a100", "a100-sxm4-80gb", "assuming A100 80GB SXM; also: A100 40GB SXM, A100 40GB PCIe, A100 80GB PCIe"),
    ("A100 80GB", "a100-sxm4-80gb", "assuming A100 80GB SXM; also: A100 80GB PCIe"),
    ("a100-80g", "a100-sxm4-80gb", "assuming A100 80GB SXM; also: A100 80GB PCIe"),
    ("a100 40gb", "a100-sxm4-40gb", "assuming A100 40GB SXM; also: A100 40GB PCIe"),
    ("h100", "h100-sxm", "assuming H100 SXM; also: H100 PCIe, H100 NVL"),
    ("h200", "h200-sxm", "assuming H200 SXM; also: H200 NVL"),
    ("NVIDIA H200", "h200-sxm", "assuming H200 SXM; also: H200 NVL"),
    ("v100", "v100-sxm2-16gb", "assuming Tesla V100 SXM2 16GB; also: "),
    ("V100 32GB", "v100-sxm2-32gb", "assuming Tesla V100 SXM2 32GB; also: Tesla V100 PCIe 32GB"),
    ("rtx 3080", "rtx-3080-10gb", "assuming RTX 3080 10GB; also: RTX 3080 12GB"),
    ("rtx 3060", "rtx-3060-12gb", "assuming RTX 3060 12GB; also: RTX 3060 8GB"),
    ("gaudi 3", "gaudi3-oam", "assuming Gaudi 3 OAM; also: Gaudi 3 PCIe"),
    # A bare model number is the whole family's shorthand: the card it spells (the desktop one) is assumed, and the
    # lookup names the family's other products, the way "a100" names the other A100s.
    ("4090", "rtx-4090", "assuming RTX 4090; also: RTX 4090 D, RTX 4090 Laptop"),
    ("GeForce 4090", "rtx-4090", "assuming RTX 4090; also: RTX 4090 D, RTX 4090 Laptop"),
    ("4080", "rtx-4080", "assuming RTX 4080; also: RTX 4080 SUPER, RTX 4080 Laptop"),
    ("5090", "rtx-5090", "assuming RTX 5090; also: RTX 5090 Laptop"),
    ("5080", "rtx-5080", "assuming RTX 5080; also: RTX 5080 Laptop"),
    ("4070", "rtx-4070", "assuming RTX 4070; also: RTX 4070 SUPER, RTX 4070 Ti SUPER, RTX 4070 Ti, RTX 4070 Laptop"),
    ("4060", "rtx-4060", "assuming RTX 4060; also: RTX 4060 Ti 16GB, RTX 4060 Ti 8GB, RTX 4060 Laptop"),
    ("5070", "rtx-5070", "assuming RTX 5070; also: RTX 5070 Ti, RTX 5070 Ti Laptop"),
    ("3090", "rtx-3090", "assuming RTX 3090; also: RTX 3090 Ti"),
    ("2080", "rtx-2080", "assuming RTX 2080; also: RTX 2080 Ti, RTX 2080 SUPER"),
    ("3080", "rtx-3080-10gb", "assuming RTX 3080 10GB; also: RTX 3080 12GB, RTX 3080 Ti, RTX 3080 Ti Laptop"),
    ("3060", "rtx-3060-12gb", "assuming RTX 3060 12GB; also: RTX 3060 8GB, RTX 3060 Ti, RTX 3060 Laptop"),
    # Variants with no common default: the lookup asks, naming them.
    ("4060ti", None, "'4060ti' matches several GPUs: RTX 4060 Ti 16GB, RTX 4060 Ti 8GB"),
    ("5060 ti", None, "'5060 ti' matches several GPUs: RTX 5060 Ti 16GB, RTX 5060 Ti 8GB"),
    ("a100 pcie", None, "'a100 pcie' matches several GPUs: A100 40GB PCIe, A100 80GB PCIe"),
    ("7900", None, "'7900' matches several GPUs: RX 7900 XTX, RX 7900 XT, RX 7900 GRE"),
    ("1660", None, "'1660' matches several GPUs: GTX 1660 Ti, GTX 1660 SUPER"),
    # Unknown names get suggestions, never a near miss.
    ("rtx 4009", None, "unknown GPU 'rtx 4009'; did you mean RTX 4090"),
    ("h2000", None, UNKNOWN),
    ("rtx 6000", None, UNKNOWN),
    ("4070 ti 16gb", None, UNKNOWN),
]


def _present(catalog: Catalog, expected: str | None) -> bool:
    return expected is None or any(spec.id == expected for spec in catalog)


@pytest.mark.parametrize(("typed", "expected", "said"), NAMES, ids=[row[0] for row in NAMES])
def test_every_name_resolves_to_its_entry_or_says_why_not(catalog, typed: str, expected: str | None,
                                                          said: str | None) -> None:
    if not _present(catalog, expected):
        pytest.skip(f"{expected} is not in the catalog")
    if expected is None:
        assert said is not None, "a name that resolves to nothing says what it says"
        with pytest.raises(GpuflyError) as caught:
            catalog.resolve(typed)
        assert caught.value.message.startswith(said) if said.startswith("'") else said in caught.value.message
        assert "\n" not in caught.value.message
        return
    resolution = catalog.resolve(typed)
    assert resolution.spec.id == expected
    if said is None:
        assert resolution.assumed is None and resolution.alternatives == ()
    else:
        assert resolution.assumed is not None and resolution.assumed.startswith(said)
        assert all(name in resolution.assumed for name in resolution.alternatives)
    assert catalog.get(typed) is resolution.spec


def test_the_table_covers_at_least_sixty_names() -> None:
    assert len(NAMES) >= 60


@pytest.mark.parametrize(("typed", "not_this"), [
    ("h20", "h200-sxm"), ("4070 ti", "rtx-4070-ti-super"), ("5060", "rtx-5060-ti-8gb"), ("m3", "m3-max"),
    ("4090", "rtx-4090-d"), ("4090", "rtx-4090-laptop"), ("l40", "l40s"), ("a10", "a10g"), ("rtx 6000", "rtx-6000-ada"),
    ("5070 ti", "rtx-5070-ti-laptop"), ("rtx 5070 ti", "rtx-5070-ti-laptop"), ("b100", "b200"), ("b10", "b100"),
])
def test_a_partial_name_never_reaches_another_product(catalog, typed: str, not_this: str) -> None:
    assert not_this not in [spec.id for spec in catalog.find(typed)]


def test_the_hint_names_a_variant_to_type(catalog) -> None:
    with pytest.raises(GpuflyError) as caught:
        catalog.resolve("a100 pcie")
    assert caught.value.hint is not None and "A100 40GB PCIe" in caught.value.hint


def _spec(id: str, name: str, vram: float, **fields) -> GpuSpec:
    base = dict(id=id, name=name, full_name=name, vendor="nvidia", segment="datacenter", architecture="Hopper",
                vram_gib=vram, memory_type="HBM3", memory_bandwidth_gbps=3000, launch_year=2023,
                sources=("https://example.org",))
    return GpuSpec(**{**base, **fields})


def test_two_declared_defaults_for_one_name_are_caught_and_then_ask() -> None:
    catalog = Catalog([_spec("x-sxm", "X 80GB SXM", 80, default_for=("x",)),
                       _spec("x-pcie", "X 80GB PCIe", 80, default_for=("x",))])
    assert catalog.ambiguous_keys() == {"default_for x": ["x-sxm", "x-pcie"]}
    with pytest.raises(GpuflyError, match="'x' matches several GPUs: X 80GB SXM, X 80GB PCIe"):
        catalog.resolve("x")


def test_a_name_missing_only_a_qualifier_says_what_it_assumed() -> None:
    catalog = Catalog([_spec("y-pcie-16gb", "Y PCIe 16GB", 16)])
    resolution = catalog.resolve("y")
    assert resolution.spec.id == "y-pcie-16gb" and resolution.assumed == "assuming Y PCIe 16GB"


@pytest.mark.parametrize("reported, memory_gib, expected", [
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"),
    ("NVIDIA A100-SXM4-80GB", 80, "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", 40, "a100-sxm4-40gb"),
    ("Tesla V100-SXM2-32GB", 32, "v100-sxm2-32gb"),
    ("Tesla T4", 15, "t4"),
    ("NVIDIA GeForce RTX 3090", 24, "rtx-3090"),
    ("NVIDIA GeForce RTX 3080", 10, "rtx-3080-10gb"),
    ("NVIDIA GeForce RTX 3080", 12, "rtx-3080-12gb"),
    ("NVIDIA GeForce RTX 3060", 12, "rtx-3060-12gb"),
    ("NVIDIA GeForce RTX 4060 Ti", 16, "rtx-4060-ti-16gb"),
    ("NVIDIA H200", 140.4, "h200-sxm"),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", 16, "rtx-4090-laptop"),
    ("NVIDIA GeForce RTX 5080 Laptop GPU", 16, "rtx-5080-laptop"),
    ("NVIDIA GeForce RTX 5090 Laptop GPU", 24, "rtx-5090-laptop"),
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", 12, "rtx-5070-ti-laptop"),
    ("NVIDIA GeForce RTX 5070 Ti", 16, "rtx-5070-ti"),
])
def test_driver_names_match_their_entry(catalog, reported: str, memory_gib: float, expected: str) -> None:
    if not _present(catalog, expected):
        pytest.skip(f"{expected} is not in the catalog")
    spec = catalog.match_device(reported, int(memory_gib * 2**30))
    assert spec is not None and spec.id == expected


@pytest.mark.parametrize("reported, memory_gib", [
    ("NVIDIA GeForce RTX 3070 Laptop GPU", 8),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", 24),
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", 16),
    ("NVIDIA GeForce RTX 2050", 4),
    ("Tesla V100-PCIE-32GB", 16),
])
def test_a_device_the_catalog_lacks_is_none_never_a_near_miss(catalog, reported: str, memory_gib: float) -> None:
    assert catalog.match_device(reported, int(memory_gib * 2**30)) is None


def test_a_laptop_name_never_becomes_the_desktop_card_nor_the_reverse() -> None:
    desktop = _spec("rtx-z", "RTX Z", 24, segment="consumer", aliases=("NVIDIA GeForce RTX Z",))
    laptop = _spec("rtx-z-laptop", "RTX Z Laptop", 16, segment="laptop",
                   aliases=("NVIDIA GeForce RTX Z Laptop GPU", "rtx z"))
    catalog = Catalog([desktop, laptop])
    assert catalog.match_device("NVIDIA GeForce RTX Z Laptop GPU", 16 * 2**30) is laptop
    assert catalog.match_device("NVIDIA GeForce RTX Z", 24 * 2**30) is desktop
    assert Catalog([desktop]).match_device("NVIDIA GeForce RTX Z Laptop GPU", 24 * 2**30) is None


def test_without_memory_only_an_unambiguous_driver_name_matches(catalog) -> None:
    assert catalog.match_device("NVIDIA GeForce RTX 4090").id == "rtx-4090"
    assert catalog.match_device("NVIDIA GeForce RTX 3080") is None, "10 GB or 12 GB: the memory decides"


def test_normalize_drops_vendor_words_punctuation_and_spells_memory_one_way() -> None:
    assert normalize("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert normalize("Tesla V100-SXM2-16GB") == "v100sxm216gb"
    assert normalize("a100-80g") == normalize("A100 80 GB") == "a10080gb"


def test_every_name_the_data_gives_an_entry_resolves_to_that_entry(catalog) -> None:
    wrong = {}
    for spec in catalog:
        for typed in (spec.id, spec.name, spec.full_name, *spec.aliases):
            try:
                got = catalog.resolve(typed).spec.id
            except GpuflyError as error:
                got = error.message
            if got != spec.id:
                wrong[typed] = (spec.id, got)
    assert wrong == {}


def _family() -> Catalog:
    desktop = _spec("rtx-9000", "RTX 9000", 32, segment="consumer", aliases=("9000", "NVIDIA GeForce RTX 9000"))
    d = _spec("rtx-9000-d", "RTX 9000 D", 32, segment="consumer", aliases=("NVIDIA GeForce RTX 9000 D",))
    laptop = _spec("rtx-9000-laptop", "RTX 9000 Laptop", 24, segment="laptop",
                   aliases=("NVIDIA GeForce RTX 9000 Laptop GPU",))
    server = _spec("q9000", "Q9000 PCIe", 48)
    return Catalog([desktop, d, laptop, server])


def test_a_bare_model_number_says_it_assumed_the_desktop_card_and_names_the_rest_of_its_family() -> None:
    catalog = _family()
    resolution = catalog.resolve("9000")
    assert resolution.spec.id == "rtx-9000"
    assert resolution.assumed == "assuming RTX 9000; also: RTX 9000 D, RTX 9000 Laptop"
    assert resolution.alternatives == ("RTX 9000 D", "RTX 9000 Laptop")
    assert [spec.id for spec in catalog.find("9000")] == ["rtx-9000"], "the family is named, never matched"


@pytest.mark.parametrize("typed", ["RTX 9000", "rtx-9000", "NVIDIA GeForce RTX 9000", "9000 d", "rtx 9000 laptop"])
def test_a_name_that_spells_the_product_is_taken_as_meant(typed: str) -> None:
    resolution = _family().resolve(typed)
    assert resolution.assumed is None and resolution.alternatives == ()


def test_a_bare_number_no_product_is_spelled_by_asks_naming_the_family() -> None:
    catalog = Catalog([spec for spec in _family() if spec.id != "rtx-9000"])
    with pytest.raises(GpuflyError, match="'9000' matches several GPUs: RTX 9000 D, RTX 9000 Laptop"):
        catalog.resolve("9000")


def test_the_family_is_only_for_a_bare_number(catalog) -> None:
    assert [spec.id for spec in catalog.family("4090")] == ["rtx-4090", "rtx-4090-d", "rtx-4090-laptop"]
    for typed in ("rtx 4090", "rtx-4090", "4090 d", "a100", "h100"):
        assert catalog.family(typed) == []


@pytest.mark.parametrize(("typed", "assumed"), [
    ("4090", "assuming RTX 4090; also: RTX 4090 D, RTX 4090 Laptop"),
    ("RTX 4090", None),
    ("rtx-4090", None),
    ("A100 SXM 80GB", None),
])
def test_fit_says_what_a_gpu_name_assumed_and_puts_it_in_json(cli, typed: str, assumed: str | None) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", typed)
    assert result.code == 0, result.stderr
    assert (f"note: {assumed}" in result.stderr) if assumed else ("assuming" not in result.stderr)
    data = json.loads(cli("fit", "llama-3.1-8b", "--gpu", typed, "--json").stdout)
    assert data["results"][0]["assumed"] == assumed
