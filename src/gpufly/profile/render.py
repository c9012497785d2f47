"""The profiler's output: a Rich summary (step-time bar, findings first), JSON, and a standalone HTML page."""

from __future__ import annotations

import html
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _
from gpufly.jsonfile import write_json_atomic, write_text_atomic
from gpufly.palette import (
    BLUE,
    BLUISH_GREEN,
    NEUTRAL,
    ORANGE,
    REDDISH_PURPLE,
    SKY_BLUE,
    UNKNOWN_COLOUR,
    VERMILLION,
    text_colour_on,
)
from gpufly.profile.records import MIN_SPREAD_STEPS, Conditions, LoopSettings, ProfileData
from gpufly.profile.rules import Finding

PARTS: tuple[tuple[str, str, str], ...] = (
    ("data_wait_s", "data wait", VERMILLION),
    ("h2d_s", "host→device", ORANGE),
    ("forward_s", "forward", SKY_BLUE),
    ("backward_s", "backward", BLUE),
    ("optimizer_s", "optimizer", BLUISH_GREEN),
    ("sync_wait_s", "sync stall", REDDISH_PURPLE),
)
"""The step's parts, in the order a step runs; what is left is "other" (Python work, logging, the loss). A sync
made inside the model's forward pass counts in both "forward" and "sync stall"."""

NOT_BROKEN_DOWN = ("not looked inside", UNKNOWN_COLOUR)
"""A step outside the sampled (detailed) ones: its wall time and data wait are measured, its parts are not."""


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


def receipt(data: ProfileData) -> dict[str, Any]:
    """What the figures were measured on and with: the device, the versions, the steps, the batch."""
    s = data.settings
    batches = [step.batch_size for step in data.measured if step.batch_size is not None]
    return {
        "device": s.gpu_name or s.device, "cpu": s.cpu_name, "cpu_threads": s.cpu_threads,
        "torch": s.torch_version, "python": s.python_version, "gpufly": s.gpufly_version,
        "framework": s.framework, "keras": s.keras_version, "tensorflow": s.tensorflow_version,
        "steps": len(data.steps), "measured_steps": len(data.measured), "detailed_steps": len(data.detailed),
        "batch_size": s.batch_size or (statistics.median(batches) if batches else None),
    }


NOISY_SPREAD = 0.5
"""A run whose steps' p10-p90 band is wider than half the median step is marked noisy: its median still stands,
but a difference between two such runs smaller than the band says nothing."""


def noise_floor(data: ProfileData) -> dict[str, Any] | None:
    """The spread of the measured steps (the noise any comparison must clear) and the machine's load."""
    noise = data.noise()
    if noise is None:
        return None
    conditions = data.conditions or Conditions()
    known = noise.spread_known
    noisy = known and noise.spread > NOISY_SPREAD
    return {"median_step_s": noise.median_s, "median_low_s": noise.median_low_s, "median_high_s": noise.median_high_s,
            "p10_step_s": noise.p10_s if known else None, "p90_step_s": noise.p90_s if known else None,
            "spread": noise.spread if known else None, "measured_steps": noise.steps,
            "spread_why_not": None if known else (f"{noise.steps} measured step{'s' if noise.steps != 1 else ''}: a "
                                                  f"p10-p90 spread needs {MIN_SPREAD_STEPS} or more"),
            "noisy": noisy,
            "noisy_reason": (f"step times spread over {100 * noise.spread:.0f}% of the median (p10-p90), more than "
                             f"{100 * NOISY_SPREAD:.0f}%: a comparison with another run needs a difference larger than "
                             f"that, or a quieter machine and longer steps") if noisy else None,
            "load_average_start": conditions.load_average_start, "load_average_end": conditions.load_average_end,
            "cpu_count": conditions.cpu_count}


def own_cost(data: ProfileData) -> dict[str, Any] | None:
    """gpufly's own time in the loop, per step and as a share of the median step."""
    overhead = data.overhead
    median = data.median("wall_s")
    if overhead is None or overhead.per_step_s is None:
        return None
    return {"per_step_s": overhead.per_step_s, "share_of_median_step": overhead.per_step_s / median if median else None,
            "spent_s": overhead.spent_s, "hook_calls": overhead.hook_calls, "steps": overhead.steps,
            "detailed_steps": overhead.detailed_steps, "left_out_steps": overhead.left_out_steps,
            "how": "timed inside gpufly's hooks and wrappers, on the detailed steps and a sample of the others "
                   "(a lower bound: the calls into them are not timed)"}


def energy(data: ProfileData, samples_per_s: float | None) -> dict[str, Any]:
    """Joules per sample from NVML's energy counter (not sampled power): the counter's rise between the first and
    the last GPU reading over the time between them is the run's mean power, divided by the measured samples/s.

    The whole GPU's energy (other processes on it count too) and the whole run's mean power (warm-up included:
    the readings are not tied to steps), so the figure is for a GPU the loop has to itself.

    >>> from gpufly.profile.records import GpuReading
    >>> data = ProfileData(gpu=[GpuReading(time=0.0, energy_j=1000.0), GpuReading(time=10.0, energy_j=4000.0)])
    >>> energy(data, 600.0)["joules_per_sample"], energy(ProfileData(), 600.0)["why_not"]
    (0.5, 'no NVML energy counter (no GPU, or a card without it)')
    """
    counted = [r for r in data.gpu if r.energy_j is not None]
    if len(counted) < 2 or counted[-1].time <= counted[0].time:
        return {"joules_per_sample": None, "mean_power_w": None, "seconds": None,
                "why_not": ("no NVML energy counter (no GPU, or a card without it)" if not counted
                            else "fewer than two energy readings: the loop was shorter than the sampling interval")}
    seconds = counted[-1].time - counted[0].time
    joules = (counted[-1].energy_j or 0.0) - (counted[0].energy_j or 0.0)
    if joules < 0:  # the driver reloaded and the counter restarted
        return {"joules_per_sample": None, "mean_power_w": None, "seconds": seconds,
                "why_not": "the energy counter went backwards (the driver restarted)"}
    power = joules / seconds
    return {"joules_per_sample": power / samples_per_s if samples_per_s else None, "mean_power_w": power,
            "seconds": seconds, "why_not": None if samples_per_s else "no samples/s (no batch size seen)",
            "how": "NVML's energy counter over the run, the whole GPU's"}


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
        "energy": energy(data, samples / wall if samples and wall else None),
        "breakdown": {label: share for label, share, _ in breakdown(data)},
        "syncs_per_step": data.per_step("syncs"),
        "receipt": receipt(data),
        "noise": noise_floor(data),
        "overhead": own_cost(data),
        "settings": asdict(data.settings),
        "findings": [asdict(f) for f in findings],
        "crash": data.crash,
        "no_step_reason": data.no_step_reason,
        "exit_code": data.exit_code,
        "short_of_warmup": data.short_of_warmup,
        "trace": asdict(data.trace) if data.trace is not None else None,
    }


def receipt_lines(facts: dict[str, Any]) -> list[str]:
    """The receipt, the noise floor and gpufly's own cost, one line each, as the text and the page show them."""
    r = facts["receipt"]
    device = r["device"] if r["device"] != "cpu" else f"CPU ({r['cpu'] or 'unknown'}, {r['cpu_threads']} threads)"
    framework = (f"Keras {r['keras']} on TensorFlow {r['tensorflow']}" if r.get("framework") == "keras"
                 else f"torch {r['torch']}")
    lines = [f"measured on {device}; {framework}, Python {r['python']}, gpufly {r['gpufly']}; "
             f"{r['steps']} steps ({r['measured_steps']} measured, {r['detailed_steps']} of them looked inside); "
             f"batch {_shown(r['batch_size'])}"]
    noise = facts["noise"]
    if noise is not None:
        interval = (f", median {_ms(noise['median_step_s'])} [95%: {_ms(noise['median_low_s'])}-"
                    f"{_ms(noise['median_high_s'])}]" if noise["median_low_s"] is not None else "")
        load = ""
        if noise["load_average_start"] is not None:
            load = (f"; load average {noise['load_average_start']} -> {_shown(noise['load_average_end'])} on "
                    f"{noise['cpu_count']} CPUs")
        if noise["spread"] is None:
            lines.append(_("noise floor: not estimated ({why}); median {median}{interval}{load}").format(
                why=noise["spread_why_not"], median=_ms(noise["median_step_s"]), interval=interval, load=load))
        else:
            lines.append(f"noise floor: steps {_ms(noise['p10_step_s'])}-{_ms(noise['p90_step_s'])} (p10-p90, "
                         f"{100 * noise['spread']:.0f}% of the median){interval}{load}")
        if noise.get("noisy"):
            lines.append(f"noisy: {noise['noisy_reason']}")
    if facts.get("short_of_warmup"):
        lines.append(f"every one of the {r['steps']} steps fell inside the warm-up (--warmup): the figures come "
                     f"from the run's second half ({r['measured_steps']} steps); a smaller --warmup or a longer run "
                     "measures more")
    trace = facts.get("trace")
    if trace:
        top = ", ".join(f"{name} {ms:.1f} ms x{calls}" for name, ms, calls in trace["top"][:3])
        counted = (_("{count} GPU kernels").format(count=trace["kernels"]) if trace["device_busy_s"] is not None
                   else _("{count} CPU operator calls").format(count=trace["kernels"]))
        cost = trace.get("cost_s")
        lines.append(f"torch.profiler window: {trace['steps']} steps over {trace['window_s']:.3f} s, left out of the "
                     f"figures above (tracing slows them); {counted}"
                     + (f"; top: {top}" if top else "")
                     + (_("; starting and summarizing the trace took {ms:.1f} ms, between steps, outside gpufly's own "
                          "cost").format(ms=1000 * cost) if cost else ""))
    used = facts["energy"]
    if used["joules_per_sample"] is not None:
        lines.append(f"energy: {used['joules_per_sample']:.4g} J per sample ({used['mean_power_w']:.0f} W mean over "
                     f"{used['seconds']:.1f} s, {used['how']})")
    else:
        lines.append(f"energy: not measured ({used['why_not']})")
    cost = facts["overhead"]
    if cost is not None:
        share = cost["share_of_median_step"]
        # Keras compiles the step: only memory is read inside it, and the input wait on every step.
        looked = ("memory read" if r.get("framework") == "keras" else
                  "syncs, copies, forward/backward and memory looked at")
        left_out = cost.get("left_out_steps") or 0
        lines.append(f"gpufly's own cost: {1e6 * cost['per_step_s']:.1f} µs per step"
                     + (f" ({100 * share:.2f}% of the median step)" if share is not None else "")
                     + f", {cost['how']}; {looked} on {cost['detailed_steps']} of {cost['steps']} steps"
                     + (_("; the {count} torch.profiler steps left out").format(count=left_out) if left_out else ""))
    return lines


def _ms(seconds: float | None) -> str:
    return "N/A" if seconds is None else f"{1000 * seconds:.3g} ms"


def _shown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def emit(data: ProfileData, as_json: bool = False, html: str | Path | None = None, save: str | Path | None = None,
         quiet: bool = False) -> list[Finding]:
    """Diagnose, write the measurements and the HTML page as asked, then print (Rich or JSON unless ``quiet``).

    The files first: printing can fail (a closed pipe, a full disk) and must not lose what was measured. A file that
    exists is not replaced by a run that measured no step (``write_outputs``), and a note on stderr says so. A write
    that failed is raised after the report is printed, one GpuflyError for both files."""
    from gpufly.profile.rules import diagnose

    findings = diagnose(data)
    written = write_outputs(data, findings, html=html, save=save)
    if written.kept:
        sys.stderr.write(f"note: {written.kept_note()}\n")
    if as_json:
        print_json_report(data, findings)
    elif not quiet:
        print_report(data, findings)
    if written.errors:
        raise written.error()
    return findings


def write_hint() -> str:
    """The hint for an output that could not be written."""
    return _("choose a file in a folder that exists and that you can write to")


@dataclass
class Written:
    """What ``write_outputs`` did: the files it kept from an earlier run, and the writes that failed (as text)."""

    kept: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def kept_note(self) -> str:
        return _("kept {files} from an earlier run: this run measured no step, and its profile would have replaced "
                 "them").format(files=" and ".join(str(path) for path in self.kept))

    def error(self) -> GpuflyError:
        return GpuflyError("; ".join(self.errors), write_hint())


def write_outputs(data: ProfileData, findings: list[Finding], html: str | Path | None = None,
                  save: str | Path | None = None) -> Written:
    """Write the measurements (``save``) and the page (``html``); one failure does not stop the other.

    A run that measured no step (a script that raised before its first one) does not replace a file that is there
    already: that is most likely an earlier run's good profile. Where there is none, the file is written, and says
    why it holds no step (``no_step_reason``)."""
    written = Written()
    outputs: list[tuple[Path, Callable[[Path], None]]] = []
    if save is not None:  # the measurements first: they are what a rerun would cost
        outputs.append((Path(save), lambda path: write_json_atomic(path, data.to_dict())))
    if html is not None:
        outputs.append((Path(html), lambda path: write_html(path, data, findings)))
    for path, write in outputs:
        if not data.steps and path.exists():
            written.kept.append(path)
            continue
        failure = _write(lambda: write(path))  # noqa: B023 -- called at once, inside this iteration
        if failure is not None:
            written.errors.append(failure)
    return written


def _write(write: Callable[[], None]) -> str | None:
    """Write one output; a failure is returned as text, so one bad path does not lose the other file."""
    try:
        write()
    except GpuflyError as exc:
        return exc.message
    return None


def settings_line(s: LoopSettings) -> str:
    """The loop's settings as the text report shows them, in the framework's own terms."""
    if s.framework == "keras":
        return (f"settings: dtype {s.model_dtype or 'N/A'}, mixed precision {s.autocast or 'off'}, batch "
                f"{s.batch_size}, input {s.input_pipeline or 'not tf.data'}, TF32 {s.tf32_matmul}, XLA {s.compiled}")
    return (f"settings: dtype {s.model_dtype or 'N/A'}, autocast {s.autocast or 'off'}, batch {s.batch_size}, "
            f"workers {s.num_workers}, pin_memory {s.pin_memory}, TF32 {s.tf32_matmul}, "
            f"cudnn.benchmark {s.cudnn_benchmark}, compiled {s.compiled}, channels_last {s.channels_last}")


def print_json_report(data: ProfileData, findings: list[Finding]) -> None:
    document = summary(data, findings) | {"measurements": data.to_dict()}
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def print_report(data: ProfileData, findings: list[Finding], width: int = 60, console: Any = None) -> None:
    """The text report on ``console`` (a ``rich.console.Console``; standard output's by default)."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    facts = summary(data, findings)
    if not data.steps:
        reason = data.no_step_reason or (f"the loop stopped: {data.crash}" if data.crash else None)
        console.print(_("gpufly profile: no complete step was measured") + (f" ({reason})" if reason else ""),
                      markup=False)
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
    for line in receipt_lines(facts):
        console.print(line, markup=False, style="dim")
    console.print(settings_line(s), markup=False, style="dim")
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
        console.print(Text(f"   gain:   {finding.gain or NO_GAIN}"))


NO_GAIN = "not estimated from these measurements"


def write_html(path: Path, data: ProfileData, findings: list[Finding]) -> None:
    """One self-contained page: the receipt, the step-time chart with each step's parts, the breakdown, the
    findings with their expected gain."""
    facts = summary(data, findings)
    write_text_atomic(path, _page(data, findings, facts))


CHART_W, CHART_H = 1000, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 12, 14, 44
MAX_BARS = 500
"""Past this many steps, each bar is the mean of consecutive steps (said on the axis)."""


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick interval (1, 2 or 5 x 10^k) giving about ``ticks`` ticks over ``span``."""
    raw = span / ticks if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _y_axis(data: ProfileData) -> tuple[float, float]:
    """The tick interval and the top of the y axis (ms): the longest measured step, rounded up to a tick."""
    top_s = max(s.wall_s for s in data.measured) or 1.0
    tick_ms = _nice_step(1000 * top_s)
    return tick_ms, math.ceil(1000 * top_s / tick_ms) * tick_ms


def _bins(steps: list[Any]) -> tuple[int, list[list[Any]]]:
    size = max(1, math.ceil(len(steps) / MAX_BARS))
    return size, [steps[i:i + size] for i in range(0, len(steps), size)]


def _stack(group: list[Any]) -> list[tuple[str, float, str]]:
    """The parts of a bar (mean over its steps), bottom up: measured parts, then the rest."""
    wall = statistics.fmean(s.wall_s for s in group)
    layers = [("data wait", statistics.fmean(s.data_wait_s for s in group), VERMILLION)]
    if all(s.detailed for s in group):
        for attribute, label, colour in PARTS[1:]:
            values = [getattr(s, attribute) for s in group]
            if all(v is not None for v in values) and any(values):
                layers.append((label, statistics.fmean(values), colour))
        rest = ("other", NEUTRAL)
    else:
        rest = NOT_BROKEN_DOWN
    layers.append((rest[0], max(0.0, wall - sum(v for _, v, _ in layers)), rest[1]))
    return layers


def _step_chart(data: ProfileData) -> str:
    """Each step's time (y, ms) by step number (x), stacked by its parts, with the median and the p10-p90 band.

    Scaled to the measured steps: a warm-up step (compilation, worker start) can be 100x longer, and scaled to it
    every measured bar would be a pixel high. Taller warm-up bars are clipped and marked with a triangle."""
    steps = data.steps
    if not steps:
        return "<p>No step measured.</p>"
    tick_ms, top_ms = _y_axis(data)
    plot_w = CHART_W - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = CHART_H - MARGIN_TOP - MARGIN_BOTTOM
    base = MARGIN_TOP + plot_h

    def y(seconds: float) -> float:
        return base - min(1000 * seconds, top_ms) / top_ms * plot_h

    size, groups = _bins(steps)
    bar_w = plot_w / len(groups)
    shapes = []
    for i, group in enumerate(groups):
        x = MARGIN_LEFT + i * bar_w
        wall = statistics.fmean(s.wall_s for s in group)
        warm = all(s.warmup for s in group)
        first, last = group[0].index, group[-1].index
        name = f"step {first}" if size == 1 else f"steps {first}-{last} (mean)"
        tip = f"{name}: {1000 * wall:.3g} ms" + (" (warm-up)" if warm else "")
        bottom = 0.0
        kind = "step warmup" if warm else "step"
        faded = ' opacity="0.45"' if warm else ""
        for label, seconds, colour in _stack(group):
            if seconds <= 0:
                continue
            y0, y1 = y(bottom), y(bottom + seconds)
            bottom += seconds
            if y0 - y1 <= 0:
                continue
            shapes.append(f'<rect class="{kind}" data-part="{html.escape(label)}" x="{x:.2f}" y="{y1:.2f}" '
                          f'width="{max(bar_w - 0.6, 0.4):.2f}" height="{y0 - y1:.2f}" fill="{colour}"'
                          f'{faded}><title>{html.escape(tip)}; {html.escape(label)} '
                          f'{1000 * seconds:.3g} ms</title></rect>')
        if wall > top_ms / 1000:
            middle, tip_y = x + bar_w / 2, MARGIN_TOP
            shapes.append(f'<polygon class="clipped" points="{middle - 4:.2f},{tip_y + 8:.2f} {middle + 4:.2f},'
                          f'{tip_y + 8:.2f} {middle:.2f},{tip_y:.2f}" fill="{ORANGE}"><title>{html.escape(tip)}'
                          f'</title></polygon>')
    axes = [f'<line x1="{MARGIN_LEFT}" y1="{base}" x2="{CHART_W - MARGIN_RIGHT}" y2="{base}" stroke="#8a96a3"/>',
            f'<line x1="{MARGIN_LEFT}" y1="{MARGIN_TOP}" x2="{MARGIN_LEFT}" y2="{base}" stroke="#8a96a3"/>']
    tick = 0.0
    while tick <= top_ms + 1e-9:
        ty = y(tick / 1000)
        axes.append(f'<line x1="{MARGIN_LEFT - 4}" y1="{ty:.2f}" x2="{CHART_W - MARGIN_RIGHT}" y2="{ty:.2f}" '
                    f'stroke="#2a333d"/><text class="ytick" x="{MARGIN_LEFT - 6}" y="{ty + 4:.2f}" '
                    f'text-anchor="end">{tick:g}</text>')
        tick += tick_ms
    index_step = _nice_step(steps[-1].index - steps[0].index + 1, ticks=8)
    first_index = steps[0].index
    tick_index = math.ceil(first_index / index_step) * index_step
    while tick_index <= steps[-1].index:
        tx = MARGIN_LEFT + (tick_index - first_index + 0.5) / len(steps) * plot_w
        axes.append(f'<line x1="{tx:.2f}" y1="{base}" x2="{tx:.2f}" y2="{base + 4}" stroke="#8a96a3"/>'
                    f'<text class="xtick" x="{tx:.2f}" y="{base + 17}" text-anchor="middle">{tick_index:g}</text>')
        tick_index += index_step
    per_bar = "" if size == 1 else f"; each bar the mean of {size} steps"
    axes.append(f'<text class="axis-label" x="{MARGIN_LEFT + plot_w / 2:.0f}" y="{CHART_H - 6}" '
                f'text-anchor="middle">step number{per_bar}</text>')
    axes.append(f'<text class="axis-label" transform="rotate(-90)" x="{-(MARGIN_TOP + plot_h / 2):.0f}" y="16" '
                f'text-anchor="middle">step time (ms)</text>')
    noise = data.noise()
    if noise is not None and noise.spread_known:
        band_top, band_bottom = y(noise.p90_s), y(noise.p10_s)
        axes.append(f'<rect class="noise-band" x="{MARGIN_LEFT}" y="{band_top:.2f}" width="{plot_w}" '
                    f'height="{max(band_bottom - band_top, 0.5):.2f}" fill="#ffffff" opacity="0.08">'
                    f'<title>p10-p90 of the measured steps: {1000 * noise.p10_s:.3g}-{1000 * noise.p90_s:.3g} ms'
                    f'</title></rect>')
    if noise is not None:
        axes.append(f'<line class="median" x1="{MARGIN_LEFT}" y1="{y(noise.median_s):.2f}" '
                    f'x2="{CHART_W - MARGIN_RIGHT}" y2="{y(noise.median_s):.2f}" stroke="#ffffff" '
                    f'stroke-dasharray="5 4"><title>median {1000 * noise.median_s:.3g} ms</title></line>')
    return (f'<svg id="steps" viewBox="0 0 {CHART_W} {CHART_H}" preserveAspectRatio="xMidYMid meet" '
            f'data-steps="{len(steps)}" data-scale-ms="{top_ms:g}" data-bin="{size}" role="img" '
            f'aria-label="step time in ms by step number">{"".join(axes)}{"".join(shapes)}</svg>')


def _legend(data: ProfileData) -> str:
    seen = {label for label, _, _ in breakdown(data)} | {"data wait"}
    entries = [(label, colour) for _, label, colour in PARTS if label in seen] + [("other", NEUTRAL)]
    if any(not s.detailed for s in data.steps):
        entries.append(NOT_BROKEN_DOWN)
    items = "".join(f'<span><i style="background:{colour}"></i>{html.escape(label)}</span>'
                    for label, colour in entries)
    clipped = bool(data.steps) and any(1000 * s.wall_s > _y_axis(data)[1] for s in data.steps)
    extra = "<span>▲ longer than the axis, clipped</span>" if clipped else ""
    noise = data.noise()
    band = ("- - median, light band: p10-p90 (noise floor)" if noise is None or noise.spread_known
            else _("- - median (too few measured steps for a p10-p90 band)"))
    return (f'<div class="legend">{items}<span>{html.escape(band)}</span>'
            f'<span>faded: warm-up</span>{extra}</div>')


def _page(data: ProfileData, findings: list[Finding], facts: dict[str, Any]) -> str:
    parts = "".join(f'<span style="flex:{share:.4f};background:{colour};color:{text_colour_on(colour)}" '
                    f'title="{html.escape(label)}">{html.escape(label)} {100 * share:.0f}%</span>'
                    for label, share, colour in breakdown(data))
    items = "".join(
        f"<li><b>{html.escape(f.title)}</b><br>seen: {html.escape(f.seen)}<br>why: {html.escape(f.why)}<br>"
        f"change: <code>{html.escape(f.change)}</code><br><span class=\"gain\">expected gain: "
        f"{html.escape(f.gain or NO_GAIN)}</span></li>"
        for f in findings) or "<li>No finding.</li>"
    median = facts["median_step_s"]
    crash = f"<p class='crash'>The loop stopped: {html.escape(data.crash)}</p>" if data.crash else ""
    if not data.steps and data.no_step_reason:
        said = _("No step was measured: {reason}").format(reason=data.no_step_reason)
        crash = f"<p class='crash'>{html.escape(said)}</p>"
    receipt_items = "".join(f"<li>{html.escape(line)}</li>" for line in receipt_lines(facts))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufly profile</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; background: #0f1419; color: #e6e9ee; margin: 2em auto;
       max-width: 1200px; padding: 0 2em; }}
.bar {{ display: flex; height: 28px; border-radius: 4px; overflow: hidden; margin: 0.5em 0 1.5em; }}
.bar span {{ font-size: 12px; padding: 6px; white-space: nowrap; overflow: hidden; }}
li {{ margin-bottom: 1em; }} code {{ color: #80deea; }} .crash {{ color: #ffb74d; }} .gain {{ color: #a5d6a7; }}
svg {{ background: #171d24; border-radius: 6px; width: 100%; height: auto; display: block; }}
svg text {{ fill: #b8c2cc; font-size: 12px; }} svg .axis-label {{ font-size: 13px; fill: #e6e9ee; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 0.4em 1.2em; margin: 0.5em 0 1.5em; font-size: 13px; }}
.legend i {{ display: inline-block; width: 11px; height: 11px; margin-right: 5px; border-radius: 2px; }}
.receipt {{ color: #b8c2cc; font-size: 13px; }} .receipt li {{ margin-bottom: 0.2em; }}
</style></head><body>
<h1>gpufly profile</h1>
<p>{facts['measured_steps']} steps measured of {facts['steps']}; median step
{"N/A" if median is None else f"{1000 * median:.3g} ms"}; device {html.escape(str(data.settings.gpu_name or
data.settings.device))}.</p>
<ul class="receipt" id="receipt">{receipt_items}</ul>
{crash}
<h2>Step time</h2>
{_step_chart(data)}
{_legend(data)}
<h2>Where a step goes</h2>
<div class="bar">{parts}</div>
<h2>Findings</h2>
<ol id="findings">{items}</ol>
</body></html>
"""
