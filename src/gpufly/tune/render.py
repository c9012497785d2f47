"""The tuner's HTML page: a speedup chart over every trial, the results table and the code to paste.

Self-contained (inline SVG and CSS, nothing fetched), so it can be attached to a ticket or a
pull request. Pure: it takes the rows the CLI prints, so it is tested without torch.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gpufly.jsonfile import write_text_atomic
from gpufly.palette import BAD, GOOD, NEUTRAL, WARNING
from gpufly.tune.energy import energy_line
from gpufly.tune.verdict import METRIC_TOLERANCE

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


def verdict_text(row: dict[str, Any], error_chars: int = 60) -> str:
    """The verdict in words: safe; unjudged, with why accuracy could not be judged; unsafe, with the reason (the
    probe loss drifted, or the evaluation metric dropped); or the failure; and, for a stage the stages after it do
    not build on, why."""
    verdict = row_verdict(row)
    text = {"baseline": "baseline", "seed": "baseline, second seed"}.get(verdict, verdict)
    if verdict == "unjudged":
        text = f"unjudged: accuracy not judged, {row.get('unjudged') or 'seeds too far apart'}"
    elif verdict == "unsafe":
        drop = row.get("metric_drop")
        text = ("unsafe: metric dropped" if drop is not None and drop > METRIC_TOLERANCE
                else "unsafe: loss drifted")
    if row.get("error"):
        text += f": {row['error'][:error_chars]}"
    dropped = row.get("dropped")
    if dropped:
        text += "; not built on" + ("" if dropped == row["status"] else f": {dropped}")
    return text


def speedup_chart(rows: list[dict[str, Any]], best: str | None, width: int = 900, bar_h: int = 22) -> str:
    """Horizontal bars, one per trial with a throughput, scaled to the largest speedup; a line at 1x."""
    measured = [r for r in rows if r["speedup"] is not None]
    if not measured:
        return "<p>No trial measured a throughput.</p>"
    label_w, right = 330, 70
    top = max(max(r["speedup"] for r in measured), 1.0)
    scale = (width - label_w - right) / top
    height = bar_h * len(measured) + 24
    parts = []
    for i, row in enumerate(measured):
        y = 4 + i * bar_h
        length = row["speedup"] * scale
        colour = VERDICT_COLOURS.get(row_verdict(row), BAD)
        mark = " (best)" if row["configuration"] == best else ""
        name = html.escape(row["configuration"][:48] + mark)
        parts.append(f'<text x="{label_w - 8}" y="{y + bar_h - 8}" text-anchor="end">{name}</text>'
                     f'<rect class="trial" data-speedup="{row["speedup"]:.4f}" data-verdict="{row_verdict(row)}" '
                     f'data-status="{row["status"]}" '
                     f'x="{label_w}" y="{y}" width="{length:.2f}" height="{bar_h - 4}" fill="{colour}"/>'
                     f'<text x="{label_w + length + 6:.2f}" y="{y + bar_h - 8}">{row["speedup"]:.2f}x</text>')
    one = label_w + scale
    parts.append(f'<line x1="{one:.2f}" x2="{one:.2f}" y1="0" y2="{height - 18}" stroke="#8a96a3" '
                 f'stroke-dasharray="4 3"/><text x="{one:.2f}" y="{height - 4}" text-anchor="middle">1x</text>')
    return (f'<svg id="speedups" viewBox="0 0 {width} {height}" width="100%" height="{height}" '
            f'font-size="12" fill="#e6e9ee">{"".join(parts)}</svg>')


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
    noise = receipt.get("noise") or {}
    if noise.get("noise_floor") is not None:
        parts.append(f"noise floor {noise['noise_floor']:.1%} (the baseline's throughput over "
                     f"{noise['baseline_runs']} runs through the search)")
    accuracy = receipt.get("accuracy") or {}
    if accuracy.get("steps") is not None:
        judged = accuracy.get("loss_judged", True) or accuracy.get("metric_judged", True)
        parts.append(f"accuracy judged after {accuracy['steps']} steps against two seeds of the baseline" if judged
                     else f"accuracy not judged: after {accuracy['steps']} steps two seeds of the baseline end too far "
                          "apart")
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
        f"{html.escape(r['unit'])}/s</td><td>{_speedup(r)}</td>"
        f"<td>{_cell(r['loss_drift'] if r['loss_drift'] is None else 100 * r['loss_drift'], '{:.2f}%')}</td>"
        f"<td>{html.escape(verdict_text(r, 120))}</td></tr>"
        for r in rows)
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
td:nth-child(2), td:nth-child(3), td:nth-child(4) {{ text-align: right; }}
</style></head><body>
<h1>gpufly tune {html.escape(workload)}</h1>
<p id="receipt">Measured on: {html.escape(receipt_text(receipt))}</p>
<h2>Speedup over the baseline (green: safe; amber: unsafe, the loss drifted or the metric dropped; grey: accuracy
not judged, the baseline's two seeds too far apart)</h2>
{speedup_chart(rows, None if best is None else best["configuration"])}
<p>Horizontal axis: throughput relative to the baseline (x), one bar per trial; the dashed line is 1x.</p>
{verdict}
<h2>Trials</h2>
<table id="trials"><tr><th>configuration</th><th>throughput</th><th>speedup</th><th>loss drift</th>
<th>verdict</th></tr>{body}</table>
<p>Results file: {html.escape(results_file)}</p>
</body></html>
"""


def write_html(path: Path, workload: str, rows: list[dict[str, Any]], best: dict[str, Any] | None,
               results_file: str, conclusion: str | None = None, receipt: dict[str, Any] | None = None) -> None:
    """The page, written atomically; the hint says the trial results are safe in ``results_file``."""
    write_text_atomic(path, page(workload, rows, best, results_file, conclusion, receipt),
                      f"the trial results are kept in {results_file}; pick another --html path")
