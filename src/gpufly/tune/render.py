"""The tuner's HTML page: a speedup chart over every trial, the results table and the code to paste.

Self-contained (inline SVG and CSS, nothing fetched), so it can be attached to a ticket or a
pull request. Pure: it takes the rows the CLI prints, so it is tested without torch.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from gpufly.i18n import gettext as _
from gpufly.jsonfile import write_text_atomic
from gpufly.palette import BAD, GOOD, NEUTRAL, WARNING
from gpufly.tune.energy import energy_line
from gpufly.tune.trial import clip
from gpufly.tune.verdict import DRIFT_TOLERANCE, METRIC_TOLERANCE, judgeable

VERDICT_COLOURS = {"safe": GOOD, "baseline": GOOD, "seed": GOOD, "unsafe": WARNING, "unjudged": NEUTRAL}
"""Bar colours: safe trials (and the baseline) green, unsafe amber, those whose accuracy could not be judged grey;
failures have no bar."""


def row_verdict(row: dict[str, Any]) -> str:
    """The row's verdict word (``TrialResult.verdict``; from its status and role for a row written without it)."""
    verdict = row.get("verdict")
    if verdict:
        return str(verdict)
    if row["status"] != "ok":
        return str(row["status"])
    role = row.get("role") or "trial"
    return "safe" if role == "trial" else str(role)


def verdict_text(row: dict[str, Any], error_chars: int | None = None) -> str:
    """The verdict in words: safe; unjudged, with why accuracy could not be judged; unsafe, with the measure that
    decided it and how far it moved (the metric dropped, or the probe loss drifted); or the failure, with its
    reason whole (cut at a word boundary with an ellipsis only when ``error_chars`` is given); and, for a stage the
    stages after it do not build on, why."""
    verdict = row_verdict(row)
    text = {"baseline": "baseline", "seed": "baseline, second seed"}.get(verdict, verdict)
    if verdict == "unjudged":
        text = f"unjudged: accuracy not judged, {row.get('unjudged') or 'seeds too far apart'}"
    elif verdict == "unsafe":
        because = row.get("unsafe_because")
        drop = row.get("metric_drop")
        if because:
            text = f"unsafe: {because}"
        else:  # a row written before the tuner recorded what decided it
            text = ("unsafe: metric dropped" if drop is not None and drop > METRIC_TOLERANCE
                    else "unsafe: loss drifted")
    if row.get("error"):
        error = str(row["error"])
        text += f": {error if error_chars is None else clip(error, error_chars)}"
    dropped = row.get("dropped")
    if dropped:
        text += "; not built on" + ("" if dropped == row["status"] else f": {dropped}")
    return text


def paired_text(row: dict[str, Any]) -> str:
    """What the row's speedup is the ratio of: its throughput over the baseline's measured beside it (geometric means
    of the paired runs after A/B rounds), so the speedup can be checked from the row; "—" where there is none.

    >>> paired_text({"paired_throughput": 30.2, "paired_baseline": 31.8, "pairs": 1, "role": "trial"})
    '30 / 32'
    >>> paired_text({"paired_throughput": 121.0, "paired_baseline": 100.0, "pairs": 4, "role": "trial"})
    '121 / 100'
    """
    mine, beside = row.get("paired_throughput"), row.get("paired_baseline")
    if mine is None or beside is None or row.get("role") not in (None, "trial"):
        return "—"
    return f"{mine:,.0f} / {beside:,.0f}"


PAIRED_NOTE = ("the trial's throughput over the baseline's measured beside it (\"trial / baseline beside it\"), "
               "the baseline interpolated between its runs just before and just after the trial; after "
               "A/B rounds, the geometric means of the paired runs. The throughput column shows one run: the median "
               "run of a configuration run more than once")
"""The footnote that says how to derive each row's speedup from what the row shows."""


def noise_text(noise: dict[str, Any] | None) -> str | None:
    """The baseline's runs in figures a reader can check: how many, their lowest and highest throughput and their
    ratio, then the noise floor under its exact name (None when the baseline ran once).

    >>> text = noise_text({"baseline_runs": 4, "noise_floor": 1.171, "throughputs": [4786.0, 4043.0, 33677.0]})
    >>> text.split("; ")[0]
    'the baseline ran 4 times through the run: 4,043-33,677 samples/s (8.33x apart)'
    >>> text.split("; ")[1]
    'noise floor (standard deviation of the log throughput) 117.1%'
    """
    if not noise or noise.get("noise_floor") is None:
        return None
    runs = [t for t in noise.get("throughputs") or [] if t > 0]
    spread = (_("{low:,.0f}-{high:,.0f} {unit}/s ({ratio:.2f}x apart)").format(
        low=min(runs), high=max(runs), unit=noise.get("unit") or "samples", ratio=max(runs) / min(runs))
        if runs else _("no throughput"))
    return _("the baseline ran {count} times through the run: {spread}; noise floor (standard deviation of the log "
             "throughput) {floor:.1%}").format(count=noise["baseline_runs"], spread=spread, floor=noise["noise_floor"])


def accuracy_text(accuracy: dict[str, Any]) -> str:
    """How many steps the accuracy test used, whether two seeds of the baseline agreed enough to judge it and by
    which measure: each measure's seed-to-seed gap and whether it judged (a trial is unsafe past its tolerance); or,
    with no seed drift known, that fixed tolerances judged it."""
    parts = []
    judged_any = False
    for what, key, judged_key, tolerance in (("probe loss", "seed_loss_drift", "loss_judged", DRIFT_TOLERANCE),
                                             ("metric", "seed_metric_drift", "metric_judged", METRIC_TOLERANCE)):
        drift = accuracy.get(key)
        if drift is None:
            continue
        judged = accuracy.get(judged_key, judgeable(drift, tolerance))
        judged_any = judged_any or bool(judged)
        parts.append(f"{what} {drift:.1%} apart ({'judged' if judged else 'too far to judge'})")
    steps = accuracy.get("steps")
    if not parts:
        return _("judged after {steps} steps with fixed tolerances (probe loss {loss:.0%}, metric {metric:.0%}): no "
                 "seed drift known (see the second seed's row)").format(steps=steps, loss=DRIFT_TOLERANCE,
                                                                       metric=METRIC_TOLERANCE)
    judged = "judged" if judged_any else "not judged"
    return f"{judged} after {steps} steps; two seeds of the baseline: {'; '.join(parts)}"


def wrap_label(text: str, chars: int, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of at most ``chars`` characters, broken at spaces; what does not fit ends
    with an ellipsis at a word boundary (a word longer than a line is cut where it must be).

    >>> wrap_label("optimizer_impl=foreach + amp=bf16 + channels_last=True", 24)
    ['optimizer_impl=foreach +', 'amp=bf16…']
    >>> wrap_label("baseline", 24)
    ['baseline']
    """
    words = text.split()
    out: list[str] = []
    while words and len(out) < lines:
        line = words.pop(0)
        while words and len(line) + 1 + len(words[0]) <= chars:
            line += " " + words.pop(0)
        out.append(line if len(line) <= chars else clip(line, chars))
    if words:
        out[-1] = clip(out[-1] + " " + " ".join(words), chars)
    return out


LOG_STEPS = (1.0, 2.0, 5.0)
"""Tick values within a decade on the chart's log axis: 1, 2, 5, 10, 20, 50..."""


def axis_range(values: list[float], pad: float = 1.25) -> tuple[float, float]:
    """The log axis's ends: the values (and 1x) with some room, out to the next tick values.

    >>> axis_range([0.56, 3.11]), axis_range([1.0])
    ((0.2, 5.0), (0.5, 2.0))
    """
    low, high = min([*values, 1.0]) / pad, max([*values, 1.0]) * pad
    return _tick_below(low), _tick_above(high)


def _tick_below(value: float) -> float:
    decade = 10.0 ** math.floor(math.log10(value))
    return max(decade * step for step in LOG_STEPS if decade * step <= value * (1 + 1e-9))


def _tick_above(value: float) -> float:
    decade = 10.0 ** math.floor(math.log10(value))
    return min(decade * step for step in (*LOG_STEPS, 10.0) if decade * step >= value * (1 - 1e-9))


def log_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Tick values from ``low`` to ``high`` on a log axis: 1, 2, 5 in each decade, or the decades alone (and 1x) when
    that would be more than ``most``.

    >>> log_ticks(0.2, 5.0), log_ticks(0.001, 1000.0)
    ([0.2, 0.5, 1.0, 2.0, 5.0], [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0])
    """
    ticks = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for step in LOG_STEPS:
            value = float(f"{step * 10.0 ** exponent:.12g}")
            if low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                ticks.append(value)
    if len(ticks) > most:
        ticks = [t for t in ticks if abs(math.log10(t) - round(math.log10(t))) < 1e-9]
    return ticks


def speedup_chart(rows: list[dict[str, Any]], best: str | None, width: int = 960) -> str:
    """One row per trial with a throughput: a bar from 1x to its speedup on a log axis (left: slower, right: faster),
    a dot at the estimate and a whisker for its 95% interval, clamped to the axis (an arrowhead where the interval
    runs past it); the axis drawn with its line, ticks and label inside the SVG."""
    measured = [r for r in rows if r["speedup"] is not None and r["speedup"] > 0]
    if not measured:
        return "<p>" + html.escape(_("No trial measured a throughput.")) + "</p>"
    label_w, value_w, chars = 300, 170, 44
    plot_w = width - label_w - value_w
    labels = [wrap_label(r["configuration"] + (" (best)" if r["configuration"] == best else ""), chars)
              for r in measured]
    row_h = 14 + 14 * max(len(lines) for lines in labels)
    low, high = axis_range([r["speedup"] for r in measured])
    span = math.log(high) - math.log(low)

    def x(value: float) -> float:
        return label_w + (math.log(value) - math.log(low)) / span * plot_w

    axis_y = 8 + row_h * len(measured)
    height = axis_y + 62
    parts = []
    for tick in log_ticks(low, high):
        tx = x(tick)
        dash = "" if tick == 1.0 else ' stroke-dasharray="2 4"'
        parts.append(f'<line class="grid" x1="{tx:.2f}" x2="{tx:.2f}" y1="4" y2="{axis_y}" stroke="#3a4552"{dash}/>'
                     f'<line class="tick" x1="{tx:.2f}" x2="{tx:.2f}" y1="{axis_y}" y2="{axis_y + 5}" '
                     f'stroke="#8a96a3"/><text class="tick-label" x="{tx:.2f}" y="{axis_y + 18}" '
                     f'text-anchor="middle">{tick:g}x</text>')
    one = x(1.0)
    parts.append(f'<line x1="{one:.2f}" x2="{one:.2f}" y1="4" y2="{axis_y}" stroke="#8a96a3" stroke-dasharray="4 3"/>')
    for i, (row, lines) in enumerate(zip(measured, labels, strict=True)):
        y = 8 + i * row_h
        middle = y + row_h / 2
        speedup = row["speedup"]
        colour = VERDICT_COLOURS.get(row_verdict(row), BAD)
        spans = "".join(f'<tspan x="{label_w - 10}" dy="{0 if n == 0 else 14}">{html.escape(line)}</tspan>'
                        for n, line in enumerate(lines))
        first_line = middle + 4 - 7 * (len(lines) - 1)
        parts.append(f'<text class="label" x="{label_w - 10}" y="{first_line:.1f}" text-anchor="end">'
                     f'<title>{html.escape(row["configuration"])}</title>{spans}</text>')
        left, right = sorted((one, x(speedup)))
        parts.append(f'<rect class="trial" data-speedup="{speedup:.4f}" data-verdict="{row_verdict(row)}" '
                     f'data-status="{row["status"]}" x="{left:.2f}" y="{middle - 7:.1f}" '
                     f'width="{max(right - left, 1.5):.2f}" height="14" fill="{colour}" fill-opacity="0.55"/>')
        interval = row.get("speedup_interval") if row.get("role", "trial") == "trial" else None
        value = f"{speedup:.2f}x"
        if interval:
            parts.append(_whisker(interval, low, high, x, middle))
            value += f" [{interval[0]:.2f}-{interval[1]:.2f}]"
        parts.append(f'<circle class="estimate" cx="{x(speedup):.2f}" cy="{middle:.1f}" r="4" fill="{colour}" '
                     f'stroke="#e6e9ee"/><text class="value" x="{label_w + plot_w + 10}" y="{middle + 4:.1f}">'
                     f'{html.escape(value)}</text>')
    parts.append(f'<line class="axis" x1="{label_w}" x2="{label_w + plot_w}" y1="{axis_y}" y2="{axis_y}" '
                 f'stroke="#e6e9ee"/>')
    axis_label = [_("speedup over the baseline measured beside each trial (x, log scale; dashed line: 1x)"),
                  _("bar and dot: the estimate; whisker: its 95% interval, an arrowhead where it runs past the axis")]
    centre = label_w + plot_w / 2
    parts.append(f'<text class="axis-label" x="{centre:.2f}" y="{axis_y + 36}" text-anchor="middle">'
                 + "".join(f'<tspan x="{centre:.2f}" dy="{0 if n == 0 else 15}">{html.escape(line)}</tspan>'
                           for n, line in enumerate(axis_label)) + "</text>")
    return (f'<svg id="speedups" viewBox="0 0 {width} {height}" width="100%" height="{height}" '
            f'font-size="12" fill="#e6e9ee" role="img" aria-label="{html.escape("; ".join(axis_label))}">'
            f'{"".join(parts)}</svg>')


def _whisker(interval: list[float], low: float, high: float, x: Any, middle: float) -> str:
    """The interval's line, clamped to the axis: a cap at each end inside it, an arrowhead (and ``data-clamped``)
    at an end past it."""
    start, stop = max(interval[0], low), min(interval[1], high)
    if stop < start:  # the whole interval off the axis (cannot happen with the estimate inside it)
        return ""
    x1, x2 = x(start) if start > 0 else x(low), x(stop)
    clamped = [side for side, past in (("low", interval[0] < low), ("high", interval[1] > high)) if past]
    parts = [f'<line class="interval" data-low="{interval[0]:.4f}" data-high="{interval[1]:.4f}" '
             f'data-clamped="{" ".join(clamped) or "none"}" x1="{x1:.2f}" x2="{x2:.2f}" y1="{middle:.1f}" '
             f'y2="{middle:.1f}" stroke="#e6e9ee" stroke-width="1.5"/>']
    for end, side, direction in ((x1, "low", -1), (x2, "high", 1)):
        if side in clamped:
            tip = end + 6 * direction
            parts.append(f'<path class="clamped" d="M{end:.2f},{middle - 5:.1f} L{tip:.2f},{middle:.1f} '
                         f'L{end:.2f},{middle + 5:.1f} Z" fill="#e6e9ee"/>')
        else:
            parts.append(f'<line class="cap" x1="{end:.2f}" x2="{end:.2f}" y1="{middle - 5:.1f}" '
                         f'y2="{middle + 5:.1f}" stroke="#e6e9ee" stroke-width="1.5"/>')
    return "".join(parts)


def _cell(value: Any, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


def _speedup(row: dict[str, Any]) -> str:
    """The speedup, with its 95% interval when it has one."""
    interval = row.get("speedup_interval")
    text = _cell(row["speedup"], "{:.2f}x")
    return text if not interval or row.get("role") != "trial" else f"{text} [{interval[0]:.2f}-{interval[1]:.2f}]"


def conditions_text(receipt: dict[str, Any]) -> str:
    """What the figures were measured on: device, torch, Python and gpufly versions, steps and the baseline's
    batch."""
    parts = [f"device {receipt.get('device') or 'unknown'}"]
    versions = receipt.get("versions") or {}
    parts += [f"{name} {versions[key]}" for key, name in (("torch", "torch"), ("python", "Python"),
                                                          ("gpufly", "gpufly")) if versions.get(key)]
    parts.append(f"{receipt.get('steps')} steps per trial")
    if "batch_size" in receipt:
        batch = receipt["batch_size"]
        parts.append("batch not reported" if batch is None else f"batch {batch} (the baseline's)")
    return "; ".join(parts)


def receipt_text(receipt: dict[str, Any] | None) -> str:
    """What the figures were measured on and how noisy the machine was: device, versions, steps, batch, the
    baseline's spread, and the energy per unit (or why it was not measured)."""
    if not receipt:
        return "conditions not recorded"
    parts = [conditions_text(receipt)]
    noise = noise_text(receipt.get("noise"))
    if noise is not None:
        parts.append(noise)
    accuracy = receipt.get("accuracy") or {}
    if accuracy.get("steps") is not None:
        parts.append(_("accuracy {how}").format(how=accuracy_text(accuracy)))
    if "energy" in receipt:
        parts.append(energy_line(receipt["energy"]))
    return "; ".join(parts)


def page(workload: str, rows: list[dict[str, Any]], best: dict[str, Any] | None, results_file: str,
         conclusion: str | None = None, receipt: dict[str, Any] | None = None) -> str:
    """The whole page; ``best`` is ``{"configuration", "speedup", "code"}`` (and the interval, once confirmed), or
    None when the run named no winner: ``conclusion`` says why (by default, that the baseline failed).
    ``receipt`` is ``{"device", "versions", "steps", "batch_size", "noise", "accuracy"}`` as ``gpufly tune --json``
    gives them."""
    body = "".join(
        f"<tr><td>{html.escape(r['configuration'])}</td><td>{_cell(r['throughput'], '{:,.0f}')} "
        f"{html.escape(r['unit'])}/s</td><td>{html.escape(paired_text(r))}</td><td>{_speedup(r)}</td>"
        f"<td>{_cell(r['loss_drift'] if r['loss_drift'] is None else 100 * r['loss_drift'], '{:.2f}%')}</td>"
        f"<td>{_cell(None if r.get('metric_drop') is None else 100 * r['metric_drop'], '{:.2f}%')}</td>"
        f"<td>{html.escape(verdict_text(r))}</td></tr>"
        for r in rows)
    note = _(PAIRED_NOTE)
    if best is None:
        verdict = f"<p>{html.escape(conclusion or 'The baseline itself failed; nothing to compare against.')}</p>"
    else:
        code = html.escape("\n".join(best["code"]) or "# the baseline: no change helped")
        interval = best.get("speedup_interval")
        confirmed = (f" (95% interval {interval[0]:.2f}-{interval[1]:.2f}x over {best['rounds']} A/B rounds)"
                     if interval and best.get("rounds", 0) > 1 else "")
        verdict = (f"<p>Best safe configuration: <b>{html.escape(best['configuration'])}</b>, "
                   f"{best['speedup']:.2f}x the baseline{confirmed}.</p><pre id='code'>{code}</pre>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufly tune {html.escape(workload)}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; background: #0f1419; color: #e6e9ee; margin: 2em; }}
svg {{ background: #171d24; border-radius: 6px; }} pre {{ color: #80deea; background: #171d24; padding: 1em; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 4px 10px; border-bottom: 1px solid #2a323c; }}
td:nth-child(n+2):nth-child(-n+6) {{ text-align: right; white-space: nowrap; }}
</style></head><body>
<h1>gpufly tune {html.escape(workload)}</h1>
<p id="receipt">Measured on: {html.escape(receipt_text(receipt))}</p>
<h2>Speedup over the baseline (green: safe; amber: unsafe, the loss drifted or the metric dropped; grey: accuracy
not judged, the baseline's two seeds too far apart)</h2>
{speedup_chart(rows, None if best is None else best["configuration"])}
{verdict}
<h2>Trials</h2>
<table id="trials"><tr><th>configuration</th><th>throughput (one run)</th><th>trial / baseline beside it</th>
<th>speedup [95%]</th><th>loss drift</th><th>metric drop</th><th>verdict</th></tr>{body}</table>
<p id="paired">{html.escape(_("Speedup: {note}.").format(note=note))}</p>
<p>Results file: {html.escape(results_file)}</p>
</body></html>
"""


def write_html(path: Path, workload: str, rows: list[dict[str, Any]], best: dict[str, Any] | None,
               results_file: str, conclusion: str | None = None, receipt: dict[str, Any] | None = None) -> None:
    """The page, written atomically; the hint says the trial results are safe in ``results_file``."""
    write_text_atomic(path, page(workload, rows, best, results_file, conclusion, receipt),
                      f"the trial results are kept in {results_file}; pick another --html path")
