"""`gpufly tune`: try the optimizations on a workload, each in its own process, and keep the best safe one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufly.cli.paths import check_writable
from gpufly.cli.render import console, print_json
from gpufly.errors import GpuflyError

SEARCH_STEPS = 40
STAGE_STEPS = 160
MIN_STAGE_STEPS = 40
"""The recsys stages compare optimizers (dense Adam, SparseAdam) whose paths differ most while the model is near
its initial state: under 40 steps the probe loss of the sparse stage drifts past the tolerance though its held-out
loss is the same, so the case study would lose its main step to a run too short to judge it."""

WORKLOAD_HELP = ("The workload: a built-in (cnn, transformer, recsys: recsys runs the stage-by-stage case study), "
                 "or your own as package.module:function or path/file.py:function.")


def tune(
    workload: Annotated[str, typer.Argument(help=WORKLOAD_HELP)],
    budget_minutes: Annotated[float | None, typer.Option(help="Stop starting new trials after this long "
                                                              "(30 by default; the recsys stages all run).")] = None,
    steps: Annotated[int | None, typer.Option(help="Baseline-sized steps each trial trains (same samples for all; "
                                                   f"{SEARCH_STEPS} by default, {STAGE_STEPS} for the recsys "
                                                   "stages).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before a trial is stopped and recorded as a timeout.")]
    = 300.0,
    results: Annotated[Path | None, typer.Option(help="Trial results, one JSON line each.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on from the results file, skipping done trials.")]
    = False,
    ddp: Annotated[int, typer.Option(help="Also try DDP over this many processes, 2 or more (torchrun; gloo on CPU); "
                                          "for recsys, the communication stage's process count (2 by default).")]
    = 0,
    task: Annotated[str, typer.Option(help="train, or infer (quantization, pruning, serving batch size).")]
    = "train",
    device: Annotated[str, typer.Option(help="auto (CUDA when there is a GPU), cuda or cpu.")] = "auto",
    price_per_hour: Annotated[float | None, typer.Option(help="USD per hour of this machine, for samples per dollar "
                                                              "(recsys; default: the catalog's price on a GPU it "
                                                              "prices, spread over 3 years).")] = None,
    search: Annotated[bool, typer.Option("--search", help="For recsys: the generic search instead of the stages.")]
    = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a page with a speedup chart.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Measure each optimization on the workload, reject any that changes the loss, print the best safe one."""
    stages_run = workload == "recsys" and task == "train" and not search
    _check_mode(workload, stages_run, budget_minutes, steps, search, price_per_hour)
    steps = steps if steps is not None else STAGE_STEPS if stages_run else SEARCH_STEPS
    budget_minutes = 30.0 if budget_minutes is None else budget_minutes
    _check_options(task, budget_minutes, steps, timeout, ddp, device, price_per_hour)
    suffix = "-infer" if task == "infer" else ""
    results = results or Path(f"gpufly-tune-{workload.replace('/', '_').replace(':', '_')}{suffix}.jsonl")
    _check_paths(results, resume, html)
    try:
        import torch
    except ImportError:
        raise GpuflyError("tuning needs PyTorch", "pip install 'gpufly[torch]'") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise GpuflyError("--device cuda, but torch sees no CUDA GPU", "leave --device at auto, or use --device cpu")
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if stages_run:
        _stages(torch, cuda, steps, timeout, results, ddp or 2, price_per_hour, html, as_json)
        return
    built = _build(workload)
    if task == "infer" and (ddp or built.batch_sampler_dataset):
        raise GpuflyError("--task infer takes neither --ddp nor a batched dataset", "tune inference on one process")
    from gpufly.tune.engine import ResultsLog, Search, code_for, default_knobs, run_in_subprocess

    knobs = default_knobs(built, cuda, ddp, task)
    where = "cuda" if cuda else "cpu"
    run = Search(workload, knobs, ResultsLog(results),
                 lambda w, t, s: run_in_subprocess(w, t, s, steps=steps, device=where),
                 timeout_s=timeout, budget_s=budget_minutes * 60, fixed={"task": "infer"} if task == "infer" else {},
                 identity=_identity(torch, cuda, workload, task, steps), steps=steps)
    best = _run_with_progress(run, 1 + sum(len(v) for v in knobs.values()), quiet=as_json)
    rows = [_row(r) for r in run.results]
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


def _check_mode(workload: str, stages_run: bool, budget_minutes: float | None, steps: int | None, search: bool,
                price_per_hour: float | None) -> None:
    """Options that only one kind of run reads are refused elsewhere, not silently dropped."""
    if stages_run and budget_minutes is not None:
        raise GpuflyError("the recsys case study runs all its stages; --budget-minutes applies to a search",
                          "leave --budget-minutes out, or add --search for the generic search with a budget")
    if stages_run and steps is not None and steps < MIN_STAGE_STEPS:
        raise GpuflyError(f"the recsys stages need --steps {MIN_STAGE_STEPS} or more, not {steps}: shorter runs "
                          "leave the model too close to its start to judge the optimizers' losses",
                          f"leave --steps out ({STAGE_STEPS}), or give --steps {MIN_STAGE_STEPS}")
    if search and workload != "recsys":
        raise GpuflyError("--search is for recsys (every other workload is searched anyway)", "leave --search out")
    if price_per_hour is not None and not stages_run:
        raise GpuflyError("--price-per-hour prices the recsys case study's stages; a search reports speedups only",
                          f"gpufly tune recsys --price-per-hour {price_per_hour:g}")


def _check_options(task: str, budget_minutes: float, steps: int, timeout: float, ddp: int, device: str,
                   price_per_hour: float | None) -> None:
    """Refuse what cannot run before anything is built or measured (nan and inf included)."""
    if task not in ("train", "infer"):
        raise GpuflyError(f"--task is train or infer, not {task!r}", "gpufly tune cnn --task infer")
    if device not in ("auto", "cuda", "cpu"):
        raise GpuflyError(f"--device is auto, cuda or cpu, not {device!r}", "leave it at auto to use a GPU if any")
    for name, value in (("--budget-minutes", budget_minutes), ("--timeout", timeout)):
        if not math.isfinite(value) or value <= 0:
            raise GpuflyError(f"{name} must be a positive number of {'minutes' if 'budget' in name else 'seconds'}, "
                              f"not {value}", "for example --budget-minutes 20 --timeout 300")
    if steps < 4:
        raise GpuflyError(f"--steps must be at least 4, not {steps}", "for example --steps 40")
    if ddp == 1:
        raise GpuflyError("--ddp 1 is one process, which is no DDP at all",
                          "give --ddp 2 or more to try DistributedDataParallel, or leave --ddp out")
    if ddp < 0:
        raise GpuflyError(f"--ddp is a process count, not {ddp}", "give --ddp 2 or more, or leave it out")
    if price_per_hour is not None and (not math.isfinite(price_per_hour) or price_per_hour <= 0):
        raise GpuflyError(f"--price-per-hour must be a positive number of USD, not {price_per_hour}",
                          "for example --price-per-hour 2.5")


def _check_paths(results: Path, resume: bool, html: Path | None) -> None:
    """Bad output paths are refused before the first trial, so no measurement is lost to them."""
    check_writable("--results", results, example="trials.jsonl")
    if results.exists() and not resume:
        raise GpuflyError(f"{results} already holds trial results",
                          "add --resume to go on from them, or --results NEW.jsonl to start afresh")
    if html is not None:
        check_writable("--html", html, example="tune.html")


def _build(workload: str) -> Any:
    """The workload, built once here so that a loading error is one line before any trial starts."""
    from gpufly.tune.worker import build
    from gpufly.tune.workload import Workload

    try:
        built = build(workload, {})
    except GpuflyError:
        raise
    except SyntaxError as exc:
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else f"line {exc.lineno}"
        raise GpuflyError(f"the workload {workload} has a syntax error: {exc.msg} ({where})",
                          f"fix the code there; `python -m py_compile {exc.filename or 'FILE'}` shows it") from None
    except Exception as exc:
        raise GpuflyError(f"the workload {workload} failed to build: {type(exc).__name__}: {exc}",
                          "it must return a gpufly.tune.workload.Workload (see docs/tune.md)") from None
    if not isinstance(built, Workload):
        raise GpuflyError(f"the workload {workload} returned {type(built).__name__}, not a Workload",
                          "it must return gpufly.tune.workload.Workload(model=..., dataset=..., loss=...)")
    return built


def _device_name(torch: Any, cuda: bool) -> str:
    return torch.cuda.get_device_name(0) if cuda else "cpu"


def _identity(torch: Any, cuda: bool, workload: str, task: str, steps: int, **extra: Any) -> dict[str, Any]:
    from gpufly.tune.engine import run_identity

    return run_identity(workload, task, steps, _device_name(torch, cuda), str(torch.__version__), **extra)


def _stages(torch: Any, cuda: bool, steps: int, timeout: float, results: Path, processes: int,
            price_per_hour: float | None, html: Path | None, as_json: bool) -> None:
    """The recommender case study: the cumulative stages as trials, with samples per dollar."""
    from gpufly.tune.engine import ResultsLog, code_for, run_in_subprocess
    from gpufly.tune.stages import WORKLOAD, best_stage, catalog_price_per_hour, row, run_stages, stages

    price_note = None if price_per_hour is None else f"${price_per_hour:g}/h (given)"
    if price_per_hour is None and cuda:
        properties = torch.cuda.get_device_properties(0)
        found = catalog_price_per_hour(properties.name, properties.total_memory)
        if found is not None:
            price_per_hour, price_note = found
    where = "cuda" if cuda else "cpu"
    identity = _identity(torch, cuda, WORKLOAD, "train", steps, mode="stages", ddp=processes)

    def runner(trial: Any) -> Any:
        return run_in_subprocess(WORKLOAD, trial, timeout, steps=steps, device=where)

    done = _run_stages_with_progress(lambda hook: run_stages(runner, ResultsLog(results), identity, processes,
                                                             price_per_hour, on_result=hook),
                                     len(stages(processes)), quiet=as_json)
    rows = [row(entry) for entry in done]
    best = best_stage(done)
    best_row = None if best is None else {"configuration": best.result.name, "knobs": best.result.knobs,
                                          "speedup": best.result.speedup, "code": code_for(best.result.knobs)}
    if html is not None:
        _write_html(html, WORKLOAD, rows, best_row, results)
    if as_json:
        print_json({"workload": WORKLOAD, "mode": "stages", "results_file": str(results), "trials": rows,
                    "best": best_row, "price_per_hour": price_per_hour, "price": price_note,
                    "html": None if html is None else str(html)})
        return
    _render_stages(rows, best_row, price_note, results)
    if html is not None:
        console().print(f"speedup chart: {html}", markup=False)


def _run_stages_with_progress(run: Any, expected: int, quiet: bool) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console(), disable=quiet, transient=True) as progress:
        task = progress.add_task("stages", total=expected)
        return run(lambda e: progress.update(task, advance=1, description=f"stages (last: {e.result.name})"))


def _render_stages(rows: list[dict[str, Any]], best: dict[str, Any] | None, price_note: str | None,
                   results: Path) -> None:
    from rich.table import Table

    table = Table(title="gpufly tune recsys: the case study, stage by stage (cumulative; unsafe stages not kept)")
    columns = ["stage", "configuration", "samples/s", "speedup", "held-out loss", "verdict"]
    if price_note:
        columns.append("samples/$")
    for column in columns:
        table.add_column(column, justify="left" if column in ("stage", "configuration", "verdict") else "right")
    for r in rows:
        verdict = _verdict(r)
        cells = [r["stage"], r["configuration"], "—" if r["throughput"] is None else f"{r['throughput']:,.0f}",
                 "—" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                 "—" if r["held_out_loss"] is None else f"{r['held_out_loss']:.4f}", verdict]
        if price_note:
            cells.append("—" if r["samples_per_dollar"] is None else f"{r['samples_per_dollar']:,.0f}")
        table.add_row(*cells)
    out = console()
    out.print(table)
    out.print(f"price: {price_note}" if price_note else
              "samples per dollar: give --price-per-hour (on a GPU the catalog prices, its price is taken)",
              markup=False)
    if best is not None:
        out.print(f"best safe stage: {best['configuration']} ({best['speedup']:.2f}x the naive pipeline)",
                  markup=False)
        out.print(f"as JSON: {json.dumps(best['knobs'])}", markup=False)
    out.print(f"results: {results} (--resume goes on from it)", markup=False)


def _verdict(row: dict[str, Any]) -> str:
    """safe; unsafe with the reason (the probe loss drifted, or the evaluation metric dropped); or the failure."""
    verdict = row["status"]
    if verdict == "ok":
        verdict = "safe"
    elif verdict == "unsafe":
        from gpufly.tune.engine import DRIFT_TOLERANCE

        drift = row.get("loss_drift")
        verdict = ("unsafe: loss drifted" if drift is not None and drift > DRIFT_TOLERANCE
                   else "unsafe: metric dropped")
    if row["error"]:
        verdict += f": {row['error'][:60]}"
    return verdict


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
            "mean_throughput": r.mean_throughput, "unit": r.unit, "speedup": r.speedup,
            "peak_memory_bytes": r.peak_memory_bytes, "loss_drift": r.loss_drift, "eval_metric": r.eval_metric,
            "metric_drop": r.metric_drop, "world_size": r.world_size, "error": r.error,
            "seconds": round(r.seconds, 2)}


def _render(rows: list[dict[str, Any]], best: Any, results: Path) -> None:
    from rich.table import Table

    from gpufly.cli.render import gib

    table = Table(title="gpufly tune")
    for column in ("configuration", "throughput", "speedup", "peak memory", "loss drift", "verdict"):
        table.add_column(column, justify="left" if column in ("configuration", "verdict") else "right")
    for row in rows:
        table.add_row(row["configuration"],
                      "—" if row["throughput"] is None else f"{row['throughput']:,.0f} {row['unit']}/s",
                      "—" if row["speedup"] is None else f"{row['speedup']:.2f}x",
                      "—" if row["peak_memory_bytes"] is None else gib(row["peak_memory_bytes"]),
                      "—" if row["loss_drift"] is None else f"{100 * row['loss_drift']:.2f}%", _verdict(row))
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
