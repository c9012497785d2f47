"""`gpufly bench`: measure this device's ceilings beside the catalog's peaks, or compare two saved runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpufly.cli.paths import check_writable
from gpufly.cli.render import MISSING, console, error_console, print_json, print_note
from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.bench import BenchError, Benchmark, BenchResult, BenchRun, Comparison
    from gpufly.bench.compare import Row

SCHEMA_VERSION = 4
"""Of the `--compare --json` output (2 added each row's intervals and verdict; 3 added b_speedup_range,
sweep_spread and the verdicts "not comparable" and "within the sweep's spread"; 4 added busy and the verdict
"disturbed"); a run's own shape is gpufly.bench.results.SCHEMA_VERSION."""
VERDICTS = ("faster", "slower", "within noise", "noisy", "not comparable", "disturbed", "within the sweep's spread",
            "no interval")
"""Every verdict --compare gives; the verdict column is as wide as the longest word among them, so a verdict
wraps between words, never inside one."""

NAME_WIDTH = 20
"""Benchmark names wrap after a dot at this width, so a table fits 80 columns without breaking a word."""
_SCALES = {"FLOP/s": (("TFLOP/s", 1e12), ("GFLOP/s", 1e9)), "OP/s": (("TOP/s", 1e12), ("GOP/s", 1e9)),
           "B/s": (("GB/s", 1e9),), "s": (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))}


def scale_for(value: float, unit: str) -> tuple[str, float]:
    """The display unit for ``value``: TFLOP/s from 1e12 up, GFLOP/s below; GB/s always; s, ms or µs."""
    options = _SCALES.get(unit, ((unit, 1.0),))
    for name, factor in options:
        if abs(value) >= factor:
            return name, factor
    return options[-1]


def _number(shown: float) -> str:
    digits = 0 if abs(shown) >= 1000 else 1 if abs(shown) >= 10 else 2
    return f"{shown:,.{digits}f}"


def format_value(value: float | None, unit: str, scale: tuple[str, float] | None = None) -> str:
    """A figure in its display unit: '108.2 GFLOP/s', '4,812 GB/s', '7.25 µs'."""
    if value is None:
        return MISSING
    name, factor = scale or scale_for(value, unit)
    return f"{_number(value / factor)} {name}"


def format_measured(result: BenchResult, scale: tuple[str, float]) -> str:
    """A figure with its interval in the same unit: '412.3 GFLOP/s (398.0-421.5)'; bare where a run saved before
    intervals has none."""
    shown = format_value(result.value, result.unit, scale)
    if result.value_low is None or result.value_high is None:
        return shown
    factor = scale[1]
    return f"{shown} ({_number(result.value_low / factor)}-{_number(result.value_high / factor)})"


def wrap_name(name: str, width: int = NAME_WIDTH) -> str:
    """A dotted benchmark name on lines of at most ``width``, broken only after a dot, never inside a part.

    >>> print(wrap_name("llm.fp32.decode.m16.k4096.n14336"))
    llm.fp32.decode.m16.
    k4096.n14336
    """
    parts = [part + "." for part in name.split(".")]
    parts[-1] = parts[-1][:-1]
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _result_note(result: BenchResult, footnote: int | None) -> str:
    """The note cell: 'noisy [1]' (its reason under the table), how many tries a re-measured figure took, and
    'others busy' for a steady figure measured while other work ran (it can be steady and still low)."""
    tries = f"{result.attempts} tries" if result.attempts > 1 and not result.noisy else None
    noisy = f"noisy [{footnote}]" if footnote is not None else None
    busy = "others busy" if not result.noisy and result.busy_processes else None
    return "; ".join(part for part in (noisy, busy, result.note, tries) if part)


def render_run(run: BenchRun, out: Console) -> None:
    """The measured figures with their intervals; the peak columns only where some figure has a peak (never on a
    CPU); a noisy figure says so, and why, in its note."""
    out.print(f"gpufly bench: {run.device.summary}")
    with_peaks = any(r.peak is not None for r in run.results)
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("benchmark", no_wrap=True, overflow="fold")
    table.add_column("measured (interval)", justify="right")
    for column in ("peak", "% of peak") if with_peaks else ():
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("size")
    table.add_column("runs", justify="right")
    table.add_column("note")
    noisy = [result for result in run.results if result.noisy]
    footnotes = {id(result): number for number, result in enumerate(noisy, start=1)}
    for result in run.results:
        scale = scale_for(result.value, result.unit)
        timing = result.timing
        peaks: tuple[str, ...] = ()
        if with_peaks:
            percent = f"{result.percent_of_peak:.0f}%" if result.percent_of_peak is not None else MISSING
            peaks = (format_value(result.peak, result.unit, scale), percent)
        runs = f"{timing.repeats}" + (f"x{timing.inner}" if timing.inner > 1 else "")
        table.add_row(wrap_name(result.name), format_measured(result, scale), *peaks,
                      str(result.params.get("shape", "")), runs,
                      escape(_result_note(result, footnotes.get(id(result)))))
    out.print(table)
    if run.device.kind == "cpu":
        out.print("peaks: the catalog has no CPUs, so CPU figures have no peak and no percent of peak")
    elif run.device.catalog_id is None:
        out.print(f"peaks: {run.device.name} is not in the catalog, so there are no peaks to compare with")
    out.print(_interval_legend(run))
    swept = [r for r in run.results if r.params.get("sweep")]
    if swept:
        sizes = [point["size"] for r in swept for point in r.params["sweep"]]
        shorter = " (--quick: a shorter sweep of smaller sizes)" if run.settings.get("quick") else ""
        out.print(f"gemm: the best median over a sweep of square sizes, n = {min(sizes)} to {max(sizes)}{shorter}, "
                  "measured again at the best size (mamf-finder's method)")
    if any(not r.noisy and r.busy_processes for r in run.results):
        out.print("others busy: another process used over 10% CPU just before or during the figure; a "
                  "steady figure can still be low (the processes are in the JSON's conditions)")
    if noisy:
        out.print(f"noisy: {len(noisy)} of {len(run.results)} figures stayed too wide to trust; measure again on a "
                  "quieter machine before relying on them")
        for number, result in enumerate(noisy, start=1):
            out.print(f"  [{number}] {result.name}: {result.noise}", markup=False)
    if run.errors:
        render_errors(run.errors, out)


def _interval_legend(run: BenchRun) -> str:
    limit, attempts = run.settings.get("noise_limit"), run.settings.get("max_attempts")
    retry = (f"; an interval wider than {limit:.0%} of the figure is measured again, up to {attempts} times, then "
             "marked noisy" if isinstance(limit, float) and isinstance(attempts, int) else "")
    return ("interval: where the median of the timed runs lies with about 95% confidence (order statistics)"
            f"{retry}; runs: samples x calls per sample, after warm-up")


def render_errors(errors: list[BenchError], out: Console) -> None:
    table = Table(title="Not measured", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("benchmark", no_wrap=True, overflow="fold")
    table.add_column("why")
    for error in errors:
        table.add_row(wrap_name(error.name), escape(error.error))
    out.print(table)


def format_times(factor: float | None) -> str:
    """A speed-up in at most five characters: '2.32x', '12.5x', '127x'."""
    if factor is None:
        return MISSING
    digits = 0 if factor >= 99.5 else 1 if factor >= 9.995 else 2
    return f"{factor:.{digits}f}x"


def _bound(shown: float) -> str:
    """An interval's bound, short enough for two to sit under a figure: '398', '33.5', '4.70' (no commas)."""
    digits = 0 if abs(shown) >= 99.95 else 1 if abs(shown) >= 9.995 else 2
    return f"{shown:.{digits}f}"


def _with_interval(value: float | None, interval: tuple[float, float] | None, factor: float) -> str:
    """A compared figure, with its interval on the line below: '33.6\n33.5-33.8'."""
    if value is None:
        return MISSING
    shown = _number(value / factor)
    if interval is None:
        return shown
    return f"{shown}\n{_bound(interval[0] / factor)}-{_bound(interval[1] / factor)}"


def _speedup_cell(row: Row) -> str:
    """b's speed-up over a, with the range the two intervals allow below it: '4.77x\n4.70-4.85'."""
    shown = format_times(row.b_speedup)
    span = row.speedup_range if row.b_speedup is not None else None
    return f"{shown}\n{_bound(span[0])}-{_bound(span[1])}" if span else shown


def render_comparison(comparison: Comparison, out: Console) -> None:
    """Each figure in both runs with its interval below it, b's speed-up over a with the range the intervals
    allow, and whether the difference is beyond noise (the two intervals do not overlap, the sizes match, and
    it is larger than the sweeps' own spread) or not. Fits 80 columns: names wrap after a dot, the unit has its
    own column, the verdict wraps, and notes are numbered under the table."""
    out.print(f"a: {comparison.a_label}: {comparison.a_device.summary}", markup=False)
    out.print(f"b: {comparison.b_label}: {comparison.b_device.summary}", markup=False)
    table = Table(box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, collapse_padding=True, show_edge=False)
    table.add_column("benchmark", no_wrap=True, overflow="fold")
    table.add_column("unit", no_wrap=True)
    for column in ("a", "b", "b vs a"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("verdict", min_width=max(len(word) for verdict in VERDICTS for word in verdict.split()),
                     overflow="fold")
    table.add_column("note", justify="right", no_wrap=True)
    notes: list[str] = []
    for row in comparison.rows:
        known = row.a if row.a is not None else row.b
        name, factor = scale_for(known, row.unit) if known is not None else (row.unit, 1.0)
        if row.note:
            notes.append(f"{row.name}: {row.note}")
        table.add_row(wrap_name(row.name), name, _with_interval(row.a, row.a_interval, factor),
                      _with_interval(row.b, row.b_interval, factor), _speedup_cell(row), row.verdict or MISSING,
                      escape(f"[{len(notes)}]") if row.note else "")
    out.print(table)
    out.print()
    for number, note in enumerate(notes, start=1):
        out.print(f"  [{number}] {note}", markup=False)
    out.print("a, b: each figure with its ~95% interval below it; b vs a: how many times faster b is (for a "
              "latency, a's time over b's), with the range the two intervals allow below it; verdict: faster or "
              "slower when the two intervals do not overlap, else within noise; noisy: a run marked the figure "
              "noisy; disturbed: other processes were busy during a steady figure, which can shift it without "
              "widening its interval; not comparable: the figures were measured at different sizes; within the "
              "sweep's spread: the difference is no larger than a GEMM "
              "sweep's own measurement at that size differs from its figure; no interval: a run saved before "
              "gpufly measured intervals")


@contextmanager
def _progress(total: int) -> Iterator[tuple[Callable[[int, Benchmark], None],
                                             Callable[[BenchResult | BenchError], None]]]:
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
    quick: Annotated[bool, typer.Option("--quick", help="A shorter GEMM sweep, smaller sizes and fewer repeats "
                                                        "(about a minute on a quiet CPU).")] = False,
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
    catalog's peaks.

    Examples:
      gpufly bench --quick
      gpufly bench --only gemm.bf16,memory --save bench.json
      gpufly bench --compare before.json after.json
    """
    if compare is not None:
        _check_compare_options(save, device, quick, only)
        _compare(compare, json_out)
        return
    from gpufly.bench import BenchResult, open_device, parse_only, run_benchmarks, select
    from gpufly.bench.run import check_names, check_runnable

    if save is not None:  # before measuring: a typo in the path must not cost the run
        check_writable("--save", save, "bench.json")
    wanted = parse_only(only)
    target = open_device(device)
    plan = target.plan(quick=quick)
    check_names(plan, target.groups, wanted)  # a typo is one error before measuring, not a row of the table
    check_runnable(plan, target.groups, wanted)  # so is a selection this device cannot measure (gemm.fp8 on a CPU)
    chosen, skipped = select(plan, target.groups, wanted)
    settings = {"device": target.label, "quick": quick, "only": wanted}
    measured: list[str] = []
    try:
        with _progress(len(chosen)) as (on_start, on_done):
            def done(entry: BenchResult | BenchError) -> None:
                if isinstance(entry, BenchResult):
                    measured.append(entry.name)
                on_done(entry)

            run = run_benchmarks(target, chosen, settings=settings, save=save, errors=skipped,
                                 on_start=on_start, on_done=done)
    except KeyboardInterrupt:
        if save is not None:
            error_console().print(_("interrupted: what was measured is in {path}").format(path=save) if measured
                                  else _("interrupted before anything was measured; {path} was not written").format(
                                      path=save), markup=False)
        raise
    if json_out:
        print_json(run.to_dict())
    else:
        out = console()
        render_run(run, out)
        if save is not None:
            out.print(f"results written to {save}; compare runs with gpufly bench --compare A.json B.json")
    if not run.results:
        kept = f"; {save} was not written" if save is not None else ""
        raise GpuflyError(f"nothing was measured{kept}", hint="see the errors above", exit_code=1)
