"""`gpufly fleet`: many nodes' doctor facts and bench runs side by side; what differs, which GPU falls behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gpufly.cli.render import MISSING, console, error_console, print_json
from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.fleet import FleetReport, NodeData

app = typer.Typer(no_args_is_help=True, add_completion=False)

TOLERANCE_HELP = ("How far behind the median of identical GPUs a figure may fall before it is flagged (0.1 = 10%); "
                  "it must also fall outside its own p10-p90 interval.")


def _gpus_cell(gpus: tuple[str, ...] | None) -> str:
    if gpus is None:
        return MISSING
    if not gpus:
        return "none"
    names = sorted(set(gpus))
    return ", ".join(f"{gpus.count(name)} x {name}" for name in names)


def render_report(report: FleetReport, out: Console) -> None:
    """The nodes in a table, then each finding; the last line says whether the fleet is uniform."""
    out.print(f"gpufly fleet: {len(report.nodes)} node{'s' if len(report.nodes) != 1 else ''}; "
              f"{report.compared} GPU bench figures compared with identical GPUs (tolerance {report.tolerance:.0%}), "
              f"{report.alone} without an identical GPU to compare with")
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("node", "GPUs", "driver", "torch", "bench runs"):
        table.add_column(column, overflow="fold", justify="right" if column == "bench runs" else "left")
    for node in report.nodes:
        table.add_row(node.name, "failed" if node.failed else _gpus_cell(node.gpus), node.driver or MISSING,
                      node.torch or MISSING, str(node.bench_runs))
    out.print(table)
    if report.skipped_files:
        out.print(f"{report.skipped_files} file(s) not ending in .json in the folders were left out")
    if report.uniform:
        out.print("uniform: no node or GPU differs from the rest")
        return
    out.print(f"{len(report.findings)} finding{'s' if len(report.findings) != 1 else ''}:")
    for finding in report.findings:
        out.print(f"  [{finding.kind}] {finding.message}")
        for reason in finding.reasons:
            out.print(f"      why: {reason}")


def _finish(report: FleetReport, json_out: bool) -> None:
    if json_out:
        print_json(report.to_dict())
    else:
        render_report(report, console())
    if not report.uniform:
        raise typer.Exit(1)


@app.callback()
def fleet() -> None:
    """Many nodes' doctor facts and bench runs side by side: what differs, which GPU falls behind.

    Examples:
      gpufly fleet report facts/
      gpufly fleet report facts/ --expect node01,node02 --json
      gpufly fleet run --ray --save fleet/
    """


@app.command()
def report(
    paths: Annotated[list[Path], typer.Argument(metavar="DIR_OR_FILES...",
                                                help="Folders of saved files (every *.json in them) or files: "
                                                     "`gpufly doctor --save`, `gpufly bench --save`, `gpufly fleet "
                                                     "run --save`. A node is named by its file name up to the first "
                                                     "dot.")],
    tolerance: Annotated[float, typer.Option("--tolerance", help=TOLERANCE_HELP)] = 0.1,
    expect: Annotated[str | None, typer.Option("--expect", metavar="NODES",
                                               help="The nodes that should have written files (comma or space "
                                                    "separated, e.g. from `scontrol show hostnames`): one that did "
                                                    "not is a finding.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare nodes' saved doctor facts and bench runs: what differs, which GPU falls behind; exits 1 on any
    finding.

    Examples:
      gpufly fleet report facts/
      gpufly fleet report facts/ bench/ --tolerance 0.05
      gpufly fleet report fleet/ --expect "node01 node02 node03" --json
    """
    from gpufly.fleet import build_report, check_tolerance, read_fleet

    check_tolerance(tolerance)
    expected = expect.replace(",", " ").split() if expect is not None else []
    if expect is not None and not expected:
        raise GpuflyError("--expect names no node", hint="e.g. --expect node01,node02, or leave --expect out")
    _finish(build_report(read_fleet(paths), tolerance, expected), json_out)


def _bench_ref(bench: str | None, no_bench: bool) -> str | None:
    """The bench each node runs, checked here (a bad reference is one error before the cluster is touched), with
    a file reference made absolute, since the nodes' workers do not start in this folder."""
    from gpufly.fleet import QUICK_BENCH
    from gpufly.loading import is_file_ref, load_function, split_ref

    if no_bench:
        if bench is not None:
            raise GpuflyError("--bench and --no-bench contradict each other", hint="give one of them")
        return None
    if bench is None:
        return QUICK_BENCH
    where, name = split_ref(bench)
    load_function(bench, example="bench")
    return f"{Path(where).resolve()}:{name}" if is_file_ref(where) else bench


def _announce(save: Path | None) -> Callable[[NodeData], None]:
    from gpufly.fleet import save_node

    err = error_console()

    def on_node(node: NodeData) -> None:
        if node.problems and node.facts is None:
            state = "; ".join(node.problems)
        else:
            state = f"facts, {len(node.runs)} bench run{'s' if len(node.runs) != 1 else ''}"
            state += f"; {'; '.join(node.problems)}" if node.problems else ""
        if save is not None:
            save_node(save, node)
        err.print(f"{node.name}: {state}", markup=False)

    return on_node


@app.command()
def run(
    address: Annotated[str, typer.Argument(metavar="ADDRESS", help="The Ray cluster: HOST:6379, ray://HOST:10001, "
                                                                      "or auto (the one this machine joined).")
                       ] = "auto",
    ray: Annotated[bool, typer.Option("--ray", help="Run on a Ray cluster (the one scheduler `fleet run` drives; "
                                                    "for Slurm, see docs/fleet.md).")] = False,
    save: Annotated[Path | None, typer.Option("--save", metavar="DIR",
                                              help="Write each node's files to DIR as they arrive; `gpufly fleet "
                                                   "report DIR` reads them back.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                           help="Give up on nodes with no result by then.")] = 1800.0,
    bench: Annotated[str | None, typer.Option("--bench", metavar="MODULE:FUNCTION",
                                              help="Run this function on each node instead of the quick bench; it "
                                                   "returns gpufly BenchRun objects.")] = None,
    no_bench: Annotated[bool, typer.Option("--no-bench", help="Only the doctor on each node.")] = False,
    tolerance: Annotated[float, typer.Option("--tolerance", help=TOLERANCE_HELP)] = 0.1,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run the doctor and a quick bench on every node of a Ray cluster and compare them; exits 1 on any
    finding.

    Examples:
      gpufly fleet run --ray
      gpufly fleet run --ray head-node:6379 --save fleet/ --json
      gpufly fleet run --ray --no-bench --timeout 300
    """
    from gpufly.fleet import FleetInput, NodeJob, build_report, check_tolerance, run_on_ray

    if not ray:
        raise GpuflyError("say which scheduler runs the nodes: --ray",
                          hint="gpufly fleet run --ray [ADDRESS]; on Slurm, save files with srun and use "
                               "`gpufly fleet report` (docs/fleet.md)")
    check_tolerance(tolerance)
    if timeout <= 0:
        raise GpuflyError(f"--timeout {timeout:g} must be a positive number of seconds", hint="e.g. --timeout 1800")
    if save is not None and save.exists() and not save.is_dir():
        raise GpuflyError(f"--save {save} is not a folder", hint="give a folder (made if missing), e.g. --save fleet/")
    job = NodeJob(bench=_bench_ref(bench, no_bench))
    nodes = run_on_ray(address, job, timeout_s=timeout, on_node=_announce(save))
    _finish(build_report(FleetInput(tuple(nodes)), tolerance), json_out)
