"""`gpufly report`: this machine, its GPUs and their catalog entries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpufly.cli.render import MISSING, console, gib, print_json

if TYPE_CHECKING:
    from gpufly.doctor.checks import Finding
    from gpufly.report.machine import MachineReport
    from gpufly.report.models_fit import ModelFitRow


FRAMEWORKS_NOTE = "frameworks read from installed files; `gpufly doctor` imports them"
"""The report must stay fast, and importing torch takes seconds: its doctor summary does not import the
frameworks, so an install whose import crashes shows only in `gpufly doctor`."""


def render_doctor_summary(findings: list[Finding], out: Console) -> None:
    """The doctor's verdict in a few lines; `gpufly doctor` has the whole table."""
    fails = [f for f in findings if f.status == "fail"]
    warns = [f for f in findings if f.status == "warn"]
    out.print(f"doctor: {len(fails)} failed, {len(warns)} warnings ({FRAMEWORKS_NOTE} and has the details)")
    for finding in [*fails, *warns]:
        out.print(f"  {finding.status}: {finding.what}" + (f" -> {finding.fix}" if finding.fix else ""))


def render_models(rows: list[ModelFitRow], out: Console) -> None:
    from gpufly.report.models_fit import CONTEXT

    table = Table(title=f"Popular models on this machine (ctx {CONTEXT:,}, batch 1)", title_justify="left")
    for column in ("model", "format", "GPUs", "needs per GPU", "fits", "decode"):
        table.add_column(column)
    for row in rows:
        where = f"{row.gpus}x {row.gpu}" if row.gpus > 1 else row.gpu
        speed = f"{row.decode_tok_s:,.0f} tok/s" if row.fits and row.decode_tok_s else MISSING
        table.add_row(row.model, f"{row.quant} ({row.engine})", where, gib(row.needs_bytes),
                      "yes" if row.fits else "no", speed)
    out.print(table)


def render_machine(report: MachineReport, out: Console | None = None) -> None:
    """Print the machine section: a host table, then one row per GPU with its catalog match."""
    out = out or console()
    host = report.host
    out.print(f"gpufly report: {report.summary}", style="bold")
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
        out.print("no NVIDIA GPU found" + (f": {report.nvml.reason}" if report.nvml.reason else ""))
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


def report(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    bench: Annotated[bool, typer.Option("--bench", help="Add a quick benchmark of this machine.")] = False,
    profile: Annotated[Path | None, typer.Option("--profile", help="Add a saved `gpufly profile --save` run.")]
    = None,
    tune: Annotated[Path | None, typer.Option("--tune", help="Add a `gpufly tune` results file.")] = None,
) -> None:
    """Report on this machine: OS, CPU, RAM, each NVIDIA GPU with its catalog entry, the doctor's verdict,
    which popular models fit; with --bench, what the machine measures."""
    from gpufly.report.build import build_report

    built = build_report(bench=bench, profile=profile, tune=tune)
    if json_out:
        print_json(built.to_dict())
        return
    render_machine(built.machine)
    render_doctor_summary(built.findings, console())
    if built.models:
        render_models(built.models, console())
    else:
        console().print("models: no catalog GPU here to fit models on; `gpufly recommend MODEL` ranks GPUs to get")
    if built.bench is not None:
        from gpufly.cli.bench import render_run

        render_run(built.bench, console())
    if built.profile is not None:
        _render_profile(built.profile)
    if built.tune is not None:
        tuned = built.tune
        console().print(f"tune: {tuned.trials} trials; best safe {tuned.best} at {tuned.speedup:.2f}x the "
                        f"baseline ({tuned.unsafe} unsafe, {tuned.failed} failed)", markup=False)


def _render_profile(profiled: dict[str, Any]) -> None:
    out = console()
    median = profiled["median_step_s"]
    step = "N/A" if median is None else f"{1000 * median:.1f} ms"
    parts = ", ".join(f"{label} {100 * share:.0f}%" for label, share in profiled["breakdown"].items())
    out.print(f"profile: {profiled['command'] or 'a profiled loop'}: {profiled['measured_steps']} steps, "
              f"median {step} ({parts})", markup=False)
    for finding in profiled["findings"][:3]:
        out.print(f"  {finding['title']}: {finding['change']}", markup=False)
    if not profiled["findings"]:
        out.print("  no finding", markup=False)
