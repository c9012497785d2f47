"""One colour per architecture, in every chart: the palette covers the catalog and keeps labels readable."""

from __future__ import annotations

import subprocess
import sys

from gpufly.palette import (
    ARCHITECTURE_COLOURS,
    NEUTRAL,
    SERIES,
    UNKNOWN_COLOUR,
    architecture_colour,
    contrast_ratio,
    text_colour_on,
)


def test_every_catalog_architecture_has_its_own_colour(catalog) -> None:
    architectures = {spec.architecture for spec in catalog}
    assert architectures <= set(ARCHITECTURE_COLOURS), architectures - set(ARCHITECTURE_COLOURS)
    colours = list(ARCHITECTURE_COLOURS.values())
    assert len(set(colours)) == len(colours), "two architectures share a colour"
    assert UNKNOWN_COLOUR not in colours and NEUTRAL not in colours


def test_an_architecture_the_table_lacks_is_grey_not_another_ones_colour() -> None:
    assert architecture_colour("Rubin") == UNKNOWN_COLOUR
    assert architecture_colour("Hopper") == ARCHITECTURE_COLOURS["Hopper"]


def test_labels_inside_bars_are_readable_on_every_colour() -> None:
    for colour in (*ARCHITECTURE_COLOURS.values(), *SERIES, UNKNOWN_COLOUR):
        # WCAG 2.1 asks 3:1 of large or bold text and of graphics (1.4.3, 1.4.11); every fill here gives 4:1 or more.
        assert contrast_ratio(text_colour_on(colour), colour) >= 3, colour


def test_the_palette_imports_without_matplotlib() -> None:
    script = "import sys, gpufly.palette; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
