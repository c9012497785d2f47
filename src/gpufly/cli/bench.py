"""`gpufly bench`: measure this device's ceilings beside the catalog's peaks, or compare two saved runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gpufly.cli.render import MISSING, console, error_console, print_json, print_note
from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.bench import BenchError, Benchmark, BenchResult, BenchRun, Comparison

SCHEMA_VERSION = 1
"""Of the `--compare --json` output; a run's own shape is gpufly.bench.results.SCHEMA_VERSION."""

_SCALES = {"FLOP/s": (("TFLOP/s", 1e12), ("GFLOP/s", 1e9)), "OP/s": (("TOP/s", 1e12), ("GOP/s", 1e9)),
           "B/s": (("GB/s", 1e9),), "s": (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))}


def scale_for(value: float, unit: str) -> tuple[str, float]:
    """The display unit for ``value``: TFLOP/s from 1e12 up, GFLOP/s below; GB/s always; s, ms or µs."""
    options = _SCALES.get(unit, ((unit, 1.0),))
    for name, factor in options:
        if abs(value) >= factor:
            return name, factor
    return options[-1]


def format_value(value: float | None, unit: str, scale: tuple[str, float] | None = None) -> str:
    """A figure in its display unit: '108.2 GFLOP/s', '4,812 GB/s', '7.25 µs'."""
    if value is None:
        return MISSING
    name, factor = scale or scale_for(value, unit)
    shown = value / factor
    digits = 0 if abs(shown) >= 1000 else 1 if abs(shown) >= 10 else 2
    return f"{shown:,.{digits}f} {name}"


def render_run(run: BenchRun, out: Console) -> None:
    """The measured figures; the peak columns only where some figure has a peak (never on a CPU)."""
    out.print(f"gpufly bench: {run.device.summary}")
    with_peaks = any(r.peak is not None for r in run.results)
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("benchmark", overflow="fold")
    for column in ("measured", *(("peak", "% of peak") if with_peaks else ()), "spread"):
        table.add_column(column, justify="right", no_wrap=True)
    for column, justify in (("size", "left"), ("runs", "right"), ("note", "left")):
        table.add_column(column, justify=justify)
    for result in run.results:
        scale = scale_for(result.value, result.unit)
        timing = result.timing
        peaks = ()
        if with_peaks:
            percent = f"{result.percent_of_peak:.0f}%" if result.percent_of_peak is not None else MISSING
            peaks = (format_value(result.peak, result.unit, scale), percent)
        runs = f"{timing.repeats}" + (f"x{timing.inner}" if timing.inner > 1 else "")
        table.add_row(result.name, format_value(result.value, result.unit, scale), *peaks,
                      f"{100 * timing.spread:.0f}%", str(result.params.get("shape", "")), runs, result.note or "")
    out.print(table)
    if run.device.kind == "cpu":
        out.print("peaks: the catalog has no CPUs, so CPU figures have no peak and no percent of peak")
    elif run.device.catalog_id is None:
        out.print(f"peaks: {run.device.name} is not in the catalog, so there are no peaks to compare with")
    out.print("spread: (p90 - p10) / median of the timed runs; runs: samples x calls per sample, after warm-up")
    if run.errors:
        render_errors(run.errors, out)


def render_errors(errors: list[BenchError], out: Console) -> None:
    table = Table(title="Not measured", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("benchmark")
    table.add_column("why")
    for error in errors:
        table.add_row(error.name, error.error)
    out.print(table)


def render_comparison(comparison: Comparison, out: Console) -> None:
    out.print(f"a: {comparison.a_label}: {comparison.a_device.summary}")
    out.print(f"b: {comparison.b_label}: {comparison.b_device.summary}")
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("benchmark", overflow="fold")
    for column in ("a", "b", "b / a", "b speed-up"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("note")
    for row in comparison.rows:
        known = row.a if row.a is not None else row.b
        scale = scale_for(known, row.unit) if known is not None else None
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else MISSING
        speedup = f"{row.b_speedup:.2f}x" if row.b_speedup is not None else MISSING
        table.add_row(row.name, format_value(row.a, row.unit, scale), format_value(row.b, row.unit, scale), ratio,
                      speedup, row.note or ("lower is better" if not row.higher_is_better else ""))
    out.print(table)


@contextmanager
def _progress(total: int) -> Iterator[tuple[object, object]]:
    """A Rich progress bar on stderr (none when stderr is not a terminal), and its two callbacks."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = error_console()
    with Progress(TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("starting", total=total)

        def on_start(_: int, benchmark: Benchmark) -> None:
            bar.update(task, description=benchmark.name)

        def on_done(_: BenchResult | BenchError) -> None:
            bar.advance(task)

        yield on_start, on_done


def _compare(files: tuple[Path, Path], json_out: bool) -> None:
    from gpufly.bench import compare_runs, load_run

    a, b = (load_run(path) for path in files)
    comparison = compare_runs(a, b, str(files[0]), str(files[1]))
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, **comparison.to_dict()})
    else:
        render_comparison(comparison, console())


def _check_compare_options(save: Path | None, device: str | None, quick: bool, only: str | None) -> None:
    """--compare reads two saved runs and measures nothing: --save would write no file (refused, since a script
    would go on to read it); the measuring options are noted as unused."""
    if save is not None:
        raise GpuflyError("--compare measures nothing, so --save would write nothing",
                          hint="compare saved runs without --save, or measure with --save and no --compare")
    unused = [name for name, given in (("--device", device is not None), ("--quick", quick),
                                       ("--only", only is not None)) if given]
    if unused:
        print_note(f"--compare measures nothing; {', '.join(unused)} ignored")


def bench(
    device: Annotated[str | None, typer.Option("--device", metavar="cuda:N|cpu",
                                               help="What to measure. Default: cuda:0 when PyTorch sees a GPU, "
                                                    "else the CPU.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes and fewer repeats (under a minute on a "
                                                        "CPU).")] = False,
    only: Annotated[str | None, typer.Option("--only", metavar="GROUPS",
                                             help="Comma-separated groups or names: gemm, llm, memory, transfer, "
                                                  "launch, attention, threads; or gemm.bf16.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    save: Annotated[Path | None, typer.Option("--save", metavar="FILE",
                                              help="Write the results to FILE as they come.")] = None,
    compare: Annotated[tuple[Path, Path] | None, typer.Option("--compare", metavar="A.json B.json",
                                                              help="Compare two saved runs instead of "
                                                                   "measuring.")] = None,
) -> None:
    """Measure matmul rates per precision, memory and PCIe bandwidth, launch latency and attention, beside the
    catalog's peaks."""
    if compare is not None:
        _check_compare_options(save, device, quick, only)
        _compare(compare, json_out)
        return
    from gpufly.bench import open_device, parse_only, run_benchmarks, select

    wanted = parse_only(only)
    target = open_device(device)
    chosen, skipped = select(target.plan(quick=quick), target.groups, wanted)
    settings = {"device": target.label, "quick": quick, "only": wanted}
    try:
        with _progress(len(chosen)) as (on_start, on_done):
            run = run_benchmarks(target, chosen, settings=settings, save=save, errors=skipped,
                                 on_start=on_start, on_done=on_done)
    except KeyboardInterrupt:
        if save is not None:
            error_console().print(f"interrupted: what was measured is in {save}", markup=False)
        raise
    if json_out:
        print_json(run.to_dict())
    else:
        out = console()
        render_run(run, out)
        if save is not None:
            out.print(f"results written to {save}; compare runs with gpufly bench --compare A.json B.json")
    if not run.results:
        raise GpuflyError("nothing was measured", hint="see the errors above", exit_code=1)
