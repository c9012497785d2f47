"""The ladder chart is a real image of sensible size, in PNG or SVG, that agrees with the table and every other
chart: the palette's colour per architecture, the table's units, a log axis where the figures span decades."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from gpufly.catalog import default_catalog
from gpufly.catalog.ladder import LOG_SPAN, draw_ladder
from gpufly.catalog.query import METRICS, rank
from gpufly.errors import GpuflyError
from gpufly.palette import architecture_colour


def _texts(path) -> list[str]:
    return [node.text for node in ET.parse(path).getroot().iter() if node.text and node.text.strip()]


@pytest.fixture(scope="module")
def peak_svg(tmp_path_factory) -> Path:
    """The whole catalog's ladder of the peak 16-bit rate, drawn once for the tests that read it."""
    path = tmp_path_factory.mktemp("ladder") / "peak.svg"
    draw_ladder(rank(default_catalog(), METRICS["peak_tflops"]), METRICS["peak_tflops"], path, "Source: test")
    return path


@pytest.fixture(scope="module")
def memory_svg(tmp_path_factory) -> Path:
    """The whole catalog's memory ladder, drawn once."""
    path = tmp_path_factory.mktemp("ladder") / "vram.svg"
    draw_ladder(rank(default_catalog(), METRICS["vram_gib"]), METRICS["vram_gib"], path, "Source: test")
    return path


def test_png_ladder_is_a_readable_picture(catalog, tmp_path) -> None:
    path = tmp_path / "ladder.png"
    specs = rank(catalog, METRICS["peak_tflops"])
    drawn = draw_ladder(specs, METRICS["peak_tflops"], path, "Source: test")
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        width, height = image.size
        assert image.format == "PNG"
    assert drawn == sum(1 for spec in specs if spec.derived["peak_tflops"] is not None)
    assert 1200 <= width <= 2400
    assert height >= drawn * 40, "each bar needs room for a readable label"


def test_svg_ladder_is_valid_xml_with_every_name(catalog, memory_svg) -> None:
    root = ET.parse(memory_svg).getroot()
    assert root.tag.endswith("svg")
    text = memory_svg.read_text()
    assert "GPU ladder: Memory (GiB)" in text
    assert all(spec.name in text for spec in catalog)


def test_bars_give_memory_in_the_catalogs_unit(peak_svg) -> None:
    labels = [text for text in _texts(peak_svg) if text.endswith("B")]
    assert "24 GiB" in labels and "80 GiB" in labels
    assert not [label for label in labels if label.endswith(" GB")]


def test_unknown_chart_type_is_refused(catalog, tmp_path) -> None:
    with pytest.raises(GpuflyError, match=r"cannot draw a chart as '\.jpg'"):
        draw_ladder(list(catalog), METRICS["vram_gib"], tmp_path / "x.jpg", "s")
    assert not (tmp_path / "x.jpg").exists()


def test_selection_without_the_figure_is_refused(catalog, tmp_path) -> None:
    apple = [spec for spec in catalog if spec.vendor == "apple"]
    with pytest.raises(GpuflyError, match="no GPU in the selection has a published"):
        draw_ladder(apple, METRICS["fp8_tensor_tflops"], tmp_path / "x.png", "s")


def test_memory_is_labelled_once_on_the_memory_ladder(catalog, memory_svg) -> None:
    texts = _texts(memory_svg)
    assert not [text for text in texts if text.endswith(" GiB")], "the figure is the memory: no second label"
    assert texts.count("80") == sum(1 for spec in catalog if spec.vram_gib == 80), "80 GiB reads 80, not 80.0"


def test_figures_spanning_decades_get_a_log_axis_with_plain_ticks(catalog, peak_svg) -> None:
    peaks = [spec.derived["peak_tflops"] for spec in catalog if spec.derived["peak_tflops"]]
    assert max(peaks) / min(peaks) > LOG_SPAN
    texts = _texts(peak_svg)
    assert "GPU ladder: Peak dense FP16/BF16 (or FP32) rate (TFLOPS)" in texts and "TFLOPS, log scale" in texts
    assert {"10", "100", "1,000"} <= set(texts), "ticks as numbers a reader knows, not powers of ten"


def test_figures_within_one_decade_keep_a_linear_axis(catalog, tmp_path) -> None:
    path = tmp_path / "lanes.svg"
    draw_ladder(rank(catalog, METRICS["pcie_lanes"]), METRICS["pcie_lanes"], path, "Source: test")
    assert "PCIe lanes" in _texts(path) and not [text for text in _texts(path) if "log scale" in text]


def test_price_ratios_are_per_thousand_dollars_as_in_the_table(catalog, tmp_path) -> None:
    path = tmp_path / "usd.svg"
    specs = rank(catalog, METRICS["tflops_per_usd"])
    draw_ladder(specs, METRICS["tflops_per_usd"], path, "Source: test")
    texts = _texts(path)
    assert "GPU ladder: Peak TFLOPS per $1k of launch price (TFLOPS/$1k)" in texts, "a dollar, not a formula"
    per_usd = specs[0].derived["tflops_per_usd"]
    assert per_usd is not None
    label = f"{per_usd * 1000:,.0f}"
    assert {label, f"≈{label}"} & set(texts), "the best card's bar, per $1k"


def test_each_architecture_has_its_palette_colour(catalog, peak_svg) -> None:
    svg = peak_svg.read_text().lower()
    texts = _texts(peak_svg)
    for arch in {spec.architecture for spec in catalog if spec.derived["peak_tflops"] is not None}:
        assert f"fill: {architecture_colour(arch).lower()}" in svg, arch
        assert arch in texts, f"the legend names {arch}"
