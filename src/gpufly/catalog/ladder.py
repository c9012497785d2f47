"""The GPU ladder: a ranked horizontal bar chart of one metric, a picture to pin on a wall."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufly.catalog.query import Metric
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.jsonfile import write_bytes_atomic
from gpufly.palette import DERIVED_HATCH, architecture_colour, text_colour_on

CHART_SUFFIXES = (".png", ".svg")
LOG_SPAN = 30
"""Above this ratio of the largest figure drawn to the smallest, the axis is logarithmic: on a linear axis the
bottom third of a 2,500-to-2.6 TFLOPS ladder would be slivers a reader cannot compare."""


def _format_value(value: float) -> str:
    """Three significant figures or more, no ".0" on a whole number (80 GiB, 82.6 TFLOPS, 0.0365 TFLOPS/W)."""
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _plain(text: str) -> str:
    """``text`` for a matplotlib label: a dollar sign is a dollar, not the start of a formula."""
    return text.replace("$", r"\$")


def _nice_floor(value: float) -> float:
    """The largest 1, 2 or 5 times a power of ten at or below ``value``: where a log axis starts, on a tick."""
    decade = 10 ** math.floor(math.log10(value))
    return max(step * decade for step in (1, 2, 5) if step * decade <= value)


def _format_tick(value: float, _position: float = 0.0) -> str:
    """Tick labels as plain numbers (0.1, 20, 1,000), never powers of ten."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


@dataclass(frozen=True)
class _Axis:
    """The value axis: where it starts and ends, linear or logarithmic, and how to step along it."""

    log: bool
    low: float
    high: float

    @classmethod
    def fitting(cls, values: Sequence[float]) -> _Axis:
        top, bottom = max(values), min(values)
        if bottom > 0 and top / bottom > LOG_SPAN:
            low = _nice_floor(bottom / 1.5)  # the shortest bar still reads as a bar
            return cls(log=True, low=low, high=top * (top / low) ** 0.16)
        return cls(log=False, low=0.0, high=top * 1.16)

    def shift(self, value: float, fraction: float) -> float:
        """``value`` moved right by ``fraction`` of the axis' drawn width."""
        if self.log:
            return value * (self.high / self.low) ** fraction
        return value + (self.high - self.low) * fraction

    def share(self, value: float) -> float:
        """How much of the axis' width a bar reaching ``value`` covers."""
        if self.log:
            return math.log(value / self.low) / math.log(self.high / self.low)
        return (value - self.low) / (self.high - self.low)


def draw_ladder(specs: Sequence[GpuSpec], by: Metric, path: Path, source_line: str, derived_mark: str = "≈") -> int:
    """Draw ``specs`` (already ranked best first) as bars of ``by`` into ``path``; return bars drawn.

    GPUs without the figure are left out and counted in the footnote. Bars take their architecture's colour
    from ``gpufly.palette`` (the same in every gpufly chart) and the figure in the unit the table shows
    (``by.unit``); the axis is logarithmic, and says so, when the figures span more than ``LOG_SPAN`` times.
    Each bar carries the card's memory in GiB, the catalog's unit (the vendors' binary "GB"), unless the
    ladder is of memory itself, whose figure already says it. A figure derived from the architecture's per-SM
    rate rather than published is hatched, its value carries ``derived_mark``, and the footnote says so. The
    file type follows the suffix: .png (150 dpi) or .svg.
    """
    suffix = path.suffix.lower()
    if suffix not in CHART_SUFFIXES:
        raise GpuflyError(f"cannot draw a chart as '{suffix or path.name}'",
                          hint="name the file .png or .svg, e.g. --chart ladder.png")
    shown = [spec for spec in specs if by(spec) is not None]
    if not shown:
        raise GpuflyError(f"no GPU in the selection has a published {by.label.lower()}",
                          hint="loosen the filters or choose another --sort metric")
    left_out = len(specs) - len(shown)

    matplotlib = require("matplotlib", "gpufly gpus --chart")
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep SVG text as text: searchable, crisp, small
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    values = [float(by(spec) or 0.0) for spec in shown]
    axis = _Axis.fitting(values)
    colours = [architecture_colour(spec.architecture) for spec in shown]
    derived = [spec.is_derived(by.key) for spec in shown]
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.32 * len(shown)), layout="constrained")
    rows = range(len(shown))
    bars = ax.barh(rows, [value - axis.low for value in values], left=axis.low, color=colours, height=0.72)
    if axis.log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(_format_tick))
    ax.set_xlim(axis.low, axis.high)
    for bar, is_derived in zip(bars, derived, strict=True):
        if is_derived:
            bar.set_hatch(DERIVED_HATCH)
            bar.set_edgecolor("white")
    ax.set_yticks(list(rows), [spec.name for spec in shown], fontsize=9)
    ax.set_ylim(len(shown) - 0.4, -0.6)
    memory_labels = by.key != "vram_gib"
    for bar, spec, value, is_derived, colour in zip(bars, shown, values, derived, colours, strict=True):
        y = bar.get_y() + bar.get_height() / 2
        label = f"{derived_mark}{_format_value(value)}" if is_derived else _format_value(value)
        ax.text(axis.shift(value, 0.006), y, label, va="center", fontsize=8)
        if memory_labels:
            inside = axis.share(value) > 0.09
            ax.text(axis.shift(axis.low, 0.006) if inside else axis.shift(value, 0.07), y, f"{spec.vram_gib:g} GiB",
                    va="center", fontsize=7, fontweight="bold", color=text_colour_on(colour) if inside else "#444444")
    unit = f" ({by.unit})" if by.unit else ""
    scale = ", log scale" if axis.log else ""
    ax.set_xlabel(_plain(f"{by.unit or by.label}{scale}"), fontsize=10)  # the title has the label
    ax.set_title(_plain(f"GPU ladder: {by.label}{unit}"), fontsize=14, fontweight="bold", loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    architectures = dict.fromkeys(spec.architecture for spec in shown)
    ax.legend(handles=[Patch(color=architecture_colour(a), label=a) for a in architectures], title="Architecture",
              loc="lower right", fontsize=8, title_fontsize=9, frameon=False)
    footnote = source_line
    if any(derived):
        footnote += (f"  Hatched bars, {derived_mark}: not published; derived from the architecture's dense "
                     "ops/clock/SM x SMs x boost clock.")
    if left_out:
        footnote += f"  {left_out} GPU(s) without a published figure are not shown."
    fig.text(0.01, 0.002, footnote, fontsize=7, color="#555555", ha="left", va="bottom", wrap=True)
    layout = fig.get_layout_engine()
    if layout is not None:  # constrained layout, asked for when the figure was made
        layout.set(h_pad=0.25)  # type: ignore[call-arg]
    image = io.BytesIO()
    try:
        fig.savefig(image, format=suffix.lstrip("."), dpi=150)
    finally:
        plt.close(fig)
    write_bytes_atomic(path, image.getvalue(), hint="check that the folder exists and is writable")
    return len(shown)
