"""The colours of every gpufly chart, so that Hopper is the same colour in the ladder, the report and any page.

Plain data and two small functions: no matplotlib, no I/O, cheap to import from any layer (the ladder in
``catalog/``, the report's HTML, the tuner's and the profiler's pages).

API:

- ``architecture_colour(name)``: the fill colour (``#RRGGBB``) of a GPU architecture as the catalog names it
  (``GpuSpec.architecture``: "Hopper", "CDNA 3", "Apple M4 GPU"...). An architecture missing from
  ``ARCHITECTURE_COLOURS`` gets ``UNKNOWN_COLOUR``, a neutral grey (a test keeps every catalog architecture in
  the table).
- ``text_colour_on(background)``: white or near-black, whichever contrasts more with that fill (a label inside
  a bar); ``contrast_ratio(a, b)`` is WCAG 2's measure behind it.
- ``SERIES``: Okabe-Ito's colours in order, for charts whose categories are not architectures (a tuner's
  verdicts, a profiler's step phases); ``GOOD``, ``WARNING``, ``BAD``, ``NEUTRAL`` name the ones that carry a
  meaning (bluish green, orange, vermillion, grey), the same meaning everywhere.
- ``DERIVED_HATCH``: the hatch of a bar whose figure is derived, not published (matplotlib's hatch string;
  an SVG page draws the same diagonal lines with a pattern).

Why these colours. NVIDIA's seven generations (three quarters of the catalog, and what most charts compare) take
Okabe and Ito's eight-colour set, designed to stay distinct under the common colour-vision deficiencies
(https://jfly.uni-koeln.de/color/, Wong, "Points of view: Color blindness", Nature Methods 8, 441 (2011),
https://www.nature.com/articles/nmeth.1618). AMD and Intel take Paul Tol's "muted" scheme, colour-blind safe by
its author's test, and Apple his "light" scheme, meant for filled shapes (https://personal.sron.nl/~pault/).
Within each vendor the colours stay distinct for colour-blind readers; no set of 22 colours can be across the
whole catalog, so a chart never relies on colour alone: each bar carries its GPU's name and the legend names
each architecture.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Okabe-Ito (https://jfly.uni-koeln.de/color/): black is left out, a black bar hides its label.
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"

SERIES: tuple[str, ...] = (BLUE, ORANGE, BLUISH_GREEN, VERMILLION, SKY_BLUE, REDDISH_PURPLE, YELLOW)
"""Okabe-Ito in the order a chart with few categories should take them (the first ones contrast most)."""

GOOD = BLUISH_GREEN
WARNING = ORANGE
BAD = VERMILLION
NEUTRAL = "#BBBBBB"
"""Tol's grey for "other" or "not known"."""

UNKNOWN_COLOUR = "#777777"
"""An architecture the table does not name yet (Tol's grey for missing data): visibly not one of the others."""

DERIVED_HATCH = "////"

ARCHITECTURE_COLOURS: Mapping[str, str] = MappingProxyType({
    # NVIDIA, newest first: Okabe-Ito.
    "Blackwell": BLUE,
    "Hopper": VERMILLION,
    "Ada Lovelace": BLUISH_GREEN,
    "Ampere": ORANGE,
    "Turing": SKY_BLUE,
    "Volta": REDDISH_PURPLE,
    "Pascal": YELLOW,
    # AMD: Tol muted.
    "CDNA 4": "#882255",  # wine
    "CDNA 3": "#CC6677",  # rose
    "CDNA 2": "#AA4499",  # purple
    "CDNA": "#DDCC77",  # sand
    "RDNA 4": "#332288",  # indigo
    "RDNA 3": "#88CCEE",  # cyan
    # Intel: the rest of Tol muted, then Tol light.
    "Gaudi 3": "#117733",  # green
    "Gaudi 2": "#44AA99",  # teal
    "Xe-HPC": "#999933",  # olive
    "Xe2-HPG": "#EE8866",  # light orange
    "Xe-HPG": "#BBCC33",  # pear
    # Apple: Tol light.
    "Apple M4 GPU": "#77AADD",  # light blue
    "Apple M3 GPU": "#FFAABB",  # pink
    "Apple M2 GPU": "#EEDD88",  # light yellow
    "Apple M1 GPU": "#DDDDDD",  # pale grey
})
"""One fill colour per architecture, keyed by the catalog's architecture names."""


def architecture_colour(architecture: str) -> str:
    """The colour of ``architecture`` in every chart; ``UNKNOWN_COLOUR`` for one the table lacks.

    >>> architecture_colour("Hopper"), architecture_colour("Rubin")
    ('#D55E00', '#777777')
    """
    return ARCHITECTURE_COLOURS.get(architecture, UNKNOWN_COLOUR)


def _relative_luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#RRGGBB`` (https://www.w3.org/TR/WCAG21/#dfn-relative-luminance)."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    red, green, blue = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def contrast_ratio(first: str, second: str) -> float:
    """WCAG 2 contrast ratio of two ``#RRGGBB`` colours, from 1 (the same) to 21 (black on white).

    >>> round(contrast_ratio("#000000", "#FFFFFF"), 1)
    21.0
    """
    darker, lighter = sorted((_relative_luminance(first), _relative_luminance(second)))
    return (lighter + 0.05) / (darker + 0.05)


LIGHT_TEXT = "#FFFFFF"
DARK_TEXT = "#222222"


def text_colour_on(background: str) -> str:
    """``LIGHT_TEXT`` or ``DARK_TEXT``, whichever contrasts more with ``background`` (a label inside a bar).

    >>> text_colour_on("#332288"), text_colour_on("#F0E442")
    ('#FFFFFF', '#222222')
    """
    return max((LIGHT_TEXT, DARK_TEXT), key=lambda text: contrast_ratio(text, background))
