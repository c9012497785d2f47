"""`gpufly tune`: try the optimizations on a workload, each in its own process, and keep the best safe one."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufly.cli.paths import check_writable
from gpufly.cli.render import console, print_json
from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.i18n import gettext as _

SEARCH_STEPS = 40
TIMEOUT_S = 300.0
"""Seconds before a trial is stopped, unless --timeout says otherwise."""
STAGE_STEPS = 160
MIN_STAGE_STEPS = 40
"""The recsys stages compare optimizers (dense Adam, SparseAdam) whose paths differ most while the model is near
its initial state: under 40 steps the probe loss of the sparse stage drifts past the tolerance though its held-out
loss is the same, so the case study would lose its main step to a run too short to judge it."""

NODES_LISTED = 4
"""Up to this many nodes, the torchrun command is printed once per node; past it, once for all."""
INFER_ONE_PROCESS = "--task infer takes neither --ddp nor a batched dataset"
WORKLOAD_HELP = ("The workload: a built-in (cnn, transformer, recsys: recsys runs the stage-by-stage case study), "
                 "or your own as package.module:function or path/file.py:function.")


def tune(
    workload: Annotated[str, typer.Argument(help=WORKLOAD_HELP)],
    budget_minutes: Annotated[float | None, typer.Option(help="Stop starting new trials after this long "
                                                              "(30 by default; the recsys stages all run).")] = None,
    steps: Annotated[int | None, typer.Option(help="Baseline-sized steps each trial trains (same samples for all; "
                                                   f"{SEARCH_STEPS} by default, {STAGE_STEPS} for the recsys "
                                                   "stages).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds before a trial is stopped and recorded as a timeout "
                                                       f"({TIMEOUT_S:g} by default).")] = None,
    results: Annotated[Path | None, typer.Option(help="Trial results, one JSON line each.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on from the results file, skipping done trials.")]
    = False,
    ddp: Annotated[int, typer.Option(help="Also try DDP over this many processes, 2 or more (torchrun; gloo on CPU); "
                                          "for recsys, the communication stage's process count (2 by default).")]
    = 0,
    task: Annotated[str, typer.Option(help="train, or infer (quantization, pruning, serving batch size).")]
    = "train",
    device: Annotated[str, typer.Option(help="auto (CUDA when there is a GPU), cuda or cpu.")] = "auto",
    price_per_hour: Annotated[float | None, typer.Option(help="USD per hour of this machine, for the machine time "
                                                              "a million samples cost (and samples per dollar in "
                                                              "recsys; default: the catalog's price on a GPU it "
                                                              "prices, spread over 3 years).")] = None,
    price_per_kwh: Annotated[float | None, typer.Option(help="USD per kWh, for the energy a million samples cost "
                                                             "(from NVML's energy counter, on a GPU).")] = None,
    search: Annotated[bool, typer.Option("--search", help="For recsys: the generic search instead of the stages.")]
    = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a page with a speedup chart.")] = None,
    launcher: Annotated[str | None, typer.Option(help="Run nothing: print the commands that run the chosen "
                                                      "configuration (the --results file's best, --knobs, or the "
                                                      "baseline) on a cluster, with torchrun on each node or as a "
                                                      "Slurm batch script: torchrun or slurm.")] = None,
    nodes: Annotated[int | None, typer.Option(help="With --launcher: how many nodes (2 by default).")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="With --launcher: GPUs per node, one process each "
                                                           "(8 by default).")] = None,
    knobs: Annotated[str | None, typer.Option(help="With --launcher: the configuration to run, as the JSON the "
                                                   "tuner prints, e.g. '{\"amp\": \"bf16\"}'.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Measure each optimization on the workload, reject any that changes the loss, print the best safe one.

    Examples:
      gpufly tune cnn --budget-minutes 10 --html tune.html
      gpufly tune train.py:build --results results.jsonl --resume
      gpufly tune cnn --price-per-kwh 0.15 --price-per-hour 2.5 --json
      gpufly tune cnn --results results.jsonl --launcher slurm --nodes 4 --gpus-per-node 8
    """
    if launcher is not None:
        _print_launch(workload, launcher, Launch(nodes, gpus_per_node, knobs, results, steps, device),
                      _run_only_options(task, ddp, html, resume, budget_minutes, search, timeout,
                                        price_per_hour, price_per_kwh), as_json)
        return
    _check_run_only_launch(nodes, gpus_per_node, knobs)
    stages_run = workload == "recsys" and task == "train" and not search
    _check_mode(workload, stages_run, budget_minutes, steps, search)
    steps = steps if steps is not None else STAGE_STEPS if stages_run else SEARCH_STEPS
    budget_minutes = 30.0 if budget_minutes is None else budget_minutes
    timeout = TIMEOUT_S if timeout is None else timeout
    _check_options(task, budget_minutes, steps, timeout, ddp, device)
    from gpufly.tune.energy import check_price, energy_line, summary

    check_price("--price-per-hour", price_per_hour, "2.5")
    check_price("--price-per-kwh", price_per_kwh, "0.15", free=True)
    suffix = "-infer" if task == "infer" else ""
    results = results or Path(f"gpufly-tune-{workload.replace('/', '_').replace(':', '_')}{suffix}.jsonl")
    _check_paths(results, resume, html)
    torch = _torch(device)
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    from gpufly.tune import ResultsLog, Search, SubprocessRunner, code_for

    price_note = None
    with _stoppable(results):
        if stages_run:
            from gpufly.tune.stages import WORKLOAD, stages

            workload, plan, budget_s = WORKLOAD, stages(ddp or 2, cuda), None
            identity = _identity(torch, cuda, workload, task, steps, mode="stages", ddp=ddp or 2)
        else:
            plan, budget_s = _search_plan(workload, cuda, ddp, task, steps, timeout), budget_minutes * 60
            identity = _identity(torch, cuda, workload, task, steps)
        price_per_hour, price_note = _price(torch, cuda, price_per_hour)
        run = Search(plan, ResultsLog(results), SubprocessRunner(workload, steps, "cuda" if cuda else "cpu", timeout),
                     identity=identity, budget_s=budget_s)
        best = _run_with_progress(run, "stages" if stages_run else "trials", quiet=as_json)
    decision = run.decision()
    rows = [r.to_dict(price_per_hour, price_per_kwh) for r in run.results]
    comparisons: list[Any] = []
    bandwidth: dict[str, Any] | None = None
    if stages_run:
        rows, comparisons, bandwidth = _case_study_rows(rows, plan, torch, cuda)
    best_row = None if best is None else {"configuration": best.name, "knobs": best.knobs, "speedup": best.speedup,
                                          "speedup_interval": _interval(best), "rounds": best.rounds,
                                          "code": code_for(best.knobs)}
    evidence = _evidence(run.baseline, steps)
    conditions = _conditions(torch, identity["device"], steps, run.baseline)
    energy = summary(rows, price_per_kwh, price_per_hour, None if best is None else best.name)
    if html is not None:
        from gpufly.tune.render import write_html

        write_html(html, workload, rows, best_row, str(results), f"No winner ({decision.verdict}): {decision.reason}",
                   {**conditions, **evidence, "energy": energy})
    if as_json:
        mode = ({"mode": "stages", "reference": [c.to_dict() for c in comparisons], "bandwidth": bandwidth}
                if stages_run else {})
        print_json({"workload": workload, **mode, "results_file": str(results), **conditions,
                    "decision": decision.to_dict(), **evidence, "energy": energy, "trials": rows,
                    "best": best_row, "price_per_hour": price_per_hour, "price": price_note,
                    "price_per_kwh": price_per_kwh, "html": None if html is None else str(html)})
    else:
        from gpufly.tune.render import conditions_text

        if stages_run:
            _render_stages(rows, price_note, bandwidth)
            for comparison in comparisons:
                console().print(comparison.text(), markup=False)
        else:
            _render(rows)
            if price_note:
                console().print(f"price: {price_note}; per kWh: "
                                f"{'not given' if price_per_kwh is None else f'${price_per_kwh:g}'}", markup=False)
        console().print(f"measured on: {conditions_text(conditions)}", markup=False)
        console().print(energy_line(energy), markup=False)
        _conclude(decision, best, evidence, results, stages_run)
        if html is not None:
            console().print(f"speedup chart: {html}", markup=False)
    if decision.verdict == "failed":  # the baseline did not run: a script must not read this as a tuned result
        raise typer.Exit(1)


@contextlib.contextmanager
def _stoppable(results: Path) -> Iterator[None]:
    """SIGTERM and Ctrl-C are a normal stop: the trial running is killed with all its processes and recorded
    nowhere, so ``--resume`` runs it again and never twice; the exit code is the shell's for the signal."""
    from gpufly.tune.trial import Stopped, stop_signals

    try:
        with stop_signals():
            yield
    except Stopped as stop:
        kept = (f"the trials done are kept in {results}; add --resume to go on from them" if results.exists()
                else "no trial had finished; run it again")
        raise GpuflyError(f"stopped by {stop}: the trial running, if any, was stopped and not recorded", kept,
                          exit_code=stop.exit_code) from None


def _check_mode(workload: str, stages_run: bool, budget_minutes: float | None, steps: int | None,
                search: bool) -> None:
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


def _check_options(task: str, budget_minutes: float, steps: int, timeout: float, ddp: int, device: str) -> None:
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
    if ddp and task == "infer":  # said before the workload is built, which can take minutes
        raise GpuflyError(INFER_ONE_PROCESS, "tune inference on one process")


def _check_paths(results: Path, resume: bool, html: Path | None) -> None:
    """Bad output paths are refused before the first trial, so no measurement is lost to them."""
    check_writable("--results", results, example="trials.jsonl")
    if results.exists() and not resume:
        raise GpuflyError(f"{results} already holds trial results",
                          "add --resume to go on from them, or --results NEW.jsonl to start afresh")
    if html is not None:
        check_writable("--html", html, example="tune.html")


def _torch(device: str) -> Any:
    """Torch, imported here for the device check and the run's identity (the trials import it themselves)."""
    torch = require("torch", "gpufly tune")
    if device == "cuda" and not torch.cuda.is_available():
        raise GpuflyError("--device cuda, but torch sees no CUDA GPU", "leave --device at auto, or use --device cpu")
    return torch


def _search_plan(workload: str, cuda: bool, ddp: int, task: str, steps: int, timeout: float) -> Any:
    """The generic search over the knobs that apply to this workload, device and task; the workload is built in a
    child process within the trials' --timeout, so a loading error is one line before any trial starts."""
    from gpufly.tune import GreedyPlan
    from gpufly.tune.workload import search_space

    space = search_space(workload, cuda, task, ddp, timeout)
    if task == "infer" and space.batch_sampler_dataset:
        raise GpuflyError(INFER_ONE_PROCESS, "tune inference on one process")
    return GreedyPlan(space.knobs, fixed={"task": "infer"} if task == "infer" else {}, steps=steps)


def _identity(torch: Any, cuda: bool, workload: str, task: str, steps: int, **extra: Any) -> dict[str, Any]:
    from gpufly.tune import run_identity

    device = torch.cuda.get_device_name(0) if cuda else "cpu"
    return run_identity(workload, task, steps, device, str(torch.__version__), **extra)


def _conditions(torch: Any, device: str, steps: int, baseline: Any) -> dict[str, Any]:
    """What the figures were measured on: the device, the versions of torch, Python and gpufly, the steps each
    trial trained and the baseline's batch (None when the baseline reported none)."""
    import platform

    import gpufly

    return {"device": device, "versions": {"torch": str(torch.__version__), "python": platform.python_version(),
                                           "gpufly": gpufly.__version__},
            "steps": steps, "batch_size": None if baseline is None else baseline.batch_size}


def _price(torch: Any, cuda: bool, given: float | None) -> tuple[float | None, str | None]:
    """The machine's price per hour and where it came from: given, or on a GPU the catalog prices, its own."""
    if given is not None:
        return given, f"${given:g}/h (given)"
    if cuda:
        from gpufly.tune.stages import catalog_price_per_hour

        properties = torch.cuda.get_device_properties(0)
        found = catalog_price_per_hour(properties.name, properties.total_memory)
        if found is not None:
            return found
    return None, None


def _case_study_rows(rows: list[dict[str, Any]], plan: Any, torch: Any,
                     cuda: bool) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    """The stages' rows with each one's share of this machine's memory-bandwidth limit (its copy bandwidth,
    measured now, over the bytes a sample moves), the safe stages' A/B comparisons with the hand-written loop, and
    the bandwidth with its interval."""
    from gpufly.tune.stages import with_limit

    limit = measure_copy_bandwidth(torch, "cuda" if cuda else "cpu")
    return with_limit(rows, limit), list(getattr(plan, "comparisons", [])), limit.to_dict()


COPY_BYTES = 256 * 2**20
COPY_REPEATS = 10


def measure_copy_bandwidth(torch: Any, device: str) -> Any:
    """The memory bandwidth behind the limit column: the median of ``COPY_REPEATS`` copies of ``COPY_BYTES`` (read
    plus write) with gpufly bench's memory.copy kernel, as ``gpufly.bench.copy_bandwidth`` measures it, with the
    interval of that median (order statistics: the timing harness's)."""
    from gpufly.bench import measure
    from gpufly.bench.kernels import copy
    from gpufly.tune.stages import Limit

    where = torch.device(device)
    kernel = copy(torch, where, COPY_BYTES)
    sync = (lambda: torch.cuda.synchronize(where)) if where.type == "cuda" else None
    timing = measure(kernel.fn, warmup=2, repeats=COPY_REPEATS, sync=sync)
    interval = None
    if timing.ci_low_s and timing.ci_high_s:
        interval = (kernel.work / timing.ci_high_s, kernel.work / timing.ci_low_s)
    return Limit(kernel.work / timing.median_s, bandwidth_interval=interval, interval_level=timing.ci_level,
                 copies=timing.repeats)


def _render_stages(rows: list[dict[str, Any]], price_note: str | None,
                   bandwidth: dict[str, Any] | None = None) -> None:
    from rich.table import Table

    from gpufly.tune.render import PAIRED_NOTE

    table = Table(title="gpufly tune recsys: the case study, stage by stage (cumulative: each stage builds on the last "
                        "one kept; a stage unsafe, failed or slower than the one it built on beyond the noise is "
                        "shown, marked \"not built on\", and not kept)")
    priced = _priced_columns(rows)
    unit = _unit(rows)
    columns = ["stage", "configuration", f"{unit}/s", f"median-step {unit}/s", SPEEDUP_TITLE, "held-out loss",
               "limit [95%]", *priced, "verdict"]
    if price_note:
        columns.append("samples/$")
    for column in columns:
        table.add_column(column, justify="left" if column in ("stage", "configuration", "verdict") else "right")
    for r in rows:
        cells = [r["stage"], r["configuration"], _rate(r["throughput"]), _rate(r["median_step_throughput"]),
                 _speedup_and_pair(r), "—" if r["held_out_loss"] is None else f"{r['held_out_loss']:.4f}",
                 _limit(r),
                 *(_money_or_energy(r, key) for key in priced.values()), _verdict(r)]
        if price_note:
            cells.append("—" if r["samples_per_dollar"] is None else f"{r['samples_per_dollar']:,.0f}")
        table.add_row(*cells)
    out = console()
    out.print(table)
    out.print(f"price: {price_note}" if price_note else
              "samples per dollar: give --price-per-hour (on a GPU the catalog prices, its price is taken)",
              markup=False)
    out.print(_("speedup: {note}").format(note=_(PAIRED_NOTE)), markup=False)
    shared = next((r for r in rows if r.get("bytes_per_sample")), None)
    if shared is not None:
        out.print(_("limit: the share of this machine's memory-bandwidth limit: the copy bandwidth measured now, "
                    "{bandwidth}, over about {kb:.0f} KB a sample moves; the range is the bandwidth's interval "
                    "alone").format(bandwidth=bandwidth_text(bandwidth), kb=shared["bytes_per_sample"] / 1e3),
                  markup=False)


def bandwidth_text(bandwidth: dict[str, Any] | None) -> str:
    """The copy bandwidth with its interval: ``9.87 GB/s [9.51-10.12] (median of 10 copies, 97.9% interval)``.

    >>> bandwidth_text({"bytes_per_s": 9.87e9, "interval": [9.51e9, 1.012e10], "level": 0.9785, "copies": 10})
    '9.87 GB/s [9.51-10.12] (median of 10 copies, 97.9% interval)'
    """
    if not bandwidth:
        return _("not measured")
    text = f"{bandwidth['bytes_per_s'] / 1e9:.2f} GB/s"
    interval = bandwidth.get("interval")
    if not interval:
        return text + _(" (no interval)")
    return text + _(" [{low:.2f}-{high:.2f}] (median of {copies} copies, {level:.1%} interval)").format(
        low=interval[0] / 1e9, high=interval[1] / 1e9, copies=bandwidth.get("copies"),
        level=bandwidth.get("level") or 0.0)


def _limit(row: dict[str, Any]) -> str:
    """The share of the limit, with its range over the bandwidth's interval."""
    share = row.get("limit_share")
    if share is None:
        return "—"
    interval = row.get("limit_share_interval")
    return f"{share:.1%}" + ("" if not interval else f"\n[{100 * interval[0]:.1f}-{100 * interval[1]:.1f}]")


def _unit(rows: list[dict[str, Any]]) -> str:
    """What the workload counts (samples, tokens): the unit its rows' throughputs are in."""
    return next((str(r["unit"]) for r in rows if r.get("unit") and r.get("throughput") is not None), "samples")


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _speedup(row: dict[str, Any]) -> str:
    """The speedup with its 95% interval, and how many A/B rounds it rests on once confirmed."""
    if row["speedup"] is None:
        return "—"
    if row["role"] != "trial" or row["speedup_interval"] is None:
        return f"{row['speedup']:.2f}x"
    low, high = row["speedup_interval"]
    count = max(row["rounds"], row.get("pairs") or 0)
    rounds = f" ({count} rounds)" if count > 1 else ""
    return f"{row['speedup']:.2f}x [{low:.2f}-{high:.2f}]{rounds}"


SPEEDUP_TITLE = "speedup [95%] = trial / baseline beside it"
"""The speedup column: the speedup with its interval, and under it the two throughputs it is the ratio of."""


def _speedup_and_pair(row: dict[str, Any]) -> str:
    """The speedup with its interval, and on a second line the figures it is the ratio of (``= 30 / 32``)."""
    from gpufly.tune.render import paired_text

    paired = paired_text(row)
    return _speedup(row) + ("" if paired == "—" else f"\n= {paired}")


def _interval(result: Any) -> list[float] | None:
    if result.speedup_low is None or result.speedup_high is None:
        return None
    return [result.speedup_low, result.speedup_high]


def _evidence(baseline: Any, steps: int) -> dict[str, Any]:
    """What the verdicts rest on: the baseline's runs and their spread, and the two seeds' accuracy gap."""
    if baseline is None:
        return {"noise": None, "accuracy": None}
    from gpufly.tune.verdict import DRIFT_TOLERANCE, METRIC_TOLERANCE, judgeable

    noise = {"baseline_runs": len(baseline.throughputs), "noise_floor": baseline.noise_floor,
             "throughputs": baseline.throughputs, "unit": baseline.unit,
             "range": [min(baseline.throughputs), max(baseline.throughputs)] if baseline.throughputs else None,
             "shown_run": baseline.shown_run, "own_seed_runs": len(baseline.runs)}
    accuracy = {"steps": steps, "seed_loss_drift": baseline.seed_loss_drift,
                "seed_metric_drift": baseline.seed_metric_drift,
                "loss_judged": baseline.eval_loss is not None and judgeable(baseline.seed_loss_drift, DRIFT_TOLERANCE),
                "metric_judged": baseline.eval_metric is not None and judgeable(baseline.seed_metric_drift,
                                                                                METRIC_TOLERANCE)}
    return {"noise": noise, "accuracy": accuracy}


def _conclude(decision: Any, best: Any, evidence: dict[str, Any], results: Path, stages_run: bool) -> None:
    """The evidence, then the verdict: the winner with its interval, the baseline kept, or why there is none."""
    from gpufly.tune.render import accuracy_text, noise_text
    out = console()
    noise, accuracy = evidence["noise"], evidence["accuracy"]
    spread = noise_text(noise)
    if noise is not None and spread is not None:
        shown = ""
        if noise.get("shown_run") and (noise.get("own_seed_runs") or 0) > 1:
            shown = _("; its row shows one run's figures: its median run, run {run} of its {count} runs with seed "
                      "0").format(run=noise["shown_run"], count=noise["own_seed_runs"])
            other = (noise.get("baseline_runs") or 0) - noise["own_seed_runs"]
            if other > 0:
                shown += _(" (the other {other} with seed 1, the seed-drift check)").format(other=other)
        out.print(f"noise: {spread}{shown}", markup=False)
    if accuracy is not None:
        out.print(f"accuracy: {accuracy_text(accuracy)}", markup=False)
    what = "stage" if stages_run else "configuration"
    if decision.verdict == "failed":
        out.print("the baseline itself failed; nothing to compare against (see the error above)", markup=False)
    elif decision.verdict == "faster":
        low, high = _interval(best) or [best.speedup, best.speedup]
        out.print(f"best safe {what}: {best.name}, {best.speedup:.2f}x the baseline (95% interval {low:.2f}-"
                  f"{high:.2f}x over {best.rounds} A/B rounds)", markup=False)
        if decision.tie_break is not None:
            out.print(f"  why this one: {decision.tie_break}", markup=False)
    elif decision.verdict == "no gain":
        out.print(f"no {what} was confirmed faster than the baseline: keep it as it is ({decision.reason})",
                  markup=False)
    else:
        out.print(f"no winner ({decision.verdict}): {decision.reason}", markup=False)
    if decision.verdict == "faster":
        from gpufly.tune import code_for

        for line in code_for(best.knobs):
            out.print(f"  {line}", markup=False)
        out.print(f"as JSON: {json.dumps(best.knobs)}", markup=False)
        if not stages_run:
            out.print(f"or in your script: gpufly.apply('{results}', model, optimizer, loader)", markup=False)
    out.print(f"results: {results} (--resume goes on from it)", markup=False)


def _verdict(row: dict[str, Any]) -> str:
    """safe; unjudged (accuracy not judged, with why); unsafe with the reason; or the failure; and for a stage the
    stages after it do not build on, why (``gpufly.tune.render.verdict_text``, as the HTML page says it)."""
    from gpufly.tune.render import verdict_text

    return verdict_text(row)


def _run_with_progress(search: Any, what: str, quiet: bool) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console(), disable=quiet, transient=True) as progress:
        task = progress.add_task(what, total=search.plan.expected_trials())
        search.on_result = lambda r: progress.update(task, advance=1, description=f"{what} (last: {r.name})")
        return search.run()


def _render(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from gpufly.cli.render import gib
    from gpufly.tune.render import PAIRED_NOTE

    table = Table(title="gpufly tune")
    priced = _priced_columns(rows)
    for column in ("configuration", "throughput", f"median-step {_unit(rows)}/s", SPEEDUP_TITLE, "peak memory",
                   "loss drift", *priced, "verdict"):
        table.add_column(column, justify="left" if column in ("configuration", "verdict") else "right")
    for row in rows:
        unit = f" {row['unit']}/s"
        table.add_row(row["configuration"],
                      "—" if row["throughput"] is None else f"{row['throughput']:,.0f}{unit}",
                      _rate(row["median_step_throughput"]), _speedup_and_pair(row),
                      "—" if row["peak_memory_bytes"] is None else gib(row["peak_memory_bytes"]),
                      "—" if row["loss_drift"] is None else f"{100 * row['loss_drift']:.2f}%",
                      *(_money_or_energy(row, key) for key in priced.values()), _verdict(row))
    console().print(table)
    console().print(_("speedup: {note}").format(note=_(PAIRED_NOTE)), markup=False)


def _priced_columns(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The energy and cost columns some row has a figure for: column title -> row key."""
    columns = {"J/unit": "joules_per_unit", "energy $/M": "energy_cost_per_million",
               "time $/M": "time_cost_per_million"}
    return {title: key for title, key in columns.items() if any(row.get(key) is not None for row in rows)}


def _money_or_energy(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "—"
    return f"{value:.4g}" if key == "joules_per_unit" else f"${value:.4g}"


@dataclass(frozen=True)
class Launch:
    """What ``--launcher`` was given: the cluster's shape and where the configuration comes from."""

    nodes: int | None
    gpus_per_node: int | None
    knobs: str | None
    results: Path | None
    steps: int | None
    device: str


def _run_only_options(task: str, ddp: int, html: Path | None, resume: bool, budget_minutes: float | None,
                      search: bool, timeout: float | None = None, price_per_hour: float | None = None,
                      price_per_kwh: float | None = None) -> list[str]:
    """The options that only a run reads, as given: ``--launcher`` runs nothing, so they are refused there."""
    given = {"--task infer": task == "infer", "--ddp": bool(ddp), "--html": html is not None, "--resume": resume,
             "--budget-minutes": budget_minutes is not None, "--search": search, "--timeout": timeout is not None,
             "--price-per-hour": price_per_hour is not None, "--price-per-kwh": price_per_kwh is not None}
    return [option for option, used in given.items() if used]


def _check_run_only_launch(nodes: int | None, gpus_per_node: int | None, knobs: str | None) -> None:
    """--nodes, --gpus-per-node and --knobs shape the printed launch; a run would silently drop them."""
    for option, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node), ("--knobs", knobs)):
        if value is not None:
            raise GpuflyError(f"{option} goes with --launcher torchrun|slurm, which prints a cluster's commands",
                              f"add --launcher slurm (or torchrun), or leave {option} out")


def _print_launch(workload: str, launcher: str, given: Launch, run_only: list[str], as_json: bool) -> None:
    """The commands that run the configuration on a cluster, printed and not run: torchrun per node, or an sbatch
    script. Each node needs gpufly and the workload (a file at the same path) installed."""
    from gpufly.tune.launch import LAUNCHERS, ClusterPlan, Layout, job_name, request

    if launcher not in LAUNCHERS:
        raise GpuflyError(f"--launcher is torchrun or slurm, not {launcher!r}", "gpufly tune cnn --launcher slurm")
    if run_only:
        raise GpuflyError(f"--launcher prints commands and runs nothing, so {', '.join(run_only)} would be ignored",
                          f"leave {', '.join(run_only)} out, or leave --launcher out to tune here")
    nodes = 2 if given.nodes is None else given.nodes
    gpus = 8 if given.gpus_per_node is None else given.gpus_per_node
    for option, value in (("--nodes", nodes), ("--gpus-per-node", gpus)):
        if value < 1:
            raise GpuflyError(f"{option} must be 1 or more, not {value}", "for example --nodes 2 --gpus-per-node 8")
    if given.device not in ("auto", "cuda", "cpu"):
        raise GpuflyError(f"--device is auto, cuda or cpu, not {given.device!r}", "leave it at auto")
    name, knobs, source, steps = _configuration(workload, given)
    if steps < 4:
        raise GpuflyError(f"--steps must be at least 4, not {steps}", "for example --steps 40")
    layout = Layout(nodes, gpus)
    device = None if given.device == "auto" else given.device
    plan = ClusterPlan(launcher, layout, request(workload, knobs, steps, layout.world_size, device),
                       job_name=job_name(workload))
    notes = [f"the global batch must split over {layout.world_size} processes (the workload's batch size, or the "
             "batch_size knob, a multiple of it)",
             "every node needs gpufly, torch and the workload (a file at the same path) installed",
             "rank 0 prints the run's JSON line: throughput, losses, peak memory and energy per sample"]
    if as_json:
        print_json({"workload": workload, "configuration": name, "source": source, **plan.to_dict(),
                    "notes": notes})
        return
    _print_plan(plan, name, source, notes)


def _configuration(workload: str, given: Launch) -> tuple[str, dict[str, Any], str, int]:
    """(name, knobs, where they came from, steps): --knobs, else the --results file's best safe trial, else the
    baseline (the workload as it is)."""
    steps = given.steps
    if given.knobs is not None and given.results is not None:
        raise GpuflyError("--knobs and --results both name a configuration", "give one of them")
    if given.knobs is not None:
        try:
            knobs = json.loads(given.knobs)
        except ValueError as exc:
            raise GpuflyError(f"--knobs is not JSON: {exc}", '--knobs \'{"amp": "bf16"}\'') from None
        if not isinstance(knobs, dict):
            raise GpuflyError(f"--knobs must be a JSON object of knob names and values, not {given.knobs}",
                              '--knobs \'{"amp": "bf16"}\'')
        from gpufly.errors import unknown_choice
        from gpufly.tune.knobs import KNOBS

        names = [knob.name for knob in KNOBS]
        for name in knobs:  # a misspelt knob would reach every node of the cluster before anything said so
            if name not in names:
                raise unknown_choice("knob", str(name), names)
        return "requested", knobs, "--knobs", steps or SEARCH_STEPS
    if given.results is not None:
        from gpufly.tune import ResultsLog

        log = ResultsLog(given.results)
        if not given.results.is_file():
            raise GpuflyError(f"no tune results at {given.results}", "tune first, or give --knobs JSON")
        identity = log.identity() or {}
        if identity.get("workload") not in (None, workload):
            raise GpuflyError(f"{given.results} holds trials of {identity['workload']}, not {workload}",
                              f"gpufly tune {identity['workload']} --results {given.results} --launcher ...")
        best = log.best_safe_or_error()
        return best.name, best.knobs, str(given.results), steps or int(identity.get("steps") or SEARCH_STEPS)
    return "baseline", {}, "baseline", steps or SEARCH_STEPS


def _print_plan(plan: Any, name: str, source: str, notes: list[str]) -> None:
    """The commands as text, unwrapped (a wrapped line would not paste)."""
    layout = plan.layout
    origin = {"baseline": "the baseline, the workload as it is", "--knobs": "the configuration --knobs gave"}.get(
        source, f"{name}, the best safe configuration in {source}")
    head = (f"gpufly tune {plan.request['workload']}: {origin} (knobs {json.dumps(plan.request['knobs'])}), on "
            f"{layout.nodes} nodes x {layout.processes_per_node} GPUs = {layout.world_size} processes, with "
            f"{plan.launcher}. Nothing was run.")
    lines = [head]
    if plan.launcher == "slurm":
        lines += [f"Save this as {plan.job_name}.sbatch and submit it with: sbatch {plan.job_name}.sbatch", "",
                  plan.sbatch_script().rstrip("\n"), ""]
    else:
        lines.append(f"On every node, with HEAD_NODE_ADDR set to the first node's address (it serves the c10d "
                     f"rendezvous on port {plan.port}); the command is the same on each, c10d numbers the nodes:")
        shell = plan.torchrun_command()["shell"]
        shown = range(layout.nodes) if layout.nodes <= NODES_LISTED else ()
        for node in shown:
            lines += [f"# node {node}{' (head)' if node == 0 else ''}", shell]
        if not shown:
            lines += [f"# each of the {layout.nodes} nodes, the first of them the head", shell]
    lines += [f"note: {note}" for note in notes]
    typer.echo("\n".join(lines))
