"""The tuner's search: trials in subprocesses, results written after each one, a greedy combination.

A trial is a configuration (knob name to value). Each runs in its own Python process with a
timeout (``gpufly.tune.worker``), so an out-of-memory error, a compile failure or a hang becomes a
recorded result and the search goes on. Results are appended to a JSONL file as each trial ends,
so Ctrl-C keeps them and ``resume`` skips the trials already done.

Search: the baseline; then each knob alone from the baseline; the ones that helped and stayed safe
are combined greedily, fastest first, each kept only if the combination measures faster. Every trial
trains on the same samples in the same order (a larger batch takes fewer steps), then measures its
loss on the same fixed probe batches; a trial whose probe loss drifts from the baseline's beyond
the tolerance is unsafe and never chosen.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufly.tune.worker import WEIGHT_ONLY

DRIFT_TOLERANCE = 0.02
"""Largest relative gap between a trial's probe loss and the baseline's, after the same training samples."""
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
            line = f"torchao.quantization.quantize_(model, torchao.quantization.{WEIGHT_ONLY[value]}())"
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
    if ddp > 1:
        knobs["ddp"] = [ddp]
    knobs["optimizer_impl"] = ["foreach", "fused"]
    if cuda:
        knobs |= {"pin_memory": [True], "tf32": [True], "cudnn_benchmark": [True]}
    if _has_conv(workload):
        knobs["channels_last"] = [True]
    for option in workload.options:
        knobs[option.name] = list(option.values[1:])
    return knobs



def run_in_subprocess(workload: str, trial: Trial, timeout_s: float, steps: int = 30) -> TrialResult:
    """Run one trial in a fresh interpreter; whatever happens there comes back as a TrialResult."""
    request = json.dumps({"workload": workload, "knobs": trial.knobs, "steps": steps})
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
                           device_memory_bytes=data.get("device_memory_bytes"))
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
                  headroom: float = 0.85) -> int | None:
    """The largest power-of-two multiple of the baseline batch that fits in the GPU, from the baseline's
    measured peak memory. All of the peak is taken to grow with the batch; the weights and optimizer
    state do not, so this errs towards batches that fit, and the trial confirms it (an OOM is recorded).

    >>> fitting_batch(32, 10 * 2**30, 141 * 2**30), fitting_batch(32, 60 * 2**30, 80 * 2**30)
    (256, None)
    """
    if not batch or not peak_bytes or not device_bytes:
        return None
    growth = min(headroom * device_bytes / peak_bytes, MAX_BATCH_GROWTH)
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
    if mine != mine or mine in (float("inf"), float("-inf")):
        return float("inf")
    return abs(mine - baseline) / max(abs(baseline), 1e-8)


class ResultsLog:
    """Trial results as JSON lines, one appended (and flushed) per finished trial."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def done(self) -> dict[str, TrialResult]:
        if not self.path.exists():
            return {}
        results = {}
        for line in self.path.read_text().splitlines():
            try:
                data = json.loads(line)
                result = TrialResult(**data)
            except (json.JSONDecodeError, TypeError):
                continue  # a line cut by a kill: that trial runs again
            results[Trial(result.name, result.knobs).key] = result
        return results

    def append(self, result: TrialResult) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps(asdict(result)) + "\n")
            out.flush()
            os.fsync(out.fileno())


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
    results: list[TrialResult] = field(default_factory=list)

    def run(self) -> TrialResult | None:
        """Baseline, single knobs, then the greedy combination; returns the best safe result."""
        started = time.monotonic()
        self._done = self.log.done()
        baseline = self._trial(Trial("baseline", {}), None)
        if not baseline.usable:
            return None
        self._add_fitting_batch(baseline)
        singles = [self._trial(Trial(f"{name}={value}", {name: value}), baseline)
                   for name, value in self._single_knobs() if not self._out_of_time(started)]
        helpful = sorted((r for r in singles if r.usable and (r.speedup or 0) >= MIN_GAIN),
                         key=lambda r: -(r.speedup or 0))
        if not helpful:
            return baseline
        best = helpful[0]
        for candidate in helpful[1:]:
            if self._out_of_time(started):
                break
            if set(candidate.knobs) & set(best.knobs) - set(self.fixed):
                continue  # another value of a knob already chosen (fused after foreach): not a combination
            knobs = {k: v for k, v in {**best.knobs, **candidate.knobs}.items() if k not in self.fixed}
            combined = self._trial(Trial(" + ".join(f"{k}={v}" for k, v in knobs.items()), knobs), baseline)
            if combined.usable and (combined.throughput or 0) > (best.throughput or 0):
                best = combined
        return best

    def _add_fitting_batch(self, baseline: TrialResult) -> None:
        """On a GPU, also try the largest batch the baseline's measured memory says fits."""
        fit = fitting_batch(baseline.batch_size, baseline.peak_memory_bytes, baseline.device_memory_bytes)
        tried = self.knobs.get("batch_size")
        if fit is not None and tried is not None and fit > max(tried):
            self.knobs = {**self.knobs, "batch_size": [*tried, fit]}

    def _single_knobs(self) -> Iterable[tuple[str, Any]]:
        for name, values in self.knobs.items():
            for value in values:
                yield name, value

    def _out_of_time(self, started: float) -> bool:
        return self.budget_s is not None and time.monotonic() - started > self.budget_s

    def _trial(self, trial: Trial, baseline: TrialResult | None) -> TrialResult:
        trial = Trial(trial.name, {**self.fixed, **trial.knobs})
        result = self._done.get(trial.key)
        if result is None:
            result = self.runner(self.workload, trial, self.timeout_s)
            if baseline is not None and result.usable:
                result.loss_drift = loss_drift(result.eval_loss, baseline.eval_loss)
                if result.loss_drift is not None and result.loss_drift > self.tolerance:
                    result.status = "unsafe"
            if baseline is not None and result.throughput and baseline.throughput:
                result.speedup = result.throughput / baseline.throughput
            elif baseline is None and result.usable:
                result.speedup, result.loss_drift = 1.0, 0.0
            self.log.append(result)
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return result
