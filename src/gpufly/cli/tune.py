"""`gpufly tune`: try the optimizations on a workload, each in its own process, and keep the best safe one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufly.cli.render import console, print_json
from gpufly.errors import GpuflyError


def tune(
    workload: Annotated[str, typer.Argument(help="recsys, or your module:function / file.py:function.")],
    budget_minutes: Annotated[float, typer.Option(help="Stop starting new trials after this long.")] = 30.0,
    steps: Annotated[int, typer.Option(help="Baseline-sized steps each trial trains (same samples for all).")] = 40,
    timeout: Annotated[float, typer.Option(help="Seconds before a trial is stopped and recorded as a timeout.")]
    = 300.0,
    results: Annotated[Path | None, typer.Option(help="Trial results, one JSON line each.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on from the results file, skipping done trials.")]
    = False,
    ddp: Annotated[int, typer.Option(help="Also try DDP over this many processes (torchrun; gloo on CPU).")] = 0,
    task: Annotated[str, typer.Option(help="train, or infer (quantization, pruning, serving batch size).")]
    = "train",
    html: Annotated[Path | None, typer.Option("--html", help="Also write a page with a speedup chart.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Measure each optimization on the workload, reject any that changes the loss, print the best safe one."""
    if task not in ("train", "infer"):
        raise GpuflyError(f"--task is train or infer, not {task!r}", "gpufly tune cnn --task infer")
    if budget_minutes <= 0 or steps < 4 or timeout <= 0 or ddp < 0:
        raise GpuflyError("--budget-minutes and --timeout must be positive and --steps at least 4",
                          "for example --budget-minutes 20 --steps 40")
    suffix = "-infer" if task == "infer" else ""
    results = results or Path(f"gpufly-tune-{workload.replace('/', '_').replace(':', '_')}{suffix}.jsonl")
    if html is not None and not html.parent.is_dir():
        raise GpuflyError(f"cannot write {html}: {html.parent} is not a folder", "give --html a path in a folder")
    if results.exists() and not resume:
        raise GpuflyError(f"{results} already holds trial results",
                          "add --resume to go on from them, or --results NEW.jsonl to start afresh")
    try:
        import torch
    except ImportError:
        raise GpuflyError("tuning needs PyTorch", "pip install 'gpufly[torch]'") from None
    from gpufly.tune.engine import ResultsLog, Search, code_for, default_knobs, run_in_subprocess
    from gpufly.tune.worker import build

    try:
        built = build(workload, {})
    except GpuflyError:
        raise
    except Exception as exc:
        raise GpuflyError(f"the workload {workload} failed to build: {type(exc).__name__}: {exc}",
                          "it must return a gpufly.tune.workload.Workload (see docs/tune.md)") from None
    from gpufly.tune.workload import Workload

    if not isinstance(built, Workload):
        raise GpuflyError(f"the workload {workload} returned {type(built).__name__}, not a Workload",
                          "it must return gpufly.tune.workload.Workload(model=..., dataset=..., loss=...)")
    if task == "infer" and (ddp or built.batch_sampler_dataset):
        raise GpuflyError("--task infer takes neither --ddp nor a batched dataset", "tune inference on one process")
    knobs = default_knobs(built, torch.cuda.is_available(), ddp, task)
    search = Search(workload, knobs, ResultsLog(results), lambda w, t, s: run_in_subprocess(w, t, s, steps=steps),
                    timeout_s=timeout, budget_s=budget_minutes * 60, fixed={"task": "infer"} if task == "infer" else {})
    best = _run_with_progress(search, 1 + sum(len(v) for v in knobs.values()), quiet=as_json)
    rows = [_row(r) for r in search.results]
    best_row = None if best is None else {"configuration": best.name, "knobs": best.knobs, "speedup": best.speedup,
                                          "code": code_for(best.knobs)}
    if html is not None:
        _write_html(html, workload, rows, best_row, results)
    if as_json:
        print_json({"workload": workload, "results_file": str(results), "trials": rows, "best": best_row,
                    "html": None if html is None else str(html)})
        return
    _render(rows, best, results)
    if html is not None:
        console().print(f"speedup chart: {html}", markup=False)


def _write_html(path: Path, workload: str, rows: list[dict[str, Any]], best: dict[str, Any] | None,
                results: Path) -> None:
    from gpufly.tune.render import write_html

    try:
        write_html(path, workload, rows, best, str(results))
    except OSError as exc:
        raise GpuflyError(f"cannot write {path}: {exc.strerror}",
                          f"the trial results are kept in {results}; pick another --html path") from None


def _run_with_progress(search: Any, expected: int, quiet: bool) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console(), disable=quiet, transient=True) as progress:
        task = progress.add_task("trials", total=expected)
        search.on_result = lambda r: progress.update(task, advance=1, description=f"trials (last: {r.name})")
        return search.run()


def _row(r: Any) -> dict[str, Any]:
    return {"configuration": r.name, "knobs": r.knobs, "status": r.status, "throughput": r.throughput,
            "unit": r.unit, "speedup": r.speedup, "peak_memory_bytes": r.peak_memory_bytes,
            "loss_drift": r.loss_drift, "error": r.error, "seconds": round(r.seconds, 2)}


def _render(rows: list[dict[str, Any]], best: Any, results: Path) -> None:
    from rich.table import Table

    from gpufly.cli.render import gib

    table = Table(title="gpufly tune")
    for column in ("configuration", "throughput", "speedup", "peak memory", "loss drift", "verdict"):
        table.add_column(column, justify="left" if column in ("configuration", "verdict") else "right")
    for row in rows:
        verdict = {"ok": "safe", "unsafe": "unsafe: loss drifted"}.get(row["status"], row["status"])
        if row["error"]:
            verdict += f": {row['error'][:60]}"
        table.add_row(row["configuration"],
                      "—" if row["throughput"] is None else f"{row['throughput']:,.0f} {row['unit']}/s",
                      "—" if row["speedup"] is None else f"{row['speedup']:.2f}x",
                      "—" if row["peak_memory_bytes"] is None else gib(row["peak_memory_bytes"]),
                      "—" if row["loss_drift"] is None else f"{100 * row['loss_drift']:.2f}%", verdict)
    out = console()
    out.print(table)
    if best is None:
        out.print("the baseline itself failed; nothing to compare against (see the error above)")
        return
    out.print(f"best safe configuration: {best.name} ({best.speedup:.2f}x the baseline)", markup=False)
    from gpufly.tune.engine import code_for

    for line in code_for(best.knobs):
        out.print(f"  {line}", markup=False)
    out.print(f"as JSON: {json.dumps(best.knobs)}", markup=False)
    out.print(f"or in your script: gpufly.apply('{results}', model, optimizer, loader)", markup=False)
    out.print(f"results: {results} (--resume goes on from it)", markup=False)
