"""The profiler's output: a Rich summary (step-time bar, findings first), JSON, and a standalone HTML page."""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.jsonfile import write_json_atomic, write_text_atomic
from gpufly.palette import BLUE, BLUISH_GREEN, NEUTRAL, ORANGE, SKY_BLUE, VERMILLION
from gpufly.profile.records import ProfileData
from gpufly.profile.rules import Finding

PARTS: tuple[tuple[str, str, str], ...] = (
    ("data_wait_s", "data wait", VERMILLION),
    ("h2d_s", "host→device", ORANGE),
    ("forward_s", "forward", SKY_BLUE),
    ("backward_s", "backward", BLUE),
    ("optimizer_s", "optimizer", BLUISH_GREEN),
)
"""The step's parts, in the order a step runs; what is left is "other" (Python work, logging, the loss)."""


def breakdown(data: ProfileData) -> list[tuple[str, float, str]]:
    """(label, share of step time, colour) for each part seen, and "other" for the rest."""
    parts = []
    for attribute, label, colour in PARTS:
        share = data.share(attribute)
        if share is not None and share > 0:
            parts.append((label, share, colour))
    rest = 1.0 - sum(share for _, share, _ in parts)
    if rest > 0.005:
        parts.append(("other", rest, NEUTRAL))
    return parts


def summary(data: ProfileData, findings: list[Finding]) -> dict[str, Any]:
    """The figures the views show, as one dict (also the `--json` document, with the raw steps)."""
    steps = data.measured
    samples = sum(s.batch_size or 0 for s in steps)
    wall = sum(s.wall_s for s in steps)
    return {
        "schema_version": 1,
        "command": data.command,
        "steps": len(data.steps),
        "measured_steps": len(steps),
        "median_step_s": data.median("wall_s"),
        "samples_per_s": samples / wall if samples and wall else None,
        "breakdown": {label: share for label, share, _ in breakdown(data)},
        "syncs_per_step": sum(s.syncs for s in steps) / len(steps) if steps else None,
        "settings": asdict(data.settings),
        "findings": [asdict(f) for f in findings],
        "crash": data.crash,
        "exit_code": data.exit_code,
    }


def emit(data: ProfileData, as_json: bool = False, html: str | Path | None = None, save: str | Path | None = None,
         quiet: bool = False) -> list[Finding]:
    """Diagnose, then print (Rich or JSON unless ``quiet``), write the HTML page and the measurements as asked."""
    from gpufly.profile.rules import diagnose

    findings = diagnose(data)
    if as_json:
        print_json_report(data, findings)
    elif not quiet:
        print_report(data, findings)
    failures = []
    if save is not None:  # the measurements first: they are what a rerun would cost
        failures.append(_write(lambda: write_json_atomic(Path(save), data.to_dict())))
    if html is not None:
        failures.append(_write(lambda: write_html(Path(html), data, findings)))
    errors = [f for f in failures if f is not None]
    if errors:
        raise GpuflyError("; ".join(errors), "choose a file in a folder that exists and that you can write to")
    return findings


def _write(write: Callable[[], None]) -> str | None:
    """Write one output; a failure is returned as text, so one bad path does not lose the other file."""
    try:
        write()
    except GpuflyError as exc:
        return exc.message
    return None


def print_json_report(data: ProfileData, findings: list[Finding]) -> None:
    document = summary(data, findings) | {"measurements": data.to_dict()}
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def print_report(data: ProfileData, findings: list[Finding], width: int = 60) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console()
    facts = summary(data, findings)
    if not data.steps:
        console.print("gpufly profile: no complete step was measured" +
                      (f" (the loop stopped: {data.crash})" if data.crash else ""), markup=False)
        return
    s = data.settings
    head = (f"{facts['measured_steps']} steps measured ({len(data.steps) - facts['measured_steps']} warm-up) on "
            f"{s.gpu_name or s.device}; median step {1000 * (facts['median_step_s'] or 0):.1f} ms")
    if facts["samples_per_s"]:
        head += f", {facts['samples_per_s']:,.0f} samples/s"
    console.print(head, markup=False)
    bar = Text()
    legend = Text()
    for label, share, colour in breakdown(data):
        cells = max(1, round(share * width))
        bar.append("█" * cells, style=colour)
        legend.append("■ ", style=colour)
        legend.append(f"{label} {100 * share:.0f}%   ")
    console.print(bar)
    console.print(legend)
    console.print(f"settings: dtype {s.model_dtype or 'N/A'}, autocast {s.autocast or 'off'}, batch {s.batch_size}, "
                  f"workers {s.num_workers}, pin_memory {s.pin_memory}, TF32 {s.tf32_matmul}, "
                  f"cudnn.benchmark {s.cudnn_benchmark}, compiled {s.compiled}, channels_last {s.channels_last}",
                  markup=False, style="dim")
    if data.crash:
        console.print(f"the loop stopped with {data.crash}; the measurements above go up to it", markup=False,
                      style="yellow")
    if not findings:
        console.print("No finding: nothing here holds the loop back by the profiler's rules.", style="green")
        return
    for number, finding in enumerate(findings, 1):
        console.print(Text(f"\n{number}. {finding.title}", style="bold"))
        console.print(Text(f"   seen:   {finding.seen}"))
        console.print(Text(f"   why:    {finding.why}"))
        console.print(Text(f"   change: {finding.change}", style="cyan"))
        if finding.gain:
            console.print(Text(f"   gain:   {finding.gain}"))


def write_html(path: Path, data: ProfileData, findings: list[Finding]) -> None:
    """One self-contained page: the step-time chart (data wait against the rest), the breakdown, the findings."""
    facts = summary(data, findings)
    write_text_atomic(path, _page(data, findings, facts))


def _step_chart(data: ProfileData, width: int = 900, height: int = 220) -> str:
    """Bars scaled to the measured steps: a warm-up step (compilation, worker start) can be 100x longer, and scaled
    to it every measured bar would be a pixel high. Taller warm-up bars are clipped and marked with a triangle."""
    steps = data.steps
    if not steps:
        return "<p>No step measured.</p>"
    top = max(s.wall_s for s in data.measured) or 1.0
    room = height - 20
    bar_w = width / len(steps)
    rects = []
    for i, step in enumerate(steps):
        x = i * bar_w
        clipped = step.wall_s > top
        total_h = min(step.wall_s, top) / top * room
        wait_h = min(step.data_wait_s, step.wall_s, top) / top * room
        opacity = "0.45" if step.warmup else "1"
        kind = "step warmup" if step.warmup else "step"
        tip = f"<title>step {step.index}: {1000 * step.wall_s:.1f} ms{' (warm-up)' if step.warmup else ''}</title>"
        rects.append(f'<rect class="{kind}" x="{x:.2f}" y="{height - total_h:.2f}" width="{max(bar_w - 1, 0.5):.2f}" '
                     f'height="{total_h - wait_h:.2f}" fill="{SKY_BLUE}" opacity="{opacity}">{tip}</rect>')
        rects.append(f'<rect class="wait" x="{x:.2f}" y="{height - wait_h:.2f}" width="{max(bar_w - 1, 0.5):.2f}" '
                     f'height="{wait_h:.2f}" fill="{VERMILLION}" opacity="{opacity}"/>')
        if clipped:
            middle, tip_y = x + bar_w / 2, height - room
            rects.append(f'<polygon class="clipped" points="{middle - 4:.2f},{tip_y + 6:.2f} {middle + 4:.2f},'
                         f'{tip_y + 6:.2f} {middle:.2f},{tip_y - 2:.2f}" fill="{ORANGE}">{tip}</polygon>')
    clipped_note = "; ▲ longer, clipped" if any(s.wall_s > top for s in steps) else ""
    label = f'<text x="4" y="14" fill="#8a96a3" font-size="12">max {1000 * top:.1f} ms{clipped_note}</text>'
    return (f'<svg id="steps" viewBox="0 0 {width} {height}" width="100%" height="{height}" '
            f'data-steps="{len(steps)}" data-scale-ms="{1000 * top:.3f}">{label}{"".join(rects)}</svg>')


def _page(data: ProfileData, findings: list[Finding], facts: dict[str, Any]) -> str:
    parts = "".join(f'<span style="flex:{share:.4f};background:{colour}" title="{html.escape(label)}">'
                    f'{html.escape(label)} {100 * share:.0f}%</span>' for label, share, colour in breakdown(data))
    items = "".join(
        f"<li><b>{html.escape(f.title)}</b><br>seen: {html.escape(f.seen)}<br>why: {html.escape(f.why)}<br>"
        f"<code>{html.escape(f.change)}</code>" + (f"<br>gain: {html.escape(f.gain)}" if f.gain else "") + "</li>"
        for f in findings) or "<li>No finding.</li>"
    median = facts["median_step_s"]
    crash = f"<p class='crash'>The loop stopped: {html.escape(data.crash)}</p>" if data.crash else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufly profile</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; background: #0f1419; color: #e6e9ee; margin: 2em; }}
.bar {{ display: flex; height: 28px; border-radius: 4px; overflow: hidden; margin: 0.5em 0 1.5em; }}
.bar span {{ color: #111; font-size: 12px; padding: 6px; white-space: nowrap; overflow: hidden; }}
li {{ margin-bottom: 1em; }} code {{ color: #80deea; }} .crash {{ color: #ffb74d; }}
svg {{ background: #171d24; border-radius: 6px; }}
</style></head><body>
<h1>gpufly profile</h1>
<p>{facts['measured_steps']} steps measured of {facts['steps']}; median step
{"N/A" if median is None else f"{1000 * median:.1f} ms"}; device {html.escape(str(data.settings.gpu_name or
data.settings.device))}.</p>
{crash}
<h2>Step time (red: waiting for data; faded: warm-up, scaled to the measured steps)</h2>
{_step_chart(data)}
<h2>Where a step goes</h2>
<div class="bar">{parts}</div>
<h2>Findings</h2>
<ol id="findings">{items}</ol>
</body></html>
"""
