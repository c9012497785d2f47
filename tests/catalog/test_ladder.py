"""The ladder chart is a real image of sensible size, in PNG or SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from gpufly.catalog.ladder import draw_ladder
from gpufly.catalog.query import METRICS, rank
from gpufly.errors import GpuflyError


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


def test_svg_ladder_is_valid_xml_with_every_name(catalog, tmp_path) -> None:
    path = tmp_path / "ladder.svg"
    specs = rank(catalog, METRICS["vram_gib"])
    draw_ladder(specs, METRICS["vram_gib"], path, "Source: test")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = path.read_text()
    assert "GPU ladder: Memory (GiB)" in text
    assert all(spec.name in text for spec in specs)


def test_bars_give_memory_in_the_catalogs_unit(catalog, tmp_path) -> None:
    path = tmp_path / "ladder.svg"
    specs = rank(catalog, METRICS["peak_tflops"])
    draw_ladder(specs, METRICS["peak_tflops"], path, "Source: test")
    labels = [node.text for node in ET.parse(path).getroot().iter() if node.text and node.text.endswith("B")]
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
