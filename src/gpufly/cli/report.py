"""`gpufly report`: this machine, its set-up, what it reaches, what fits and how fast, and what to do next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpufly.cli.render import MISSING, console, gib, print_json

if TYPE_CHECKING:
    from gpufly.report import LadderPlace, MachineReport, ReachSection, Report, SetupSection, TuneSummary
    from gpufly.report.actions import Action
    from gpufly.report.models_fit import BuyRow, ModelFitRow

BAR_WIDTH = 24
"""Characters of the longest bar in the terminal's ladder chart."""


def render_machine(report: MachineReport, out: Console | None = None) -> None:
    """The machine section: a host table, then one row per GPU with its catalog match."""
    out = out or console()
    host = report.host
    out.print(f"gpufly report: {report.summary}", style="bold", markup=False)
    table = Table(title="This machine", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("OS", f"{host.os} ({host.kernel}, {host.machine})")
    table.add_row("CPU", f"{host.cpu_model}: {host.cpu_physical_cores or '?'} cores, "
                  f"{host.cpu_logical_cores or '?'} threads")
    table.add_row("RAM", f"{gib(host.memory_total_bytes)} ({gib(host.memory_available_bytes)} available)")
    table.add_row("Python", host.python)
    table.add_row("NVIDIA driver", report.driver_version or f"{MISSING} ({report.nvml.reason or 'none'})")
    if report.cuda_driver_version:
        table.add_row("CUDA (driver supports up to)", report.cuda_driver_version)
    out.print(table)
    if not report.gpus:
        out.print("no NVIDIA GPU" + (f": {report.nvml.reason}" if report.nvml.reason else ""), markup=False)
        return
    gpus = Table(title="GPUs", title_justify="left")
    for column in ("#", "Name", "Memory", "CC", "PCI", "Catalog"):
        gpus.add_column(column)
    for gpu in report.gpus:
        d = gpu.device
        catalog = gpu.spec.name if gpu.spec else ("lost" if d.lost else "not in the catalog")
        gpus.add_row(str(d.index), d.name, gib(d.memory_total_bytes), d.compute_capability or MISSING,
                     d.pci_bus_id or MISSING, catalog)
    out.print(gpus)


def render_ladder(place: LadderPlace, out: Console) -> None:
    """This GPU among its neighbours: a bar of the dense 16-bit rate, then bandwidth and VRAM."""
    table = Table(title=f"On the ladder: {place.summary}", title_justify="left")
    for column, justify in (("GPU", "left"), ("architecture", "left"), ("dense 16-bit", "left"),
                            ("bandwidth", "right"), ("VRAM", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    top = max((p.dense_16bit_tflops or 0.0 for p in place.peers), default=0.0) or 1.0
    for peer in place.peers:
        rate = peer.dense_16bit_tflops
        bar = "█" * max(1, round(BAR_WIDTH * (rate or 0.0) / top))
        shown = MISSING if rate is None else f"{bar} {'≈' if peer.derived else ''}{rate:,.0f} TFLOPS"
        style = "bold" if peer.this else None
        table.add_row(("> " if peer.this else "  ") + peer.name, peer.architecture, shown,
                      f"{peer.memory_bandwidth_gbps:,.0f} GB/s", f"{peer.vram_gib:g} GiB", style=style)
    out.print(table)
    if any(p.derived for p in place.peers):
        out.print("≈: not published; derived from the architecture's dense ops per clock per SM", markup=False)


def render_setup(setup: SetupSection, out: Console) -> None:
    """The doctor's verdict, each failed or warned check with its fix, and the PyTorch install command."""
    out.print(f"Set-up: {setup.verdict} ({setup.note})", markup=False)
    for finding in [*setup.failed, *setup.warnings]:
        out.print(f"  {finding.status}: {finding.what}" + (f" -> {finding.fix}" if finding.fix else ""),
                  markup=False)
    plan = setup.install
    if plan is not None and plan.command:
        out.print(f"  PyTorch for this machine: {plan.command}", markup=False, soft_wrap=True)
    elif plan is not None:
        out.print(f"  PyTorch: {plan.advice or plan.reason}", markup=False)
    else:
        out.print(f"  PyTorch: no install command ({setup.install_error})", markup=False)


def render_reaches(reaches: ReachSection | None, out: Console) -> None:
    if reaches is None:
        out.print("What it reaches: not measured (`gpufly report --bench`, or --bench-file FILE from "
                  "`gpufly bench --save`)", markup=False)
        return
    table = Table(title=f"What it reaches: {reaches.device}; {reaches.source}", title_justify="left")
    for column in ("figure", "measured", "interval", "peak", "% of peak"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for r in reaches.figures:
        percent = MISSING if r.percent_of_peak is None else f"{r.percent_of_peak:.0f}%"
        table.add_row(r.name + (" noisy" if r.noisy else ""), r.shown(r.value), r.interval_text,
                      r.shown(r.peak) if r.peak else MISSING, percent)
    out.print(table)
    intervals = sorted({r.interval for r in reaches.figures})
    out.print(f"interval: {'; '.join(intervals) or MISSING}", markup=False)
    for figure in reaches.figures:
        if figure.noisy:
            out.print(f"noisy: {figure.name}: {figure.noise or 'interval too wide'}", markup=False)


def render_models(rows: list[ModelFitRow], out: Console) -> None:
    """Per GPU type, models down and jobs across: each cell a predicted speed, or the memory it lacks."""
    from gpufly.report.models_fit import CONTEXT, error_span

    for gpu in dict.fromkeys(row.gpu for row in rows):
        mine = [row for row in rows if row.gpu == gpu]
        count = mine[0].gpus
        jobs = list(dict.fromkeys(row.job for row in mine))
        where = f"{count}x {gpu}" if count > 1 else gpu
        table = Table(title=f"What fits and how fast on {where}: predicted tokens/s (ctx {CONTEXT:,}, batch 1)",
                      title_justify="left")
        table.add_column("model")
        for job in jobs:
            table.add_column(job, justify="right")
        cells = {(row.model, row.job): row for row in mine}
        for model in dict.fromkeys(row.model for row in mine):
            table.add_row(model, *(_cell(cells[(model, job)]) if (model, job) in cells else MISSING for job in jobs))
        out.print(table)
    out.print("infer columns: decode tokens/s per sequence; LoRA, QLoRA, full training: tokens trained per second; "
              "no: does not fit (it needs that much per GPU); tight: fits within the memory estimate's error. Each "
              f"speed is one predicted number; the estimate's median error is {error_span(rows)} by engine "
              "(docs/calibration.md).", markup=False)


def _cell(row: ModelFitRow) -> str:
    """The predicted tokens/s (the unit is in the title), or 'no' with the GiB per GPU the job needs."""
    if not row.fits:
        return f"no: {row.needs_bytes / 2**30:,.0f} GiB"
    return f"{row.speed:,.0f}" + (" tight" if row.tight else "") if row.speed else MISSING


def render_buys(rows: list[BuyRow], budget: float | None, out: Console, gpu_here: bool = False) -> None:
    """Models down, jobs across: the fastest setup within the budget, its launch price and predicted speed; said as
    an alternative when the machine has GPUs."""
    lead = "GPUs to get" if gpu_here else "No catalog GPU here: the fastest to get"
    table = Table(title=f"{lead} within ${budget or 0:,.0f} (launch prices, predicted speeds)", title_justify="left")
    jobs = list(dict.fromkeys(row.job for row in rows))
    table.add_column("model")
    for job in jobs:
        table.add_column(job)
    cells = {(row.model, row.job): row for row in rows}
    for model in dict.fromkeys(row.model for row in rows):
        table.add_row(model, *(_buy_cell(cells[(model, job)]) if (model, job) in cells else MISSING for job in jobs))
    out.print(table)
    if rows:
        out.print("infer: decode tokens/s per sequence; LoRA, QLoRA, full training: tokens trained per second. Each "
                  f"cell in full: {rows[0].command} (and so on)", markup=False)


def _buy_cell(row: BuyRow) -> str:
    if row.gpu is None:
        return "none in budget"
    where = f"{row.gpus}x {row.gpu}" if row.gpus > 1 else row.gpu
    price = MISSING if row.price_usd is None else f"${row.price_usd:,.0f}"
    speed = MISSING if row.speed is None else f"{row.speed:,.0f} tok/s"
    return f"{where}\n{price}, {speed}"


def render_actions(actions: list[Action], out: Console) -> None:
    out.print("What to do next (ranked by expected gain):", style="bold")
    if not actions:
        out.print("  nothing stands out")
    for number, action in enumerate(actions, 1):
        out.print(f"  {number}. {action.title} [{action.gain_text}]", markup=False)
        out.print(f"     {action.command}", markup=False, soft_wrap=True)


def render_tune(tuned: TuneSummary, out: Console) -> None:
    speedup = MISSING if tuned.speedup is None else f"{tuned.speedup:.2f}x"
    out.print(f"tune: {tuned.trials} trials; best safe {tuned.best} at {speedup} the baseline ({tuned.unsafe} "
              f"unsafe, {tuned.failed} failed)", markup=False)
    for line in tuned.code:
        out.print(f"  {line}", markup=False)


def render_profile(profiled: dict[str, Any], out: Console) -> None:
    median = profiled["median_step_s"]
    step = "N/A" if median is None else f"{1000 * median:.1f} ms"
    parts = ", ".join(f"{label} {100 * share:.0f}%" for label, share in profiled["breakdown"].items())
    out.print(f"profile: {profiled['command'] or 'a profiled loop'}: {profiled['measured_steps']} steps, "
              f"median {step} ({parts})", markup=False)
    for finding in profiled["findings"][:3]:
        out.print(f"  {finding['title']}: {finding['change']}", markup=False)
    if not profiled["findings"]:
        out.print("  no finding", markup=False)


def render_report(built: Report, out: Console) -> None:
    """Every section, in the page's order."""
    render_machine(built.machine, out)
    for place in built.places:
        render_ladder(place, out)
    render_setup(built.setup, out)
    render_reaches(built.reaches, out)
    if built.models:
        render_models(built.models, out)
    if built.buys:
        render_buys(built.buys, built.budget_usd, out, gpu_here=bool(built.models))
    if built.profile is not None:
        render_profile(built.profile, out)
    if built.tune is not None:
        render_tune(built.tune, out)
    render_actions(built.actions, out)


def report(
    json_out: Annotated[bool, typer.Option("--json", help="Print every section as JSON.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the report as one self-contained page "
                                                             "(no network needed to open it).")] = None,
    bench: Annotated[bool, typer.Option("--bench", help="Add a quick benchmark of this machine.")] = False,
    bench_file: Annotated[Path | None, typer.Option("--bench-file", help="Add a run saved by `gpufly bench "
                                                                         "--save`.")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="USD for GPUs to get (default 2000 on a machine "
                                                                  "without a catalog GPU).")] = None,
    profile: Annotated[Path | None, typer.Option("--profile", help="Add a saved `gpufly profile --save` run.")]
    = None,
    tune: Annotated[Path | None, typer.Option("--tune", help="Add a `gpufly tune` results file.")] = None,
) -> None:
    """Report on this machine: what the hardware is worth for AI, whether the software is set up right, what it
    reaches, what fits and how fast, and what to do next.

    Examples:
      gpufly report
      gpufly report --html report.html
      gpufly report --bench-file bench.json --tune results.jsonl --json
      gpufly report --budget 3000
    """
    from gpufly.jsonfile import write_text_atomic
    from gpufly.report import build_report, render_html

    if html is not None:
        _check_page_path(html)
    built = build_report(bench=bench, bench_file=bench_file, profile=profile, tune=tune, budget_usd=budget)
    if html is not None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        write_text_atomic(html, render_html(built, stamp), hint="write the page to a folder you can write, "
                          "e.g. --html report.html")
    if json_out:
        print_json(built.to_dict())
        return
    render_report(built, console())
    if html is not None:
        console().print(f"page: {html}", markup=False)


def _check_page_path(path: Path) -> None:
    """Refuse a page path that cannot be written before probing anything: a missing folder, a folder, a device."""
    from gpufly.errors import GpuflyError
    from gpufly.jsonfile import check_regular

    hint = "write the page to a folder you can write, e.g. --html report.html"
    if not path.parent.is_dir():
        raise GpuflyError(f"cannot write {path}: no folder {path.parent}", hint=hint)
    check_regular(path, hint=hint)
