"""The GPU ladder: a ranked horizontal bar chart of one metric, a picture to pin on a wall."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from gpufly.catalog.query import Metric
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.jsonfile import write_bytes_atomic

CHART_SUFFIXES = (".png", ".svg")

# Tableau 10, then its light shades: distinct hues, handed out from the oldest architecture on.
_PALETTE = (
    "#4E79A7", "#F28E2B", "#59A14F", "#E15759", "#76B7B2", "#B07AA1", "#EDC948", "#9C755F",
    "#FF9DA7", "#17BECF", "#A0CBE8", "#FFBE7D", "#8CD17D", "#BAB0AC", "#D37295", "#499894",
)


def _format_value(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _label_colour(background: str) -> str:
    """White on dark bars, near-black on light ones (WCAG relative luminance)."""
    red, green, blue = (int(background[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "white" if 0.2126 * red + 0.7152 * green + 0.0722 * blue < 0.6 else "#222222"


def _arch_colours(specs: Sequence[GpuSpec]) -> dict[str, str]:
    by_age = sorted({spec.architecture for spec in specs},
                    key=lambda arch: min(s.launch_year for s in specs if s.architecture == arch))
    return {arch: _PALETTE[i % len(_PALETTE)] for i, arch in enumerate(by_age)}


def draw_ladder(specs: Sequence[GpuSpec], by: Metric, path: Path, source_line: str, derived_mark: str = "≈") -> int:
    """Draw ``specs`` (already ranked best first) as bars of ``by`` into ``path``; return bars drawn.

    GPUs without the figure are left out and counted in the footnote. Each bar carries the card's memory in
    GiB, the catalog's unit (the vendors' binary "GB"). A figure derived from the architecture's per-SM rate
    rather than published is hatched, its value carries ``derived_mark``, and the footnote says so. The file
    type follows the suffix: .png (150 dpi) or .svg.
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

    colours = _arch_colours(shown)
    values = [float(by(spec) or 0.0) for spec in shown]
    height = 1.6 + 0.32 * len(shown)
    fig, ax = plt.subplots(figsize=(11, height), layout="constrained")
    rows = range(len(shown))
    derived = [spec.is_derived(by.key) for spec in shown]
    bars = ax.barh(rows, values, color=[colours[s.architecture] for s in shown], height=0.72)
    for bar, is_derived in zip(bars, derived, strict=True):
        if is_derived:
            bar.set_hatch("////")
            bar.set_edgecolor("white")
    ax.set_yticks(list(rows), [spec.name for spec in shown], fontsize=9)
    ax.set_ylim(len(shown) - 0.4, -0.6)
    peak = max(values)
    ax.set_xlim(0, peak * 1.16)
    for bar, spec, value, is_derived in zip(bars, shown, values, derived, strict=True):
        y = bar.get_y() + bar.get_height() / 2
        label = f"{derived_mark}{_format_value(value)}" if is_derived else _format_value(value)
        ax.text(value + peak * 0.006, y, label, va="center", fontsize=8)
        inside = bar.get_width() > peak * 0.09
        ax.text(peak * 0.006 if inside else value + peak * 0.07, y, f"{spec.vram_gib:g} GiB",
                va="center", fontsize=7, fontweight="bold",
                color=_label_colour(colours[spec.architecture]) if inside else "#444444")
    unit = f" ({by.unit})" if by.unit else ""
    ax.set_xlabel(f"{by.label}{unit}", fontsize=10)
    ax.set_title(f"GPU ladder: {by.label}{unit}", fontsize=14, fontweight="bold", loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=[Patch(color=c, label=a) for a, c in colours.items()], title="Architecture",
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
        fig.savefig(image, format=path.suffix.lower().lstrip("."), dpi=150)
    finally:
        plt.close(fig)
    write_bytes_atomic(path, image.getvalue(), hint="check that the folder exists and is writable")
    return len(shown)
