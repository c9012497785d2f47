"""Inline SVG bar charts for the HTML report: drawn in Python as text, so the page needs no script, no font and
no network to show them.

One chart type serves every section: labelled horizontal bars, an x axis with its unit, an optional reference
mark per bar (the datasheet figure a measurement is held against), an optional interval per bar (the spread of
the repeats), and a log axis when the values span orders of magnitude (a linear axis would flatten the small ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from html import escape

from gpufly.palette import NEUTRAL

LOG_SPAN = 30.0
"""Largest/smallest value past which the axis turns logarithmic: beyond it, a linear axis leaves the smallest bars
a few pixels long."""
WIDTH = 780
LABEL_WIDTH = 190
RIGHT_MARGIN = 180
BAR_HEIGHT = 18
BAR_GAP = 6
TOP = 34
BOTTOM = 46


@dataclass(frozen=True)
class Bar:
    """One bar: its label, value and colour; ``low``/``high`` an interval around the value, ``reference`` a mark
    drawn across the bar (a spec line), ``text`` what is written after it, ``highlight`` to outline it."""

    label: str
    value: float
    colour: str = NEUTRAL
    low: float | None = None
    high: float | None = None
    reference: float | None = None
    text: str = ""
    highlight: bool = False
    hatched: bool = False


@dataclass(frozen=True)
class Axis:
    """Maps values to x pixels over [0, top] (linear) or [bottom, top] (log)."""

    bottom: float
    top: float
    log: bool
    left: float = LABEL_WIDTH
    width: float = WIDTH - LABEL_WIDTH - RIGHT_MARGIN

    def x(self, value: float) -> float:
        if self.log:
            clamped = min(max(value, self.bottom), self.top)
            share = math.log10(clamped / self.bottom) / math.log10(self.top / self.bottom)
        else:
            share = min(max(value, 0.0), self.top) / self.top if self.top > 0 else 0.0
        return self.left + share * self.width

    def ticks(self) -> list[float]:
        """Powers of ten on a log axis; about five round steps on a linear one."""
        if self.log:
            first, last = math.floor(math.log10(self.bottom)), math.ceil(math.log10(self.top))
            return [10.0 ** k for k in range(first, last + 1) if self.bottom <= 10.0 ** k <= self.top]
        step = _round_step(self.top / 5)
        return [step * i for i in range(int(self.top / step + 1e-9) + 1)]


def _round_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw``."""
    if raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def choose_axis(values: Sequence[float], log: bool | None = None) -> Axis:
    """A linear axis from zero, or a log one when ``log`` says so or (None) the values span more than LOG_SPAN."""
    positive = [v for v in values if v > 0]
    top = max(positive, default=1.0)
    bottom = min(positive, default=1.0)
    use_log = (top / bottom > LOG_SPAN) if log is None else log
    if use_log:
        return Axis(bottom=10.0 ** math.floor(math.log10(bottom)), top=10.0 ** math.ceil(math.log10(top)), log=True)
    step = _round_step(top * 1.05 / 5)
    return Axis(bottom=0.0, top=step * math.ceil(top * 1.05 / step), log=False)


def short_number(value: float) -> str:
    """A tick label: 1,200 / 45 / 3.5 / 0.02 / 10k / 1M."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e4:
        return f"{value / 1e3:g}k"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:g}"


def bar_chart(bars: Sequence[Bar], *, title: str, axis_label: str, chart_id: str, log: bool | None = None,
              legend: Sequence[tuple[str, str]] = (), tick: Callable[[float], str] = short_number,
              width: int = WIDTH, label_width: int = LABEL_WIDTH, text_width: int = RIGHT_MARGIN) -> str:
    """An SVG horizontal bar chart with a title, labelled x axis (``axis_label`` carries the unit), ticks, each
    bar's text, and a legend of (label, colour); ``chart_id`` names it for tests and links. ``label_width`` and
    ``text_width`` are the pixels left of the plot for the labels and right of it for each bar's text."""
    values = [b.value for b in bars] + [b.high for b in bars if b.high] + [b.reference for b in bars if b.reference]
    axis = replace(choose_axis(values, log), left=label_width, width=width - label_width - text_width)
    per_row = max(1, width // 175)
    legend_rows = math.ceil(len(legend) / per_row)
    plot_bottom = TOP + len(bars) * (BAR_HEIGHT + BAR_GAP)
    height = plot_bottom + BOTTOM + 18 * legend_rows
    scale = " (log scale)" if axis.log else ""
    parts = [f'<svg class="chart" id="{escape(chart_id)}" role="img" '
             f'data-bars="{len(bars)}" data-log="{int(axis.log)}" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" aria-label="{escape(title)}">',
             f'<title>{escape(title)}</title>',
             f'<text x="4" y="18" class="chart-title">{escape(title)}</text>',
             '<defs><pattern id="hatch-' + escape(chart_id) + '" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff" fill-opacity="0.0"/>'
             '<line x1="0" y1="0" x2="0" y2="6" stroke="#ffffff" stroke-width="2"/></pattern></defs>']
    for value in axis.ticks():
        x = axis.x(value)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{plot_bottom}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{plot_bottom + 14}" class="tick" text-anchor="middle">'
                     f'{escape(tick(value))}</text>')
    parts.append(f'<line x1="{axis.left}" y1="{plot_bottom}" x2="{axis.left + axis.width}" y2="{plot_bottom}" '
                 'class="axis"/>')
    parts.append(f'<text x="{axis.left + axis.width / 2:.1f}" y="{plot_bottom + 32}" class="axis-label" '
                 f'text-anchor="middle">{escape(axis_label + scale)}</text>')
    for row, bar in enumerate(bars):
        parts.extend(_bar(bar, row, axis, chart_id))
    for i, (label, colour) in enumerate(legend):
        x, y = 8 + (i % per_row) * 175, plot_bottom + BOTTOM + 4 + 18 * (i // per_row)
        parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{escape(colour)}"/>'
                     f'<text x="{x + 16}" y="{y + 10}" class="legend">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bar(bar: Bar, row: int, axis: Axis, chart_id: str) -> list[str]:
    y = TOP + row * (BAR_HEIGHT + BAR_GAP)
    middle = y + BAR_HEIGHT / 2
    start = axis.left if not axis.log else axis.x(axis.bottom)
    end = axis.x(bar.value)
    weight = ' font-weight="bold"' if bar.highlight else ""
    outline = ' stroke="#000000" stroke-width="2"' if bar.highlight else ""
    parts = [f'<text x="{axis.left - 6}" y="{middle + 4:.1f}" class="bar-label" text-anchor="end"{weight}>'
             f'{escape(bar.label)}</text>',
             f'<rect class="bar" x="{start:.1f}" y="{y}" width="{max(end - start, 1.0):.1f}" height="{BAR_HEIGHT}" '
             f'fill="{escape(bar.colour)}"{outline}><title>{escape(bar.label)}: {escape(bar.text)}</title></rect>']
    if bar.hatched:
        parts.append(f'<rect x="{start:.1f}" y="{y}" width="{max(end - start, 1.0):.1f}" height="{BAR_HEIGHT}" '
                     f'fill="url(#hatch-{escape(chart_id)})"/>')
    if bar.low is not None and bar.high is not None:
        low, high = axis.x(bar.low), axis.x(bar.high)
        parts.append(f'<path class="interval" d="M{low:.1f},{middle:.1f}H{high:.1f}M{low:.1f},{middle - 5:.1f}'
                     f'V{middle + 5:.1f}M{high:.1f},{middle - 5:.1f}V{middle + 5:.1f}"/>')
    text_x = end
    if bar.reference is not None:
        ref = axis.x(bar.reference)
        parts.append(f'<line class="reference" x1="{ref:.1f}" y1="{y - 3}" x2="{ref:.1f}" '
                     f'y2="{y + BAR_HEIGHT + 3}"/>')
        text_x = max(text_x, ref)
    if bar.text:
        parts.append(f'<text x="{text_x + 6:.1f}" y="{middle + 4:.1f}" class="bar-text">{escape(bar.text)}</text>')
    return parts
