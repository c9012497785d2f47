"""`gpufly gpus`: list, filter and rank the catalog; `gpufly gpus show NAME`; the ladder chart."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from gpufly import __version__
from gpufly.cli.paths import check_writable
from gpufly.cli.render import MISSING, console, number, print_json, print_note

if TYPE_CHECKING:
    from gpufly.catalog import GpuSpec
    from gpufly.catalog.query import Metric

app = typer.Typer(no_args_is_help=False, add_completion=False)

SCHEMA_VERSION = 1
_TABLE_METRICS = ("vram_gib", "memory_bandwidth_gbps", "fp32_tflops", "tf32_tensor_tflops",
                  "fp16_tensor_tflops", "bf16_tensor_tflops", "fp8_tensor_tflops", "int8_tensor_tops",
                  "tdp_w", "launch_price_usd")
_SHORT = {"vram_gib": "GiB", "memory_bandwidth_gbps": "GB/s", "fp32_tflops": "FP32",
          "tf32_tensor_tflops": "TF32", "fp16_tensor_tflops": "FP16", "bf16_tensor_tflops": "BF16",
          "fp8_tensor_tflops": "FP8", "int8_tensor_tops": "INT8", "tdp_w": "W", "launch_price_usd": "USD",
          "fp16_tflops": "FP16 vec", "fp4_tensor_tflops": "FP4", "memory_bus_bits": "Bus bits",
          "launch_year": "Year", "pcie_gen": "PCIe gen", "pcie_lanes": "Lanes", "compute_capability": "CC",
          "sm_count": "SMs", "boost_clock_mhz": "MHz", "interconnect_gbps": "Link GB/s", "dies": "Dies"}


DERIVED_MARK = "≈"
"""Marks a figure derived from the architecture's per-SM rate rather than published (tables, `show`, the ladder)."""
_DERIVED_CAPTION = (f"{DERIVED_MARK} = not published; derived from the architecture's dense ops/clock/SM x SMs x "
                    "boost clock (`gpufly gpus show NAME` gives the formula).")


def _value(m: Metric, spec: GpuSpec) -> str:
    value = m(spec)
    if value is not None and m.key.endswith("_per_usd"):
        text = f"{value:.3g}"
    elif value is not None and m.key == "launch_year":
        return str(int(value))
    elif value is not None and m.key == "compute_capability":
        return f"{value:.1f}"
    else:
        text = number(value)
    return f"{DERIVED_MARK}{text}" if value is not None and spec.is_derived(m.key) else text


def _header(m: Metric) -> str:
    return _SHORT.get(m.key, m.unit or m.key)


_GIVE_WAY = ("int8_tensor_tops", "fp8_tensor_tflops", "tf32_tensor_tflops", "launch_price_usd", "tdp_w",
             "bf16_tensor_tflops", "fp32_tflops", "arch", "memory_bandwidth_gbps", "fp16_tensor_tflops", "vram_gib")
"""Columns in the order they give way on a narrow terminal ("arch" is the Arch column); the GPU name and
the sort column always stay."""


def _build_table(specs: list[GpuSpec], columns: list[Metric], sort: Metric | None, arch: bool,
                 hidden: list[str]) -> Table:
    from gpufly.catalog.query import GENERATION_ORDER

    title = f"{len(specs)} GPUs" + (f", ranked by {sort.label.lower()}" if sort else "")
    order = "" if sort else f"Ordered by {GENERATION_ORDER} (--sort METRIC ranks by another figure). "
    caption = (f"{order}Tensor rates dense, TFLOPS (INT8 in TOPS); — = not published nor derivable. "
               "GeForce FP16/BF16/FP8 with FP32 accumulate.")
    if any(spec.is_derived(m.key) for spec in specs for m in columns if m(spec) is not None):
        caption += " " + _DERIVED_CAPTION
    if hidden:
        caption += f" Not shown at this width: {', '.join(hidden)} (widen the terminal, or --json for every field)."
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, caption=caption, caption_justify="left")
    rows = [[_value(m, spec) for m in columns] for spec in specs]
    table.add_column("GPU", no_wrap=True, min_width=max([3, *(len(spec.name) for spec in specs)]))
    if arch:
        table.add_column("Arch", no_wrap=True, min_width=max([4, *(len(spec.architecture) for spec in specs)]))
    for i, m in enumerate(columns):
        style = "bold" if sort is not None and m.key == sort.key else None
        width = max([len(_header(m)), *(len(row[i]) for row in rows)])
        table.add_column(_header(m), justify="right", style=style, no_wrap=True, min_width=width)
    for spec, row in zip(specs, rows, strict=True):
        table.add_row(spec.name, *([spec.architecture] if arch else []), *row)
    return table


def _table(specs: list[GpuSpec], sort: Metric | None, out: Console) -> Table:
    """The catalog table at the console's width: whole GPU names always, the sort column always, and as
    many of the other columns as fit, dropping the least used first (the caption names those left out)."""
    from gpufly.catalog.query import METRICS

    columns = [METRICS[key] for key in _TABLE_METRICS]
    if sort is not None and sort.key not in _TABLE_METRICS:
        columns.append(sort)
    arch = True
    hidden: list[str] = []
    table = _build_table(specs, columns, sort, arch, hidden)
    unbounded = out.options.update_width(1_000_000)
    for key in _GIVE_WAY:
        if Measurement.get(out, unbounded, table).minimum <= out.width:
            break
        if sort is not None and key == sort.key:
            continue
        if key == "arch":
            arch = False
            hidden.append("Arch")
        else:
            columns = [m for m in columns if m.key != key]
            hidden.append(_header(METRICS[key]))
        table = _build_table(specs, columns, sort, arch, hidden)
    return table


_SORT_HELP = ("Rank by a field or ratio: vram, bandwidth, fp16, tflops_per_usd, tflops_per_watt, "
              "gbps_per_usd, vram_gib_per_usd... Default: newest architecture first, then FP16/BF16 rate.")
_CHART_HELP = "Draw the ladder of the --sort metric (default peak_tflops) to a .png or .svg."
_HAS_HELP = "Has tensor support for tf32, fp16, bf16, fp8, fp4 or int8; repeatable."


@app.callback(invoke_without_command=True)
def gpus(
    ctx: typer.Context,
    vendor: Annotated[str | None, typer.Option(help="nvidia, amd, intel or apple.")] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture or part of it: ampere, ada...")] = None,
    segment: Annotated[
        str | None, typer.Option(help="consumer, laptop, workstation, datacenter, embedded or soc.")
    ] = None,
    min_vram: Annotated[
        float | None, typer.Option("--min-vram", metavar="GIB", help="At least this much memory.")
    ] = None,
    has: Annotated[list[str] | None, typer.Option(help=_HAS_HELP)] = None,
    sort: Annotated[str | None, typer.Option(metavar="METRIC", help=_SORT_HELP)] = None,
    reverse: Annotated[bool, typer.Option("--reverse", help="Worst (or, unsorted, oldest) first.")] = False,
    chart: Annotated[Path | None, typer.Option(metavar="FILE", help=_CHART_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The GPU catalog and ladder.

    Newest architecture first, then by dense FP16/BF16 rate; --sort ranks by any figure, --chart draws it.

    Examples:
      gpufly gpus --vendor nvidia --min-vram 24
      gpufly gpus --sort tflops_per_usd --segment consumer
      gpufly gpus --chart ladder.png --sort bandwidth
      gpufly gpus show 4090
    """
    if ctx.invoked_subcommand is not None:
        return
    from gpufly.catalog import default_catalog
    from gpufly.catalog.query import GENERATION_ORDER, METRICS, Filters, by_generation, metric, rank, select

    chosen = metric(sort) if sort else None
    filters = Filters(vendor=vendor, arch=arch, segment=segment, min_vram_gib=min_vram,
                      has=tuple(has or ()))
    if chart is not None:  # before drawing, which takes seconds
        check_writable("--chart", chart, "ladder.png")
    catalog = default_catalog()
    specs = select(catalog, filters)
    if chosen is not None or chart is not None:
        specs = rank(specs, chosen or METRICS["peak_tflops"], reverse=reverse)
    else:
        specs = by_generation(specs, catalog)
        if reverse:
            specs.reverse()
    if chart is not None:
        from gpufly.catalog.ladder import draw_ladder

        source = (f"Source: vendor datasheets and architecture whitepapers, per GPU in the gpufly catalog "
                  f"(gpufly {__version__}; `gpufly gpus show NAME` lists them). Dense rates, no sparsity.")
        drawn = draw_ladder(specs, chosen or METRICS["peak_tflops"], chart, source, derived_mark=DERIVED_MARK)
        if not json_out:
            console().print(f"wrote {chart} ({drawn} GPUs)")
    if json_out:
        order = f"ranked by {chosen.key}" if chosen else f"ordered by {GENERATION_ORDER}"
        print_json({"schema_version": SCHEMA_VERSION, "count": len(specs), "sort": chosen.key if chosen else None,
                    "order": order + (", reversed" if reverse else ""), "gpus": [s.to_dict() for s in specs]})
    elif chart is None:
        out = console()
        out.print(_table(specs, chosen, out))


_SHOW_FIELDS = (
    ("Vendor", "vendor", ""), ("Segment", "segment", ""), ("Architecture", "architecture", ""),
    ("Chip", "chip", ""), ("Compute capability", "compute_capability", ""),
    ("Memory", "vram_gib", "GiB"), ("Memory type", "memory_type", ""),
    ("Memory bus", "memory_bus_bits", "bit"),
    ("Memory bandwidth", "memory_bandwidth_gbps", "GB/s"), ("SMs (CUs, Xe-cores, GPU cores)", "sm_count", ""),
    ("Boost clock", "boost_clock_mhz", "MHz"), ("FP32", "fp32_tflops", "TFLOPS"),
    ("FP16 (non-tensor)", "fp16_tflops", "TFLOPS"), ("TF32 tensor", "tf32_tensor_tflops", "TFLOPS"),
    ("FP16 tensor", "fp16_tensor_tflops", "TFLOPS"), ("BF16 tensor", "bf16_tensor_tflops", "TFLOPS"),
    ("FP8 tensor", "fp8_tensor_tflops", "TFLOPS"), ("FP4 tensor", "fp4_tensor_tflops", "TFLOPS"),
    ("INT8 tensor", "int8_tensor_tops", "TOPS"), ("Board power", "tdp_w", "W"),
    ("Form factor", "form_factor", ""), ("Devices per card", "dies", ""), ("Interface", "interface", ""),
    ("GPU-to-GPU bandwidth", "interconnect_gbps", "GB/s per GPU"), ("Launch year", "launch_year", ""),
    ("Launch price", "launch_price_usd", "USD"),
)


def _cell(value: object, unit: str) -> str:
    if value is None:
        return f"{MISSING} (not published)"
    if isinstance(value, float | int) and not isinstance(value, bool):
        text = str(value) if isinstance(value, int) and value < 3000 else number(value)
        return f"{text} {unit}".strip()
    return str(value)


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="A GPU name, loosely: 4090, 'h100 sxm', a100-80g...")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one GPU in full, with its sources.

    Examples:
      gpufly gpus show 4090
      gpufly gpus show "h100 sxm" --json
    """
    from gpufly.catalog import default_catalog
    from gpufly.catalog.query import METRICS

    resolution = default_catalog().resolve(name)
    spec = resolution.spec
    if resolution.assumed:
        print_note(resolution.assumed)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "assumed": resolution.assumed, "gpu": spec.to_dict()})
        return
    table = Table(title=f"{spec.full_name}  ({spec.id})", show_header=False,
                  title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    for label, attr, unit in _SHOW_FIELDS:
        cell = _cell(getattr(spec, attr), unit)
        table.add_row(label, f"{DERIVED_MARK}{cell} (derived)" if spec.is_derived(attr) else cell)
    for key in ("peak_tflops", "tflops_per_watt", "tflops_per_usd", "gbps_per_usd", "vram_gib_per_usd"):
        m = METRICS[key]
        value = m(spec)
        mark = DERIVED_MARK if value is not None and spec.is_derived(key) else ""
        table.add_row(m.label, _cell(value, m.unit) if value is None else f"{mark}{value:.4g} {m.unit}")
    for attr, formula in spec.derivations.items():
        table.add_row(f"Derived {_SHORT.get(attr, attr)}", formula)
    if spec.aliases:
        table.add_row("Also known as", ", ".join(spec.aliases))
    if spec.notes:
        table.add_row("Notes", spec.notes)
    table.add_row("Sources", "\n".join(spec.sources))
    console().print(table)
