"""Names resolve the way people type them, and drivers' names map to the right variant."""

from __future__ import annotations

import pytest

from gpufly.catalog import normalize
from gpufly.errors import GpuflyError


@pytest.mark.parametrize("typed, expected", [
    ("4090", "rtx-4090"), ("rtx4090", "rtx-4090"), ("RTX 4090", "rtx-4090"),
    ("geforce rtx 4090", "rtx-4090"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("h100 sxm", "h100-sxm"), ("a100-80g", "a100-sxm4-80gb"), ("rtx 3080 12gb", "rtx-3080-12gb"),
    ("3080", "rtx-3080-10gb"), ("l40s", "l40s"), ("mi300x", "mi300x"), ("m4 max", "m4-max"),
    ("rtx 4060 ti", "rtx-4060-ti-16gb"),
])
def test_loose_names_resolve(catalog, typed: str, expected: str) -> None:
    assert catalog.get(typed).id == expected


def test_a_typo_gets_the_closest_names(catalog) -> None:
    with pytest.raises(GpuflyError) as caught:
        catalog.get("rtx 4009")
    assert "unknown GPU 'rtx 4009'" in caught.value.message
    assert "RTX 4090" in caught.value.message


def test_a_name_that_covers_variants_lists_them(catalog) -> None:
    with pytest.raises(GpuflyError, match="several GPUs") as caught:
        catalog.get("a100 pcie")
    assert "A100 40GB PCIe" in caught.value.message and "A100 80GB PCIe" in caught.value.message


@pytest.mark.parametrize("reported, memory_gib, expected", [
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"),
    ("NVIDIA A100-SXM4-80GB", 80, "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", 40, "a100-sxm4-40gb"),
    ("Tesla V100-SXM2-32GB", 32, "v100-sxm2-32gb"),
    ("Tesla T4", 15, "t4"),
    ("NVIDIA GeForce RTX 3090", 24, "rtx-3090"),
    ("NVIDIA GeForce RTX 3080", 10, "rtx-3080-10gb"),
    ("NVIDIA GeForce RTX 3080", 12, "rtx-3080-12gb"),
    ("NVIDIA H200", 140.4, "h200-sxm"),
])
def test_driver_names_match_their_entry(catalog, reported: str, memory_gib: float, expected: str) -> None:
    spec = catalog.match_device(reported, int(memory_gib * 2**30))
    assert spec is not None and spec.id == expected


def test_an_unlisted_laptop_part_is_not_passed_off_as_the_desktop_card(catalog) -> None:
    assert catalog.match_device("NVIDIA GeForce RTX 4070 Laptop GPU", 8 * 2**30) is None


def test_a_memory_variant_the_catalog_lacks_is_not_matched(catalog) -> None:
    assert catalog.match_device("NVIDIA GeForce RTX 4060 Ti", 16 * 2**30).id == "rtx-4060-ti-16gb"
    assert catalog.match_device("NVIDIA GeForce RTX 4060 Ti", 8 * 2**30) is None


def test_normalize_drops_vendor_words_and_punctuation() -> None:
    assert normalize("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert normalize("Tesla V100-SXM2-16GB") == "v100sxm216gb"
