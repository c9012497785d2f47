"""`gpufly report --html`: the report as one self-contained page.

Inline CSS and inline SVG charts drawn in Python (``report/svg.py``): no script, no font, no stylesheet or image
from anywhere, so the page opens offline, from an e-mail or an air-gapped cluster, as it looked when written.
Public sources (the catalog's datasheets) are printed as text, never fetched. Colours come from
``gpufly.palette``, so an architecture has the same colour here as on the ladder chart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from gpufly.palette import BAD, GOOD, NEUTRAL, SERIES, WARNING, architecture_colour
from gpufly.report.svg import Bar, bar_chart

if TYPE_CHECKING:
    from gpufly.report.build import Report, TuneSummary
    from gpufly.report.fleet import CeilingChart, FleetSection
    from gpufly.report.machine import MachineReport
    from gpufly.report.models_fit import BuyRow, ModelFitRow
    from gpufly.report.peers import LadderPlace
    from gpufly.report.reaches import Reach, ReachSection
    from gpufly.report.setup import SetupSection

GIB = 2**30
STATUS_COLOURS = {"ok": GOOD, "warn": WARNING, "fail": BAD}
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1000px;padding:1.5em;
color:#222;background:#fff;line-height:1.45}
h1{margin:0 0 .2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
nav a{margin-right:1em}table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.25em .55em;text-align:left;vertical-align:top}th{background:#f4f4f4}
td.num{text-align:right;white-space:nowrap}.muted{color:#666;font-size:.9em}code,pre{background:#f4f4f4;
border-radius:3px;padding:.1em .3em;font-size:.9em}pre{padding:.6em;white-space:pre-wrap;word-break:break-all}
.status{font-weight:bold;padding:0 .4em;border-radius:3px;color:#fff}.no{color:#888}
svg.chart{display:block;margin:.8em 0;max-width:100%;height:auto;font-size:11px}
svg .chart-title{font-size:13px;font-weight:bold}svg .grid{stroke:#e4e4e4}svg .axis{stroke:#444}
svg .tick,svg .legend,svg .bar-text{fill:#333}svg .axis-label{fill:#222;font-size:12px}
svg .interval{stroke:#000;stroke-width:1.5;fill:none}svg .reference{stroke:#000;stroke-width:2;stroke-dasharray:3 2}
ol.actions li{margin-bottom:.6em}.charts{display:flex;flex-wrap:wrap;gap:0 1em}
"""


def render_html(report: Report, generated_at: str) -> str:
    """The whole page for ``report``; ``generated_at`` is printed in its header (the page keeps no clock)."""
    body = [_machine(report.machine, report.places), _setup(report.setup), _reaches(report.reaches),
            _fits(report.models, report.buys, report.budget_usd), _next(report)]
    if report.profile is not None:
        body.append(_profile(report.profile))
    if report.tune is not None:
        body.append(_tune(report.tune))
    if report.fleet is not None:
        body.append(_fleet(report.fleet))
    links = "".join(f'<a href="#{key}">{escape(title)}</a>' for key, title in _titles(report))
    summary = escape(report.machine.summary)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>gpufly report: {summary}</title><style>{CSS}</style></head>"
            f"<body data-report=\"1\"><header><h1>gpufly report</h1><p>{summary}</p>"
            f"<p class=\"muted\">written {escape(generated_at)} by <code>gpufly report --html</code>; "
            f"<code>gpufly report --json</code> carries every figure below</p><nav>{links}</nav></header>"
            + "".join(body) + "</body></html>\n")


def _titles(report: Report) -> list[tuple[str, str]]:
    titles = [("machine", "This machine"), ("setup", "Set-up"), ("reaches", "What it reaches"),
              ("fits", "What fits and how fast"), ("next", "What to do next")]
    if report.profile is not None:
        titles.append(("profile", "Profile"))
    if report.tune is not None:
        titles.append(("tune", "Tune"))
    if report.fleet is not None:
        titles.append(("fleet", "Fleet"))
    return titles


def _section(key: str, title: str, content: str) -> str:
    return f'<section id="{key}" data-section="{key}"><h2>{escape(title)}</h2>{content}</section>'


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table from cells that are already HTML (escape text before passing it); no header row when ``header`` is
    empty."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _gib(value: float | None) -> str:
    return "N/A" if value is None else f"{value / GIB:.1f} GiB"


def _machine(machine: MachineReport, places: Sequence[LadderPlace]) -> str:
    host = machine.host
    rows = [("OS", f"{host.os} ({host.kernel}, {host.machine})"),
            ("CPU", f"{host.cpu_model}: {host.cpu_physical_cores or '?'} cores, {host.cpu_logical_cores or '?'} "
                    "threads"),
            ("RAM", f"{_gib(host.memory_total_bytes)} ({_gib(host.memory_available_bytes)} available)"),
            ("Python", host.python),
            ("NVIDIA driver", machine.driver_version or f"none ({machine.nvml.reason or 'not found'})")]
    if machine.cuda_driver_version:
        rows.append(("CUDA (driver supports up to)", machine.cuda_driver_version))
    parts = [_table((), [(escape(k), escape(v)) for k, v in rows])]
    if not machine.gpus:
        reason = f": {machine.nvml.reason}" if machine.nvml.reason else ""
        parts.append(f'<p class="no-gpu">no NVIDIA GPU{escape(reason)}</p>')
    else:
        parts.append(_table(("#", "GPU", "memory", "compute capability", "PCI", "catalog"), [
            (str(g.device.index), escape(g.device.name), _gib(g.device.memory_total_bytes),
             escape(g.device.compute_capability or "N/A"), escape(g.device.pci_bus_id or "N/A"),
             escape(g.spec.name if g.spec else ("lost" if g.device.lost else "not in the catalog")))
            for g in machine.gpus]))
    parts.extend(_ladder(place) for place in places)
    return _section("machine", "This machine", "".join(parts))


def _sources(place: LadderPlace) -> str:
    """Each card's datasheet URLs, as text (the page fetches nothing), folded away."""
    items = "".join(f"<li>{escape(p.name)}: " + "; ".join(f"<code>{escape(u)}</code>" for u in p.sources) + "</li>"
                    for p in place.peers if p.sources)
    return f'<details class="muted"><summary>datasheet sources of these cards</summary><ul>{items}</ul></details>'


def _ladder(place: LadderPlace) -> str:
    """Three charts of this GPU among its neighbours: dense 16-bit rate, bandwidth, VRAM (this one outlined)."""
    slug = _slug(place.gpu)
    legend = sorted({(p.architecture, architecture_colour(p.architecture)) for p in place.peers})
    rate_bars = [Bar(p.name, p.dense_16bit_tflops or 0.0, architecture_colour(p.architecture),
                     text=("≈" if p.derived else "") + f"{p.dense_16bit_tflops:,.0f} TFLOPS"
                     if p.dense_16bit_tflops else "not published", highlight=p.this, hatched=p.derived)
                 for p in place.peers]
    bandwidth = [Bar(p.name, p.memory_bandwidth_gbps, architecture_colour(p.architecture),
                     text=f"{p.memory_bandwidth_gbps:,.0f} GB/s", highlight=p.this) for p in place.peers]
    vram = [Bar(p.name, p.vram_gib, architecture_colour(p.architecture), text=f"{p.vram_gib:g} GiB",
                highlight=p.this) for p in place.peers]
    derived = any(p.derived for p in place.peers)
    note = (" Hatched, ≈: not published; derived from the architecture's dense ops per clock per SM, the SM count "
            "and the boost clock." if derived else "")
    return (f'<h3>{escape(place.summary)}</h3><div class="charts">'
            + _ladder_chart(rate_bars, title=f"{place.gpu} among its peers: dense 16-bit tensor rate",
                        axis_label="dense BF16/FP16 tensor rate (TFLOPS)", chart_id=f"ladder-rate-{slug}",
                        legend=legend)
            + _ladder_chart(bandwidth, title="memory bandwidth (decoding speed)", axis_label="memory bandwidth (GB/s)",
                        chart_id=f"ladder-bandwidth-{slug}", legend=legend)
            + _ladder_chart(vram, title="VRAM (what fits)", axis_label="VRAM (GiB)", chart_id=f"ladder-vram-{slug}",
                        legend=legend)
            + f'</div><p class="muted">Outlined: this GPU. Figures from the gpufly catalog (vendor datasheets).'
            f'{escape(note)}</p>' + _sources(place))


def _ladder_chart(bars: Sequence[Bar], *, title: str, axis_label: str, chart_id: str,
                  legend: Sequence[tuple[str, str]]) -> str:
    """A ladder chart narrow enough for two to a row on a wide screen."""
    return bar_chart(bars, title=title, axis_label=axis_label, chart_id=chart_id, legend=legend, width=460,
                     label_width=150, text_width=105)


def _status(status: str) -> str:
    return (f'<span class="status" style="background:{STATUS_COLOURS.get(status, NEUTRAL)}">'
            f"{escape(status)}</span>")


def _setup(setup: SetupSection) -> str:
    parts = [f"<p><strong>{escape(setup.verdict)}</strong></p><p class=\"muted\">{escape(setup.note)}</p>"]
    shown = sorted(setup.findings, key=lambda f: ("fail", "warn", "ok").index(f.status)
                   if f.status in ("fail", "warn", "ok") else 3)
    parts.append(_table(("status", "check", "what", "why", "fix"), [
        (_status(f.status), escape(f.check), escape(f.what), escape(f.why), f"<code>{escape(f.fix)}</code>"
         if f.fix else "") for f in shown]))
    plan = setup.install
    if plan is not None and plan.command:
        parts.append(f"<p>PyTorch for this machine ({escape(plan.reason)}):</p>"
                     f'<pre class="install">{escape(plan.command)}</pre>')
        if plan.verify:
            parts.append(f"<p class=\"muted\">then check: <code>{escape(plan.verify)}</code></p>")
    elif plan is not None:
        parts.append(f"<p>PyTorch: {escape(plan.advice or plan.reason)}</p>")
    else:
        parts.append(f"<p>PyTorch: no install command ({escape(setup.install_error or 'unknown')})</p>")
    return _section("setup", "Set-up", "".join(parts))


def _reaches(reaches: ReachSection | None) -> str:
    if reaches is None:
        return _section("reaches", "What it reaches", "<p>not measured: <code>gpufly report --bench</code> runs a "
                        "quick bench (seconds on a GPU), or <code>gpufly report --bench-file run.json</code> reads "
                        "one saved by <code>gpufly bench --save</code>.</p>")
    parts = [f"<p>{escape(reaches.device)}; {escape(reaches.source)}</p>"]
    against = reaches.against_peak
    if against:
        bars = [Bar(r.name, r.percent_of_peak or 0.0, SERIES[0], low=_percent(r, r.low), high=_percent(r, r.high),
                    reference=100.0, text=f"{r.shown(r.value)} of {r.shown(r.peak)}" + (f" {r.tag}" if r.tag else ""))
                for r in against]
        parts.append(bar_chart(bars, title="Measured against the datasheet", log=False, chart_id="reaches-chart",
                               axis_label="measured, % of the datasheet peak (dashed line: the peak, 100%)"))
    else:
        rates = [r for r in reaches.figures if r.unit == "FLOP/s"]
        parts.append("<p class=\"muted\">no figure has a datasheet peak: the catalog has no CPUs, and a GPU "
                     "outside it has none to compare with.</p>")
        if rates:
            bars = [Bar(r.name, r.value / 1e12, SERIES[0], low=r.low / 1e12, high=r.high / 1e12,
                        text=r.shown(r.value) + (f" {r.tag}" if r.tag else "")) for r in rates]
            parts.append(bar_chart(bars, title="Measured matmul and attention rates", chart_id="reaches-chart",
                                   axis_label="measured rate (TFLOP/s)"))
    parts.append(_table(("figure", "measured", "interval", "datasheet peak", "% of peak", "note"), [
        (escape(r.name), escape(r.shown(r.value)), escape(f"{r.interval_text} ({r.interval})"),
         escape(r.shown(r.peak)), "N/A" if r.percent_of_peak is None else f"{r.percent_of_peak:.0f}%",
         escape("; ".join(n for n in (f"noisy: {r.noise or 'interval too wide'}" if r.noisy else "",
                                      f"others busy: {', '.join(r.busy)}" if r.others_busy else "", r.note or "")
                          if n))) for r in reaches.figures], numeric=(1, 3, 4)))
    if any(r.others_busy for r in reaches.figures):
        parts.append('<p class="muted">others busy: another process used over 10% CPU just before or during the '
                     "figure; a steady figure can still be low (a process holding a core for the whole measurement "
                     "leaves a narrow interval around a low figure), so it decides nothing.</p>")
    if reaches.not_measured:
        parts.append(_table(("not measured", "why"), [(escape(n), escape(w)) for n, w in reaches.not_measured]))
    return _section("reaches", "What it reaches", "".join(parts))


def _percent(reach: Reach, value: float) -> float | None:
    return 100.0 * value / reach.peak if reach.peak else None


def _speed(value: float | None, unit: str) -> str:
    return "N/A" if value is None else f"{value:,.0f} {unit}"


def _job_colours(labels: Iterable[str]) -> dict[str, str]:
    ordered = list(dict.fromkeys(labels))
    return {label: SERIES[i % len(SERIES)] for i, label in enumerate(ordered)}


def _fits(models: Sequence[ModelFitRow], buys: Sequence[BuyRow], budget: float | None) -> str:
    from gpufly.report.models_fit import CONTEXT, error_span

    conditions = (f"<p class=\"muted\">predicted by gpufly's estimate at context {CONTEXT:,} and batch 1; in "
                  "brackets, each speed's 80% range from published measurements (its median error is "
                  f"{error_span([*models, *buys])} by engine, docs/calibration.md). A row that does not fit has no "
                  "speed.</p>")
    parts = [conditions]
    for gpu in dict.fromkeys(row.gpu for row in models):
        rows = [row for row in models if row.gpu == gpu]
        parts.append(_fit_matrix(gpu, rows))
    if buys:
        parts.append(_buy(buys, budget))
    if not models and not buys:
        parts.append("<p>no catalog GPU here to fit models on</p>")
    return _section("fits", "What fits and how fast", "".join(parts))


def _fit_matrix(gpu: str, rows: Sequence[ModelFitRow]) -> str:
    """Models down, jobs across: each cell the predicted speed, or how much memory it lacks."""
    from gpufly.report.models_fit import range_text

    count = rows[0].gpus
    where = f"{count}x {gpu}" if count > 1 else gpu
    jobs = list(dict.fromkeys(row.job for row in rows))
    cells: dict[tuple[str, str], ModelFitRow] = {(row.model, row.job): row for row in rows}
    table_rows = []
    for model in dict.fromkeys(row.model for row in rows):
        line = [escape(model)]
        for job in jobs:
            row = cells.get((model, job))
            if row is None:
                line.append("N/A")
                continue
            line.append(escape(_speed(row.speed, row.speed_unit.split(" ")[0]) + range_text(row))
                        + ("<br><span class=\"muted\">"
                        "tight</span>" if row.tight else "") if row.fits else
                        f'<span class="no">no: needs {_gib(row.needs_bytes)}</span>')
        table_rows.append(line)
    colours = _job_colours(jobs)
    bars = [_speed_bar(row, colours) for row in rows if row.speed and row.task == "infer"]
    train = [_speed_bar(row, colours) for row in rows if row.speed and row.task != "infer"]
    slug = _slug(gpu)
    legend = [(job, colour) for job, colour in colours.items()]
    html = f"<h3>On {escape(where)}</h3>" + _table(("model", *jobs), table_rows, numeric=range(1, len(jobs) + 1))
    if bars:
        html += bar_chart(bars, title=f"Inference on {where}: predicted decode speed", chart_id=f"fits-infer-{slug}",
                          axis_label="decode tokens/s per sequence (predicted)",
                          legend=[item for item in legend if item[0].startswith("infer")])
    if train:
        html += bar_chart(train, title=f"Training on {where}: predicted throughput", chart_id=f"fits-train-{slug}",
                          axis_label="training tokens/s (predicted)",
                          legend=[item for item in legend if not item[0].startswith("infer")])
    return html


def _speed_bar(row: ModelFitRow, colours: dict[str, str]) -> Bar:
    return Bar(f"{row.model} {row.job}", row.speed or 0.0, colours[row.job],
               text=_speed(row.speed, row.speed_unit.split()[0]))


def _buy(buys: Sequence[BuyRow], budget: float | None) -> str:
    """Models down, jobs across: each cell the fastest setup within the budget, its price and predicted speed."""
    jobs = list(dict.fromkeys(row.job for row in buys))
    cells = {(row.model, row.job): row for row in buys}
    table_rows = [[escape(model), *(_buy_cell(cells[(model, job)]) if (model, job) in cells else "N/A" for job in jobs)]
                  for model in dict.fromkeys(row.model for row in buys)]
    colours = _job_colours(jobs)
    bars = [Bar(f"{row.model} {row.job}", row.speed, colours[row.job],
                text=f"{row.speed:,.0f} on {row.gpus}x {row.gpu}" if row.gpus > 1 else f"{row.speed:,.0f} on {row.gpu}")
            for row in buys if row.speed and row.task == "infer"]
    example = buys[0].command if buys else ""
    html = (f"<h3>GPUs to get within ${budget or 0:,.0f} (launch prices; the fastest setup of 1-8 cards)</h3>"
            + _table(("model", *jobs), table_rows)
            + f'<p class="muted">each cell in full: <code>{escape(example)}</code> (hover a cell for its own)</p>')
    if bars:
        html += bar_chart(bars, title=f"Inference on the fastest GPU within ${budget or 0:,.0f}", chart_id="buy-chart",
                          axis_label="decode tokens/s per sequence (predicted)",
                          legend=[item for item in colours.items() if item[0].startswith("infer")])
    return html


def _buy_cell(row: BuyRow) -> str:
    from gpufly.report.models_fit import range_text

    if row.gpu is None:
        return '<span class="no">none in budget</span>'
    where = f"{row.gpus}x {row.gpu}" if row.gpus > 1 else row.gpu
    price = "N/A" if row.price_usd is None else f"${row.price_usd:,.0f}"
    return (f'<span title="{escape(row.command)}"><strong>{escape(where)}</strong><br>{price}, '
            f"{escape(_speed(row.speed, row.speed_unit.split()[0]) + range_text(row))}</span>")



def _next(report: Report) -> str:
    if not report.actions:
        return _section("next", "What to do next", "<p>nothing stands out: every check passes and nothing measured "
                        "falls short</p>")
    items = "".join(f"<li><strong>{escape(a.title)}</strong> <span class=\"muted\">({escape(a.gain_text)}; "
                    f"{escape(a.section)})</span><br><code>{escape(a.command)}</code><br>"
                    f"<span class=\"muted\">{escape(a.why)}</span></li>" for a in report.actions)
    return _section("next", "What to do next", "<p class=\"muted\">ranked by expected gain: a failed check first, "
                    "then measured gains, then upper bounds, then advice</p>"
                    f'<ol class="actions">{items}</ol>')


def _receipt(lines: Iterable[str]) -> str:
    return "".join(f'<p class="muted receipt">{escape(line)}</p>' for line in lines)


def _profile(profiled: dict[str, Any]) -> str:
    from gpufly.report.receipts import no_step_reason, profile_median, profile_receipt

    command = profiled["command"] or "a profiled loop"
    rows = [(escape(f["title"]), escape(f["seen"]), escape(f["change"])) for f in profiled["findings"]]
    if not profiled["measured_steps"]:
        content = (f'<p class="no-steps">{escape(command)}: no step was measured: '
                   f"{escape(no_step_reason(profiled))}</p>" + _receipt(profile_receipt(profiled)))
        if rows:
            content += _table(("finding", "seen", "change"), rows)
        return _section("profile", "Profile", content)
    bars = [Bar(str(label), 100.0 * share, SERIES[i % len(SERIES)], text=f"{100 * share:.0f}%")
            for i, (label, share) in enumerate(profiled["breakdown"].items())]
    content = (f"<p>{escape(command)}: {profiled['measured_steps']} steps "
               f"measured, median step {escape(profile_median(profiled))}</p>" + _receipt(profile_receipt(profiled)))
    if bars:
        content += bar_chart(bars, title="Where the step time goes", chart_id="profile-chart", log=False,
                             axis_label="share of the median step (%)")
    content += _table(("finding", "seen", "change"), rows) if rows else "<p>no finding</p>"
    return _section("profile", "Profile", content)


def _tune(tuned: TuneSummary) -> str:
    from gpufly.report.receipts import tune_receipt

    measured_on = _receipt([f"measured on: {tune_receipt(tuned)}"])
    if tuned.speedup is None and tuned.verdict in ("undecided", "too noisy"):
        return _section("tune", "Tune", f"<p>{tuned.trials} trials; no winner ({escape(tuned.verdict)}): "
                                        f"{escape(tuned.reason)}</p>" + measured_on)
    speedup = "N/A" if tuned.speedup is None else f"{tuned.speedup:.2f}x"
    if tuned.speedup is not None and tuned.speedup_low is not None and tuned.speedup_high is not None:
        speedup += f" (95% interval {tuned.speedup_low:.2f}-{tuned.speedup_high:.2f})"
    code = "\n".join(tuned.code)
    best = tuned.best or "none"
    bars = [Bar("baseline", 1.0, NEUTRAL, text="1.00x"),
            Bar(best, tuned.speedup or 0.0, GOOD, text=speedup)] if tuned.speedup else []
    content = (f"<p>{tuned.trials} trials; best safe: <strong>{escape(best)}</strong> at {speedup} the "
               f"baseline ({tuned.unsafe} unsafe, {tuned.failed} failed)</p>" + measured_on)
    if bars:
        content += bar_chart(bars, title="Best safe configuration against the baseline", chart_id="tune-chart",
                             log=False, axis_label="speed relative to the baseline (x)")
    if code:
        content += f'<pre class="code">{escape(code)}</pre>'
    return _section("tune", "Tune", content)


def _fleet(section: FleetSection) -> str:
    """The fleet report of `gpufly fleet report`: its nodes, its findings with their reasons, and a chart per
    figure of each GPU against its identical siblings' median."""
    fleet = section.report
    nodes = len(fleet.nodes)
    parts = [f"<p>{nodes} node{'s' if nodes != 1 else ''} from <code>{escape(section.source)}</code>; "
             f"{fleet.compared} GPU bench figures compared with identical GPUs (tolerance {fleet.tolerance:.0%}), "
             f"{fleet.alone} without an identical GPU to compare with</p>",
             _table(("node", "GPUs", "driver", "torch", "bench runs"), [
                 (escape(n.name), "failed" if n.failed else escape(_gpu_count(n.gpus)), escape(n.driver or "N/A"),
                  escape(n.torch or "N/A"), str(n.bench_runs)) for n in fleet.nodes], numeric=(4,))]
    if fleet.uniform:
        parts.append('<p class="fleet-uniform">uniform: no node or GPU differs from the rest</p>')
    else:
        parts.append(_table(("kind", "finding", "why"), [
            (escape(f.kind), escape(f.message), "<br>".join(escape(r) for r in f.reasons))
            for f in fleet.findings]))
    parts.extend(_ceiling_chart(chart, number) for number, chart in enumerate(section.charts))
    if section.charts:
        parts.append('<p class="muted">Each bar: a GPU\'s figure as a percentage of the median of the same figure '
                     "on the other GPUs of its model (dashed line, 100%); whiskers: its own interval where the bench "
                     f"recorded one. Outlined, in vermillion: flagged, more than {fleet.tolerance:.0%} behind and "
                     "beyond its own noise. Latencies are inverted, so a short bar is always the slower GPU.</p>")
    return _section("fleet", "Fleet", "".join(parts))


def _gpu_count(gpus: tuple[str, ...] | None) -> str:
    if gpus is None:
        return "N/A"
    return ", ".join(f"{gpus.count(name)} x {name}" for name in sorted(set(gpus))) or "none"


def _ceiling_chart(chart: CeilingChart, number: int) -> str:
    bars = [Bar(b.label, b.percent, BAD if b.slow else SERIES[0], low=b.low, high=b.high, reference=100.0,
                text=f"{b.measured} ({b.percent:.0f}% of {b.median})", highlight=b.slow) for b in chart.bars]
    more = f"; the {chart.left_out} fastest GPUs left out" if chart.left_out else ""
    return bar_chart(bars, title=f"{chart.title}: each GPU against its siblings' median{more}", log=False,
                     chart_id=f"fleet-{number}-{_slug(chart.benchmark)}",
                     axis_label="measured, % of the median of identical GPUs (dashed line: 100%)",
                     legend=[("within the tolerance", SERIES[0]), ("flagged slow", BAD)], label_width=150,
                     text_width=250)
