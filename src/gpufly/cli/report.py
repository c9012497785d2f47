"""`gpufly report`: this machine, its set-up, what it reaches, what fits and how fast, and what to do next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpufly.cli.fleet import render_report as render_fleet
from gpufly.cli.render import LANG_HELP, MISSING, choose_language, console, gib, print_json
from gpufly.i18n import gettext as _
from gpufly.report.receipts import no_step_reason, profile_median, profile_receipt, tune_receipt

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
    out.print(_("gpufly report: {summary}").format(summary=report.summary), style="bold", markup=False)
    table = Table(title=_("This machine"), show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row(_("OS"), f"{host.os} ({host.kernel}, {host.machine})")
    table.add_row("CPU", _("{model}: {cores} cores, {threads} threads").format(
        model=host.cpu_model, cores=host.cpu_physical_cores or "?", threads=host.cpu_logical_cores or "?"))
    table.add_row(_("RAM"), _("{total} ({available} available)").format(
        total=gib(host.memory_total_bytes), available=gib(host.memory_available_bytes)))
    table.add_row("Python", host.python)
    table.add_row(_("NVIDIA driver"), report.driver_version or f"{MISSING} ({report.nvml.reason or _('none')})")
    if report.cuda_driver_version:
        table.add_row(_("CUDA (driver supports up to)"), report.cuda_driver_version)
    out.print(table)
    if not report.gpus:
        out.print(_("no NVIDIA GPU: {reason}").format(reason=report.nvml.reason) if report.nvml.reason
                  else _("no NVIDIA GPU"), markup=False)
        return
    gpus = Table(title="GPUs", title_justify="left")
    for column in ("#", _("Name"), _("Memory"), "CC", "PCI", _("Catalog")):
        gpus.add_column(column)
    for gpu in report.gpus:
        d = gpu.device
        catalog = gpu.spec.name if gpu.spec else (_("lost") if d.lost else _("not in the catalog"))
        gpus.add_row(str(d.index), d.name, gib(d.memory_total_bytes), d.compute_capability or MISSING,
                     d.pci_bus_id or MISSING, catalog)
    out.print(gpus)


def render_ladder(place: LadderPlace, out: Console) -> None:
    """This GPU among its neighbours: a bar of the dense 16-bit rate, then bandwidth and VRAM."""
    table = Table(title=_("On the ladder: {summary}").format(summary=place.summary), title_justify="left")
    for column, justify in (("GPU", "left"), (_("architecture"), "left"), (_("dense 16-bit"), "left"),
                            (_("bandwidth"), "right"), (_("VRAM"), "right")):
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
        out.print(_("≈: not published; derived from the architecture's dense ops per clock per SM"), markup=False)


def render_setup(setup: SetupSection, out: Console) -> None:
    """The doctor's verdict, each failed or warned check with its fix, and the PyTorch install command."""
    out.print(_("Set-up: {verdict} ({note})").format(verdict=setup.verdict, note=setup.note), markup=False)
    for finding in [*setup.failed, *setup.warnings]:
        status = _("fail") if finding.status == "fail" else _("warn")
        line = _("{status}: {what}").format(status=status, what=finding.what)
        out.print(f"  {line}" + (f" -> {finding.fix}" if finding.fix else ""), markup=False)
    plan = setup.install
    if plan is not None and plan.command:
        out.print("  " + _("PyTorch for this machine: {command}").format(command=plan.command), markup=False,
                  soft_wrap=True)
    elif plan is not None:
        out.print(f"  PyTorch: {plan.advice or plan.reason}", markup=False)
    else:
        out.print("  " + _("PyTorch: no install command ({error})").format(error=setup.install_error), markup=False)


def render_reaches(reaches: ReachSection | None, out: Console) -> None:
    if reaches is None:
        out.print(_("What it reaches: not measured (`gpufly report --bench`, or --bench-file FILE from "
                    "`gpufly bench --save`)"), markup=False)
        return
    table = Table(title=_("What it reaches: {device}; {source}").format(device=reaches.device,
                                                                         source=reaches.source), title_justify="left")
    for number, column in enumerate((_("figure"), _("measured"), _("interval"), _("peak"), _("% of peak"))):
        table.add_column(column, justify="left" if number == 0 else "right")
    for r in reaches.figures:
        percent = MISSING if r.percent_of_peak is None else f"{r.percent_of_peak:.0f}%"
        table.add_row(r.name + (" " + r.tag if r.tag else ""), r.shown(r.value), r.interval_text,
                      r.shown(r.peak) if r.peak else MISSING, percent)
    out.print(table)
    intervals = sorted({r.interval for r in reaches.figures})
    out.print(_("interval: {intervals}").format(intervals="; ".join(intervals) or MISSING), markup=False)
    for figure in reaches.figures:
        if figure.noisy:
            out.print(_("noisy: {figure}: {why}").format(figure=figure.name,
                                                         why=figure.noise or _("interval too wide")), markup=False)
    busy = [figure for figure in reaches.figures if figure.others_busy]
    for figure in busy:
        out.print(_("others busy: {figure}: {processes}").format(figure=figure.name,
                                                                 processes="; ".join(figure.busy)), markup=False)
    if busy:
        out.print(_("others busy: another process used over 10% CPU just before or during the figure; a steady "
                    "figure can still be low, so it decides nothing"), markup=False)


def _job_header(job: str) -> str:
    """A job's column header in the reader's language: "infer Q4_K_M" (the weight format kept as written), "full
    training"; LoRA and QLoRA are the same words in every language. The JSON keeps the job as it is."""
    if job.startswith("infer "):
        return _("infer {format}").format(format=job.removeprefix("infer "))
    return _("full training") if job == "full training" else job


def render_models(rows: list[ModelFitRow], out: Console) -> None:
    """Per GPU type, models down and jobs across: each cell a predicted speed, or the memory it lacks."""
    from gpufly.report.models_fit import CONTEXT, error_span

    for gpu in dict.fromkeys(row.gpu for row in rows):
        mine = [row for row in rows if row.gpu == gpu]
        count = mine[0].gpus
        jobs = list(dict.fromkeys(row.job for row in mine))
        where = f"{count}x {gpu}" if count > 1 else gpu
        table = Table(title=_("What fits and how fast on {gpu}: predicted tokens/s (ctx {context}, batch 1)").format(
            gpu=where, context=f"{CONTEXT:,}"), title_justify="left")
        table.add_column(_("model"))
        for job in jobs:
            table.add_column(_job_header(job), justify="right")
        cells = {(row.model, row.job): row for row in mine}
        for model in dict.fromkeys(row.model for row in mine):
            table.add_row(model, *(_cell(cells[(model, job)]) if (model, job) in cells else MISSING for job in jobs))
        out.print(table)
    out.print(_("infer columns: decode tokens/s per sequence; LoRA, QLoRA, full training: tokens trained per second; "
                "no: does not fit (it needs that much per GPU); tight: fits within the memory estimate's error. In "
                "brackets, the 80% range of each predicted speed; the estimate's median error is {error} by engine "
                "(docs/calibration.md).").format(error=error_span(rows)), markup=False)


def _cell(row: ModelFitRow) -> str:
    """The predicted tokens/s (the unit is in the title), or 'no' with the GiB per GPU the job needs."""
    from gpufly.report.models_fit import range_text

    if not row.fits:
        return _("no: {size} GiB").format(size=f"{row.needs_bytes / 2**30:,.0f}")
    if not row.speed:
        return MISSING
    return f"{row.speed:,.0f}{range_text(row)}" + (" " + _("tight") if row.tight else "")


def render_buys(rows: list[BuyRow], budget: float | None, out: Console, gpu_here: bool = False) -> None:
    """Models down, jobs across: the fastest setup within the budget, its launch price and predicted speed; said as
    an alternative when the machine has GPUs."""
    title = (_("GPUs to get within {budget} (launch prices, predicted speeds)") if gpu_here
             else _("No catalog GPU here: the fastest to get within {budget} (launch prices, predicted speeds)"))
    table = Table(title=title.format(budget=f"${budget or 0:,.0f}"), title_justify="left")
    jobs = list(dict.fromkeys(row.job for row in rows))
    table.add_column(_("model"))
    for job in jobs:
        table.add_column(_job_header(job))
    cells = {(row.model, row.job): row for row in rows}
    for model in dict.fromkeys(row.model for row in rows):
        table.add_row(model, *(_buy_cell(cells[(model, job)]) if (model, job) in cells else MISSING for job in jobs))
    out.print(table)
    if rows:
        out.print(_("infer: decode tokens/s per sequence; LoRA, QLoRA, full training: tokens trained per second. "
                    "Each cell in full: {command} (and so on)").format(command=rows[0].command), markup=False)


def _buy_cell(row: BuyRow) -> str:
    from gpufly.report.models_fit import range_text

    if row.gpu is None:
        return _("none in budget")
    where = f"{row.gpus}x {row.gpu}" if row.gpus > 1 else row.gpu
    price = MISSING if row.price_usd is None else f"${row.price_usd:,.0f}"
    speed = MISSING if row.speed is None else f"{row.speed:,.0f}{range_text(row)} tok/s"
    return f"{where}\n{price}, {speed}"


def render_actions(actions: list[Action], out: Console) -> None:
    out.print(_("What to do next (ranked by expected gain):"), style="bold")
    if not actions:
        out.print("  " + _("nothing stands out"))
    for number, action in enumerate(actions, 1):
        out.print(f"  {number}. {action.title} [{action.gain_text}]", markup=False)
        out.print(f"     {action.command}", markup=False, soft_wrap=True)


def render_tune(tuned: TuneSummary, out: Console) -> None:
    measured_on = "  " + _("measured on: {receipt}").format(receipt=tune_receipt(tuned))
    if tuned.speedup is None and tuned.verdict in ("undecided", "too noisy"):
        out.print(_("tune: {trials} trials; no winner ({verdict}): {reason}").format(
            trials=tuned.trials, verdict=tuned.verdict, reason=tuned.reason), markup=False)
        out.print(measured_on, markup=False)
        return
    speedup = MISSING if tuned.speedup is None else f"{tuned.speedup:.2f}x"
    if tuned.speedup is not None and tuned.speedup_low is not None and tuned.speedup_high is not None:
        speedup += f" [{tuned.speedup_low:.2f}-{tuned.speedup_high:.2f}]"
    out.print(_("tune: {trials} trials; best safe {best} at {speedup} the baseline ({unsafe} unsafe, {failed} "
                "failed)").format(trials=tuned.trials, best=tuned.best, speedup=speedup, unsafe=tuned.unsafe,
                                  failed=tuned.failed), markup=False)
    out.print(measured_on, markup=False)
    for line in tuned.code:
        out.print(f"  {line}", markup=False)


def render_profile(profiled: dict[str, Any], out: Console) -> None:
    command = profiled["command"] or _("a profiled loop")
    if not profiled["measured_steps"]:
        out.print(_("profile: {command}: no step was measured: {why}").format(
            command=command, why=no_step_reason(profiled)), markup=False)
        for line in profile_receipt(profiled):
            out.print(f"  {line}", markup=False)
        for finding in profiled["findings"][:3]:
            out.print(f"  {finding['title']}: {finding['change']}", markup=False)
        return
    parts = ", ".join(f"{label} {100 * share:.0f}%" for label, share in profiled["breakdown"].items())
    out.print(_("profile: {command}: {steps} steps, median {step} ({parts})").format(
        command=command, steps=profiled["measured_steps"], step=profile_median(profiled), parts=parts),
        markup=False)
    for line in profile_receipt(profiled):
        out.print(f"  {line}", markup=False)
    for finding in profiled["findings"][:3]:
        out.print(f"  {finding['title']}: {finding['change']}", markup=False)
    if not profiled["findings"]:
        out.print("  " + _("no finding"), markup=False)


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
    if built.fleet is not None:
        render_fleet(built.fleet.report, out)
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
    fleet: Annotated[Path | None, typer.Option("--fleet", metavar="DIR",
                                               help="Add `gpufly fleet report DIR`: the nodes' saved doctor facts "
                                                    "and bench runs compared.")] = None,
    lang: Annotated[str | None, typer.Option("--lang", metavar="LANG", help=LANG_HELP)] = None,
) -> None:
    """Report on this machine: what the hardware is worth for AI, whether the software is set up right, what it
    reaches, what fits and how fast, and what to do next.

    Examples:
      gpufly report
      gpufly report --bench-file bench.json --tune results.jsonl --json
      gpufly report --budget 3000 --lang zh
      gpufly report --fleet fleet/ --html report.html
    """
    from gpufly.jsonfile import write_text_atomic
    from gpufly.report import build_report, render_html

    choose_language(lang, json_out)
    if html is not None:
        _check_page_path(html)
    built = build_report(bench=bench, bench_file=bench_file, profile=profile, tune=tune, budget_usd=budget,
                         fleet=fleet)
    if html is not None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        write_text_atomic(html, render_html(built, stamp), hint="write the page to a folder you can write, "
                          "e.g. --html report.html")
    if json_out:
        print_json(built.to_dict())
        return
    render_report(built, console())
    if html is not None:
        console().print(_("page: {path}").format(path=html), markup=False)


def _check_page_path(path: Path) -> None:
    """Refuse a page path that cannot be written before probing anything: a missing folder, a folder, a device."""
    from gpufly.errors import GpuflyError
    from gpufly.jsonfile import check_regular

    hint = "write the page to a folder you can write, e.g. --html report.html"
    if not path.parent.is_dir():
        raise GpuflyError(f"cannot write {path}: no folder {path.parent}", hint=hint)
    check_regular(path, hint=hint)
