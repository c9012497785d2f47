"""The tuner's search: trials in subprocesses, results written after each one, a greedy combination.

A trial is a configuration (knob name to value). Each runs in its own Python process with a
timeout (``gpufly.tune.worker``), so an out-of-memory error, a compile failure or a hang becomes a
recorded result and the search goes on. Results are appended to a JSONL file as each trial ends,
so Ctrl-C keeps them and ``resume`` skips the trials already done.

Search: the baseline; then each knob alone from the baseline; the ones that helped and stayed safe
are combined greedily, fastest first, each kept only if the combination measures faster. Every trial
trains on the same samples in the same order (a larger batch takes fewer steps), then measures its
loss on the same fixed probe batches; a trial whose probe loss drifts from the baseline's beyond
the tolerance is unsafe and never chosen, and so is one whose evaluation metric (when the workload
has an ``evaluate`` function) moves the bad way by more than ``METRIC_TOLERANCE``.

The results file starts with a header line that records the run's identity (workload, task, steps,
device, torch version); ``--resume`` refuses a file whose identity differs, since its baseline
would not be this run's.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.tune.worker import WEIGHT_ONLY, WEIGHT_ONLY_ARGS

DRIFT_TOLERANCE = 0.02
"""Largest relative gap between a trial's probe loss and the baseline's, after the same training samples."""
METRIC_TOLERANCE = 0.01
"""Largest relative move of the evaluation metric the bad way (down for an accuracy, up for a loss)."""
MIN_GAIN = 1.03
"""A knob must be at least this much faster than the baseline to enter the combination."""


@dataclass(frozen=True)
class Trial:
    name: str
    knobs: dict[str, Any]

    @property
    def key(self) -> str:
        """Identifies a configuration in the results file, whatever it is called."""
        return json.dumps(self.knobs, sort_keys=True)


@dataclass
class TrialResult:
    name: str
    knobs: dict[str, Any]
    status: str
    """ok, unsafe, oom, failed or timeout."""
    throughput: float | None = None
    """The median over the measured steps of each step's rate."""
    unit: str = "samples"
    peak_memory_bytes: int | None = None
    data_wait_share: float | None = None
    losses: list[float] = field(default_factory=list)
    """The training loss per step (for the curve)."""
    eval_loss: float | None = None
    """Loss on fixed probe batches after training on the same samples as every other trial."""
    loss_drift: float | None = None
    error: str | None = None
    seconds: float = 0.0
    speedup: float | None = None
    batch_size: int | None = None
    """The trial's global batch size, as the worker ran it."""
    device_memory_bytes: int | None = None
    """The GPU's total memory (None on a CPU): with the peak, what tells how large a batch fits."""
    mean_throughput: float | None = None
    """Units over the summed time of the measured steps: what the loop gave, outlier steps included."""
    eval_metric: float | None = None
    """The workload's ``evaluate(model)`` after training; None when it has none."""
    higher_is_better: bool = True
    metric_drop: float | None = None
    """Relative move of the metric the bad way from the baseline's (positive: worse)."""
    world_size: int | None = None
    """How many processes the trial ran on, as the worker saw it (2 for ddp=2)."""

    @property
    def usable(self) -> bool:
        return self.status == "ok" and self.throughput is not None


Runner = Callable[[str, Trial, float], TrialResult]


SNIPPETS: dict[str, str] = {
    "num_workers": "DataLoader(..., num_workers={v}, persistent_workers=True)",
    "pin_memory": "DataLoader(..., pin_memory=True); batch.to(device, non_blocking=True)",
    "prefetch_factor": "DataLoader(..., prefetch_factor={v})",
    "batch_size": "DataLoader(..., batch_size={v})",
    "amp": "with torch.autocast(device.type, dtype=torch.{dtype}):  # around the forward pass and the loss",
    "tf32": "torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True",
    "cudnn_benchmark": "torch.backends.cudnn.benchmark = True",
    "channels_last": "model = model.to(memory_format=torch.channels_last)",
    "compile": "model = torch.compile(model, mode='{v}')",
    "optimizer_impl": "optimizer = YourOptimizer(params, ..., {v}=True)  # Adam, AdamW, SGD, Adagrad",
    "ddp": "torchrun --nproc-per-node={v} train.py, with model = DistributedDataParallel(model)",
    "ddp_hook": "ddp_model.register_comm_hook(None, default_hooks.{v}_compress_hook)",
    "prune": "for m in linear_and_conv_layers: prune.l1_unstructured(m, 'weight', amount={v}); "
             "prune.remove(m, 'weight')",
    "quantize": "model = torch.ao.quantization.quantize_dynamic(model, {{torch.nn.Linear}}, dtype=torch.qint8)",
}


def code_for(knobs: dict[str, Any]) -> list[str]:
    """The best configuration as lines to paste into the training script; workload options as they are named.

    >>> for line in code_for({"amp": "bf16", "num_workers": 2, "sparse": True}):
    ...     print(line)
    with torch.autocast(device.type, dtype=torch.bfloat16):  # around the forward pass and the loss
    DataLoader(..., num_workers=2, persistent_workers=True)
    workload option: sparse=True
    """
    lines = []
    for name, value in knobs.items():
        if name == "task":
            continue
        template = SNIPPETS.get(name)
        if template is None:
            lines.append(f"workload option: {name}={value}")
            continue
        dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(str(value), str(value))
        if name == "compile" and value is True:
            value = "default"
        line = template.format(v=value, dtype=dtype)
        if name == "quantize" and value in WEIGHT_ONLY:
            args = ", ".join(f"{k}={v!r}" for k, v in WEIGHT_ONLY_ARGS.get(value, {}).items())
            line = f"torchao.quantization.quantize_(model, torchao.quantization.{WEIGHT_ONLY[value]}({args}))"
            if value == "int4_weight_only":
                line = "model = model.to(torch.bfloat16); " + line
        if name == "amp" and value == "fp16":
            line += "; scaler = torch.amp.GradScaler('cuda') for the backward and step"
        lines.append(line)
    return lines


def _has_conv(workload: Any) -> bool:
    """channels_last only helps convolutions."""
    model = getattr(workload, "model", None)
    return model is not None and any(type(m).__name__.startswith("Conv") for m in model.modules())


def _has_torchao() -> bool:
    """Weight-only quantization is offered only where torchao is installed (found without importing it)."""
    import importlib.util

    return importlib.util.find_spec("torchao") is not None


def default_knobs(workload: Any, cuda: bool, ddp: int, task: str = "train") -> dict[str, list[Any]]:
    """What to try: the generic knobs that apply on this device, then the workload's own options."""
    knobs: dict[str, list[Any]] = {"num_workers": [2], "batch_size": [workload.batch_size * 4],
                                   "amp": ["bf16", "fp16"] if cuda else ["bf16"]}
    if cuda:  # on a CPU, compiling takes tens of seconds a trial; reduce-overhead is CUDA graphs
        knobs["compile"] = ["default", "reduce-overhead"]
    if task == "infer":
        knobs["prune"] = [0.3]
        quantize = [] if cuda else ["int8_dynamic"]  # torch's dynamic int8 kernels are CPU-only
        if _has_torchao():
            quantize += list(WEIGHT_ONLY) if cuda else ["int8_weight_only"]  # int4/fp8 have GPU kernels only
        if quantize:
            knobs["quantize"] = quantize
        if _has_conv(workload):
            knobs["channels_last"] = [True]
        return knobs
    if ddp > 1:  # the hooks and bucket sizes are tried together with ddp=N (see NEEDS_DDP)
        knobs |= {"ddp": [ddp], "ddp_hook": ["fp16", "powersgd", *(["bf16"] if cuda else [])],
                  "bucket_mb": [5, 100]}
    knobs["optimizer_impl"] = ["foreach", "fused"]
    if cuda:
        knobs |= {"pin_memory": [True], "tf32": [True], "cudnn_benchmark": [True]}
    if _has_conv(workload):
        knobs["channels_last"] = [True]
    for option in workload.options:
        knobs[option.name] = list(option.values[1:])
    return knobs



NEEDS_DDP = ("ddp_hook", "bucket_mb")
"""Knobs that only mean something under DDP: the search tries each together with the ``ddp`` knob."""


def run_in_subprocess(workload: str, trial: Trial, timeout_s: float, steps: int = 30,
                      device: str | None = None) -> TrialResult:
    """Run one trial in a fresh interpreter; whatever happens there comes back as a TrialResult."""
    request = json.dumps({"workload": workload, "knobs": trial.knobs, "steps": steps, "device": device})
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUFLY_TUNE_REQUEST": request}
    command = [sys.executable, "-m", "gpufly.tune.worker"]
    processes = int(trial.knobs.get("ddp") or 1)
    if processes > 1:  # DDP: torchrun starts the processes (gloo on CPU, NCCL on GPUs)
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                   "-m", "gpufly.tune.worker"]
    try:
        done = subprocess.run(command, input=request, capture_output=True, text=True, timeout=timeout_s, env=env,
                              cwd=os.getcwd())
    except subprocess.TimeoutExpired:
        return TrialResult(trial.name, trial.knobs, "timeout", error=f"no result within {timeout_s:g} s",
                           seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        data = json.loads(lines[-1])
        return TrialResult(trial.name, trial.knobs, "ok", throughput=data["throughput"], unit=data["unit"],
                           peak_memory_bytes=data.get("peak_memory_bytes"),
                           data_wait_share=data.get("data_wait_share"), losses=data["losses"],
                           eval_loss=data["eval_loss"], seconds=seconds, batch_size=data.get("batch_size"),
                           device_memory_bytes=data.get("device_memory_bytes"),
                           mean_throughput=data.get("mean_throughput"), eval_metric=data.get("eval_metric"),
                           higher_is_better=bool(data.get("higher_is_better", True)),
                           world_size=data.get("world_size"))
    status = "oom" if "out of memory" in done.stderr.lower() else "failed"
    return TrialResult(trial.name, trial.knobs, status, error=_error_line(done.stderr)[:300], seconds=seconds)


def _error_line(stderr: str) -> str:
    """The exception a trial died of: under torchrun, the first rank's, not the launcher's banner."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^(\[rank\d+\]: )?[\w.]*(Error|Exception)\b", line)
              and "ChildFailedError" not in line]
    if errors:
        return re.sub(r"^\[rank\d+\]: ", "", errors[0])
    return lines[-1] if lines else "exited with no message"


MAX_BATCH_GROWTH = 16
"""The largest batch tried is at most this many times the baseline's (a trial takes as many fewer steps)."""


def fitting_batch(batch: int | None, peak_bytes: int | None, device_bytes: int | None,
                  headroom: float = 0.85, max_growth: float = MAX_BATCH_GROWTH) -> int | None:
    """The largest power-of-two multiple of the baseline batch that fits in the GPU, from the baseline's
    measured peak memory. All of the peak is taken to grow with the batch; the weights and optimizer
    state do not, so this errs towards batches that fit, and the trial confirms it (an OOM is recorded).

    >>> fitting_batch(32, 10 * 2**30, 141 * 2**30), fitting_batch(32, 60 * 2**30, 80 * 2**30)
    (256, None)
    """
    if not batch or not peak_bytes or not device_bytes:
        return None
    growth = min(headroom * device_bytes / peak_bytes, MAX_BATCH_GROWTH, max_growth)
    multiple = 1
    while multiple * 2 <= growth:
        multiple *= 2
    return batch * multiple if multiple >= 2 else None


def best_safe(results: Iterable[TrialResult]) -> TrialResult | None:
    """The fastest trial that ran and kept the loss; None when none did."""
    usable = [r for r in results if r.usable and r.speedup is not None]
    return max(usable, key=lambda r: r.speedup or 0.0) if usable else None


def loss_drift(mine: float | None, baseline: float | None) -> float | None:
    """Relative difference of the probe loss from the baseline's; inf for a non-finite loss.

    >>> round(loss_drift(0.52, 0.5), 6), loss_drift(float("nan"), 0.5), loss_drift(None, 0.5)
    (0.04, inf, None)
    """
    if mine is None or baseline is None:
        return None
    if not math.isfinite(mine) or not math.isfinite(baseline):
        return float("inf")
    return abs(mine - baseline) / max(abs(baseline), 1e-8)


def metric_drop(mine: float | None, baseline: float | None, higher_is_better: bool = True) -> float | None:
    """Relative move of the evaluation metric the bad way (positive: worse); inf for a non-finite metric.

    >>> round(metric_drop(0.88, 0.9), 4), metric_drop(0.5, 0.4, higher_is_better=False) > 0, metric_drop(None, 0.9)
    (0.0222, True, None)
    """
    if mine is None or baseline is None:
        return None
    if not math.isfinite(mine) or not math.isfinite(baseline):
        return float("inf")
    worse = baseline - mine if higher_is_better else mine - baseline
    return worse / max(abs(baseline), 1e-8)


def judge(result: TrialResult, baseline: TrialResult | None, tolerance: float = DRIFT_TOLERANCE,
          metric_tolerance: float = METRIC_TOLERANCE) -> TrialResult:
    """Set the speedup, drift, metric drop and verdict of a trial against the baseline (in place).

    Unsafe when the probe loss drifts beyond ``tolerance`` or the metric drops beyond ``metric_tolerance``.
    """
    if baseline is None:
        unjudgeable = [name for name, value in (("probe loss", result.eval_loss), ("metric", result.eval_metric))
                       if value is not None and not math.isfinite(value)]
        if result.usable and unjudgeable:
            result.status = "failed"
            result.error = (f"the baseline's {' and '.join(unjudgeable)} is not finite, so no trial can be judged "
                            "against it: the workload diverges as it stands")
            return result
        if result.usable:
            result.speedup, result.loss_drift = 1.0, 0.0
            result.metric_drop = None if result.eval_metric is None else 0.0
        return result
    if result.usable:
        result.loss_drift = loss_drift(result.eval_loss, baseline.eval_loss)
        result.metric_drop = metric_drop(result.eval_metric, baseline.eval_metric, baseline.higher_is_better)
        if (result.loss_drift is not None and result.loss_drift > tolerance) or (
                result.metric_drop is not None and result.metric_drop > metric_tolerance):
            result.status = "unsafe"
    if result.throughput and baseline.throughput:
        result.speedup = result.throughput / baseline.throughput
    return result


HEADER = "gpufly_tune_run"
"""The key of the results file's first line, which holds the run's identity instead of a trial."""


def run_identity(workload: str, task: str, steps: int, device: str, torch_version: str,
                 **extra: Any) -> dict[str, Any]:
    """What makes two runs' trials comparable: the same workload, task, steps, device and torch."""
    return {"workload": workload, "task": task, "steps": steps, "device": device, "torch": torch_version, **extra}


class ResultsLog:
    """Trial results as JSON lines, one appended (and flushed) per finished trial, after a header line with
    the run's identity. Read and write errors are one-line GpuflyErrors."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _lines(self) -> list[str]:
        try:
            return self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        except (OSError, UnicodeDecodeError) as exc:
            raise GpuflyError(f"cannot read the results file {self.path}: {getattr(exc, 'strerror', None) or exc}",
                              "give a readable .jsonl file, as `gpufly tune --results FILE` writes") from None

    def identity(self) -> dict[str, Any] | None:
        """The run identity in the header, or None for a file without one (written before gpufly recorded it)."""
        for line in self._lines()[:1]:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                return None
            if isinstance(data, dict) and isinstance(data.get(HEADER), dict):
                return data[HEADER]
        return None

    def start(self, identity: dict[str, Any]) -> None:
        """Before the first trial: write the header to a new file, or check that an existing file's run is this
        one, so a resumed run never compares against another workload's (or device's) baseline."""
        lines = self._lines()
        if not lines:
            self._write({HEADER: identity})
            return
        recorded = self.identity()
        if recorded is None:
            raise GpuflyError(f"{self.path} does not record which run wrote it (an older gpufly wrote it)",
                              "start afresh with --results NEW.jsonl; gpufly report and gpufly.apply still read it")
        differences = [f"{key} {recorded.get(key)!r} there, {identity.get(key)!r} here"
                       for key in sorted(set(recorded) | set(identity)) if recorded.get(key) != identity.get(key)]
        if differences:
            raise GpuflyError(f"{self.path} holds another run's trials: {'; '.join(differences)}",
                              "resume with the same workload, --task, --steps and device, or use --results NEW.jsonl")

    def done(self) -> dict[str, TrialResult]:
        """The finished trials by configuration. A last line cut short by a kill is dropped (that trial runs
        again); any other line that is not a trial is an error naming it, not a silent skip."""
        lines = self._lines()
        results = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and HEADER in data:
                    continue
                result = TrialResult(**data)
            except (json.JSONDecodeError, TypeError) as exc:
                if number == len(lines):
                    continue
                raise GpuflyError(f"{self.path} line {number} is not a tune trial: {str(exc)[:80]}",
                                  "delete that line, or start afresh with --results NEW.jsonl") from None
            results[Trial(result.name, result.knobs).key] = result
        return results

    def best_safe_or_error(self) -> TrialResult:
        """The best safe trial, or an error that says why there is none: no trials at all (not a results file,
        or a run stopped before its baseline) or trials of which none is safe."""
        done = list(self.done().values())
        best = best_safe(done)
        if best is not None:
            return best
        if not done:
            raise GpuflyError(f"{self.path} holds no tune trials",
                              "give the .jsonl file `gpufly tune --results FILE` wrote; if the run stopped before "
                              "its first trial, run it again")
        counts = ", ".join(f"{sum(r.status == s for r in done)} {s}" for s in sorted({r.status for r in done}))
        raise GpuflyError(f"{self.path} holds {len(done)} trials and none is safe ({counts})",
                          "read the errors with `gpufly tune WORKLOAD --resume --results FILE`, or tune again")

    def append(self, result: TrialResult) -> None:
        self._write(asdict(result))

    def _write(self, record: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise GpuflyError(f"cannot write the results file {self.path}: {exc.strerror or exc}",
                              "give --results a path in a folder you can write") from None


@dataclass
class Search:
    """The state of one tuning run; ``results`` in the order they were decided."""

    workload: str
    knobs: dict[str, list[Any]]
    """Knob name to the values to try; each knob's baseline is its absence."""
    log: ResultsLog
    runner: Runner
    timeout_s: float = 300.0
    budget_s: float | None = None
    tolerance: float = DRIFT_TOLERANCE
    on_result: Callable[[TrialResult], None] | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    """Knobs every trial carries, the baseline included (``{"task": "infer"}`` for serving)."""
    identity: dict[str, Any] | None = None
    """The run's identity (``run_identity``): written as the results file's header, checked on resume."""
    metric_tolerance: float = METRIC_TOLERANCE
    steps: int | None = None
    """The baseline-sized steps each trial trains: a batch over ``steps / 4`` times the baseline's would leave
    fewer than 4 steps on the same samples, so such batches are not tried (None: no limit)."""
    results: list[TrialResult] = field(default_factory=list)

    def run(self) -> TrialResult | None:
        """Baseline, single knobs, then the greedy combination; returns the best safe result."""
        started = time.monotonic()
        if self.identity is not None:
            self.log.start(self.identity)
        self._done = self.log.done()
        baseline = self._trial(Trial("baseline", {}), None)
        if not baseline.usable:
            return None
        self._add_fitting_batch(baseline)
        singles = [self._trial(Trial(name, knobs), baseline)
                   for name, knobs in self._single_knobs() if not self._out_of_time(started)]
        helpful = sorted((r for r in singles if r.usable and (r.speedup or 0) >= MIN_GAIN),
                         key=lambda r: -(r.speedup or 0))
        if not helpful:
            return baseline
        best = helpful[0]
        for candidate in helpful[1:]:
            if self._out_of_time(started):
                break
            if any(best.knobs[k] != v for k, v in candidate.knobs.items() if k in best.knobs):
                continue  # another value of a knob already chosen (fused after foreach): not a combination
            knobs = {k: v for k, v in {**best.knobs, **candidate.knobs}.items() if k not in self.fixed}
            if knobs == {k: v for k, v in best.knobs.items() if k not in self.fixed}:
                continue  # nothing new (ddp=2 after ddp=2 + ddp_hook=fp16)
            combined = self._trial(Trial(" + ".join(f"{k}={v}" for k, v in knobs.items()), knobs), baseline)
            if combined.usable and (combined.throughput or 0) > (best.throughput or 0):
                best = combined
        return best

    def _add_fitting_batch(self, baseline: TrialResult) -> None:
        """On a GPU, also try the largest batch the baseline's measured memory says fits; drop the batches
        that would leave fewer than 4 steps of the run's samples."""
        growth = MAX_BATCH_GROWTH if self.steps is None else min(MAX_BATCH_GROWTH, self.steps / 4)
        fit = fitting_batch(baseline.batch_size, baseline.peak_memory_bytes, baseline.device_memory_bytes,
                            max_growth=growth)
        tried = self.knobs.get("batch_size")
        if tried is None:
            return
        if baseline.batch_size and self.steps is not None:
            tried = [b for b in tried if b <= baseline.batch_size * growth]
        if fit is not None and (not tried or fit > max(tried)):
            tried = [*tried, fit]
        self.knobs = {k: tried if k == "batch_size" else v for k, v in self.knobs.items()
                      if k != "batch_size" or tried}

    def _single_knobs(self) -> Iterable[tuple[str, dict[str, Any]]]:
        """Each knob value alone; a DDP-only knob (a hook, a bucket size) together with the ddp knob."""
        for name, values in self.knobs.items():
            for value in values:
                knobs = {name: value}
                if name in NEEDS_DDP and self.knobs.get("ddp"):
                    knobs = {"ddp": max(self.knobs["ddp"]), name: value}
                yield " + ".join(f"{k}={v}" for k, v in knobs.items()), knobs

    def _out_of_time(self, started: float) -> bool:
        return self.budget_s is not None and time.monotonic() - started > self.budget_s

    def _trial(self, trial: Trial, baseline: TrialResult | None) -> TrialResult:
        trial = Trial(trial.name, {**self.fixed, **trial.knobs})
        result = self._done.get(trial.key)
        if result is None:
            result = judge(self.runner(self.workload, trial, self.timeout_s), baseline, self.tolerance,
                           self.metric_tolerance)
            self.log.append(result)
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return result
