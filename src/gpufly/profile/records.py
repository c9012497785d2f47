"""What the profiler measured, as plain data: per-step records, the loop's settings, GPU samples.

Pure dataclasses with a JSON form (``to_dict``, and ``load_profile`` through ``gpufly.records.from_dict``),
so the rules run on recorded measurements in tests, ``--save`` writes what ``gpufly report --profile``
reads, and nothing here needs torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json
from gpufly.records import checked, shown
from gpufly.records import from_dict as typed_from_dict

SCHEMA_VERSION = 1

DETAILED_ONLY = frozenset({"forward_s", "backward_s", "optimizer_s", "h2d_s", "syncs", "sync_gap_s", "sync_wait_s",
                           "memory_bytes"})
"""What only the detailed (sampled) steps measure; ``wall_s``, ``data_wait_s`` and ``batch_size`` every step has."""
SYNC_ONLY = frozenset({"h2d_s", "syncs", "sync_gap_s", "sync_wait_s"})
"""What only the detailed steps with the sync counter in measure (``StepRecord.syncs_counted``)."""


def _seconds(value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise GpuflyError(f"a time must be a finite number of seconds, zero or more, got {shown(value)}",
                          "write the file again with `gpufly profile train.py --save profile.json`")


def _count(value: int) -> None:
    if value < 0:
        raise GpuflyError(f"a count must be zero or more, got {value}",
                          "write the file again with `gpufly profile train.py --save profile.json`")


SECONDS = checked(_seconds)
"""A measured time: a file with a NaN, infinite or negative one would be reported as if it were measured."""
COUNT = checked(_count)


@dataclass(slots=True)
class StepRecord:
    """One step: from the end of the previous step (or the first fetch) to the end of this one."""

    index: int = field(metadata=COUNT)
    wall_s: float = field(metadata=SECONDS)
    data_wait_s: float = field(default=0.0, metadata=SECONDS)
    """Time blocked in the DataLoader's ``next()`` for this step's batch."""
    forward_s: float | None = field(default=None, metadata=SECONDS)
    backward_s: float | None = field(default=None, metadata=SECONDS)
    """From the end of the forward pass to the optimizer step: the backward pass and the loss."""
    optimizer_s: float | None = field(default=None, metadata=SECONDS)
    h2d_s: float = field(default=0.0, metadata=SECONDS)
    """Time in ``Tensor.to``/``.cuda`` calls that moved data from the host to the GPU."""
    syncs: int = field(default=0, metadata=COUNT)
    """Calls that make the host wait for the device: ``.item()``, ``.tolist()``, ``.cpu()``/``.numpy()`` of a
    GPU tensor, ``torch.cuda.synchronize()``."""
    sync_gap_s: float | None = field(default=None, metadata=SECONDS)
    """Median CPU-side time between consecutive syncs in the step (from its start to the first, then between);
    short gaps mean the host keeps stopping to wait instead of queuing work ahead."""
    memory_bytes: int | None = field(default=None, metadata=COUNT)
    """Peak GPU memory allocated during the step (CUDA), or the process RSS at its end (CPU)."""
    batch_size: int | None = field(default=None, metadata=COUNT)
    warmup: bool = False
    detailed: bool = True
    """Whether this step was one the profiler looked inside (forward/backward/optimizer time, syncs, copies,
    memory): it does so on a sample of the steps, to stay cheap. Files written before sampling had every step
    detailed."""
    sync_wait_s: float | None = field(default=None, metadata=SECONDS)
    """Time spent inside the sync calls themselves: on a GPU, the host waiting for the device (the stall)."""
    own_s: float | None = field(default=None, metadata=SECONDS)
    """Time the step spent in gpufly's own code (hooks, wrappers, bookkeeping), timed inside it."""
    syncs_counted: bool = True
    """Whether this detailed step had the sync counter in (``Sampling.syncs_every``): only those count syncs and
    copies. Files written before it had the counter in on every detailed step."""


@dataclass
class LoopSettings:
    """How the loop is set up, as far as the profiler could see it (None: not seen)."""

    device: str = "cpu"
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    gpu_memory_total_bytes: int | None = None
    model_dtype: str | None = None
    autocast: str | None = None
    """The autocast dtype seen during the forward pass ("bfloat16", "float16"), or None when off."""
    grad_scaler: bool | None = None
    batch_size: int | None = None
    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    cudnn_benchmark: bool | None = None
    compiled: bool | None = None
    channels_last: bool | None = None
    non_blocking_copies: bool | None = None
    has_conv: bool | None = None
    torch_version: str | None = None
    python_version: str | None = None
    gpufly_version: str | None = None
    cpu_name: str | None = None
    cpu_threads: int | None = None
    """The framework's intra-op threads (torch's, or TensorFlow's): a CPU loop's speed depends on them."""
    framework: str = "torch"
    """What the loop runs on: "torch", or "keras" (``gpufly.keras``; files from before it are all torch). The
    advice names the framework's own settings."""
    keras_version: str | None = None
    tensorflow_version: str | None = None
    input_pipeline: str | None = None
    """A tf.data input's transformations, source first ("TensorSlice -> Map[py_function] -> Batch"): the input
    advice reads it (a sequential map, no prefetch)."""

    @property
    def tensor_cores(self) -> bool:
        """Volta (7.0) and newer have tensor cores for fp16; Ampere (8.0) adds bf16 and TF32."""
        return self.compute_capability is not None and self.compute_capability >= (7, 0)


@dataclass
class GpuReading:
    """One NVML sample of the profiled GPU, taken in the background."""

    time: float
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    slowdown_reasons: list[str] = field(default_factory=list)
    energy_j: float | None = None
    """NVML's total energy counter at this reading (joules since the driver loaded); None on a card without it."""


@dataclass
class TraceSummary:
    """A short torch.profiler window, summarized: kernel (or CPU op) counts and where the time went."""

    steps: int
    window_s: float
    device_busy_s: float | None = None
    kernels: int = 0
    """GPU kernels on a GPU run; on a CPU run, the operator calls torch.profiler recorded (nested ones included)."""
    median_kernel_us: float | None = None
    top: list[tuple[str, float, int]] = field(default_factory=list)
    """(name, total ms, calls), largest first."""
    first_step: int | None = None
    """The index of the window's first step (its steps are left out of the figures and of gpufly's own cost)."""
    cost_s: float | None = None
    """What opening torch.profiler and summarizing its trace took: paid between steps, in no step's time and not in
    gpufly's own cost (``Overhead``), which is the cost of leaving the profiler on."""

    @property
    def cuda(self) -> bool:
        """Whether the window traced a GPU's kernels (``kernels`` counts them) or CPU operators only."""
        return self.device_busy_s is not None

    @property
    def idle_share(self) -> float | None:
        if self.device_busy_s is None or self.window_s <= 0:
            return None
        return max(0.0, 1.0 - self.device_busy_s / self.window_s)

    @property
    def kernels_per_step(self) -> float:
        return self.kernels / self.steps if self.steps else 0.0


MIN_SPREAD_STEPS = 5
"""Measured steps needed before the step times' p10-p90 spread is shown as the noise floor."""


@dataclass(frozen=True)
class StepNoise:
    """How much the step time moves from step to step: the median with its 95% interval, and the 10th-90th
    percentile band. Two runs whose medians differ by less than ``spread`` are not told apart by one step each."""

    steps: int
    median_s: float
    p10_s: float
    p90_s: float
    median_low_s: float | None
    """The 95% interval of the median, from order statistics (None under 6 steps)..."""
    median_high_s: float | None

    @property
    def spread_known(self) -> bool:
        """Whether there are steps enough for a p10-p90 band (``MIN_SPREAD_STEPS``): under that, p10 and p90 are the
        fastest and the slowest step (one step: the step itself, a spread of 0%), which says nothing of the noise."""
        return self.steps >= MIN_SPREAD_STEPS

    @property
    def spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0

    @classmethod
    def of(cls, times: list[float]) -> StepNoise | None:
        """The spread of step times, or None without steps.

        >>> StepNoise.of([0.010, 0.011, 0.009, 0.010, 0.012, 0.010]).p90_s
        0.012
        """
        if not times:
            return None
        ordered = sorted(times)
        n = len(ordered)
        low = high = None
        if n >= 6:  # the binomial interval of the median, normal approximation: ranks n/2 -+ 1.96 sqrt(n)/2
            half = 0.98 * math.sqrt(n)
            low = ordered[max(0, math.floor(n / 2 - half) - 1)]
            high = ordered[min(n - 1, math.ceil(n / 2 + 1 + half) - 1)]
        return cls(steps=n, median_s=statistics.median(ordered), p10_s=_quantile(ordered, 0.1),
                   p90_s=_quantile(ordered, 0.9), median_low_s=low, median_high_s=high)


def _quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Overhead:
    """What gpufly's own instrumentation cost this run, timed inside its hooks and wrappers.

    A lower bound on the true cost: the calls into the hooks (and the module's slower call path while a forward
    hook is on) happen before a hook can read the clock. ``benchmarks/profile_overhead.py`` sets it against the
    cost measured from outside.
    """

    spent_s: float = field(metadata=SECONDS)
    """Total time inside gpufly's hooks, wrappers and step bookkeeping, as timed (preemptions included), on the steps
    whose own time was timed: ``per_step_s`` counts the others too."""
    steps: int = field(metadata=COUNT)
    hook_calls: int = field(metadata=COUNT)
    """Entries into gpufly's code from the loop (each timed)."""
    detailed_steps: int = field(default=0, metadata=COUNT)
    per_step_s: float | None = field(default=None, metadata=SECONDS)
    """The cost per step: the median over the steady (not detailed) steps whose own time was timed, for every steady
    step, plus the whole of what the detailed steps and the step after each window (which puts the wrappers back)
    spent, over all steps. The median keeps a preemption of the process (milliseconds, on a busy machine) that
    happened to land in gpufly's code from counting as its cost; the detailed steps' costs, rare and uneven, are
    counted whole. Only a sample of the steady steps is timed (``Sampling.own_share``): timing costs readings of the
    clock of its own."""

    left_out_steps: int = field(default=0, metadata=COUNT)
    """Steps left out of ``per_step_s``: a ``--trace`` window's, where torch.profiler slows gpufly's hooks with
    everything else (their cost is the trace's, said with it)."""

    @classmethod
    def of(cls, steps: list[StepRecord], hook_calls: int, spent_s: float, left_out: range = range(0)) -> Overhead:
        """``left_out``: the indices of steps whose own time is not gpufly's usual cost (a torch.profiler window)."""
        counted = [s for s in steps if s.index not in left_out]
        touched = {i for i, s in enumerate(counted) if s.detailed or (i > 0 and counted[i - 1].detailed)}
        steady = [s.own_s for i, s in enumerate(counted) if i not in touched and s.own_s is not None]
        per_step_s = None
        if any(s.own_s is not None for s in counted):
            whole = sum(counted[i].own_s or 0.0 for i in touched)
            per_step_s = (whole + (statistics.median(steady) * (len(counted) - len(touched)) if steady else 0.0)
                          ) / len(counted)
        return cls(spent_s=spent_s, steps=len(steps), hook_calls=hook_calls,
                   detailed_steps=sum(s.detailed for s in steps), per_step_s=per_step_s,
                   left_out_steps=sum(s.index in left_out for s in steps))


@dataclass
class Conditions:
    """What could have disturbed the timings: the machine's load at the start and the end of the run."""

    load_average_start: float | None = None
    """The 1-minute load average (runnable processes) as the loop started..."""
    load_average_end: float | None = None
    """...and as it finished; above the CPU count, the loop shared the CPUs."""
    cpu_count: int | None = None


@dataclass
class ProfileData:
    """Everything one profiled run produced; ``crash`` holds the error when the loop died."""

    steps: list[StepRecord] = field(default_factory=list)
    settings: LoopSettings = field(default_factory=LoopSettings)
    gpu: list[GpuReading] = field(default_factory=list)
    trace: TraceSummary | None = None
    sync_calls: dict[str, int] = field(default_factory=dict)
    crash: str | None = None
    exit_code: int | None = None
    command: str | None = None
    overhead: Overhead | None = None
    conditions: Conditions | None = None
    no_step_reason: str | None = None
    """Why no step was measured, when none was ("the script raised ValueError: ... before its first step ended"), so
    that a profile of no step says so wherever it is read."""

    @property
    def measured(self) -> list[StepRecord]:
        """The steps after warm-up; when the run had no more steps than the warm-up, its second half (the first
        steps, compilation and allocation included, would otherwise set every figure: ``short_of_warmup`` says so)."""
        kept = [s for s in self.steps if not s.warmup]
        return kept or list(self.steps[len(self.steps) // 2:])

    @property
    def short_of_warmup(self) -> bool:
        """Whether every step fell inside the warm-up, so that the figures come from the run's second half."""
        return bool(self.steps) and all(s.warmup for s in self.steps)

    @property
    def detailed(self) -> list[StepRecord]:
        """The measured steps the profiler looked inside (syncs, copies, forward/backward/optimizer, memory)."""
        return [s for s in self.measured if s.detailed]

    def steps_for(self, attribute: str) -> list[StepRecord]:
        """The measured steps where ``attribute`` was measured: the detailed ones for what only they measure, and of
        those the ones with the sync counter in for syncs and copies."""
        if attribute in SYNC_ONLY:
            return [s for s in self.detailed if s.syncs_counted]
        return self.detailed if attribute in DETAILED_ONLY else self.measured

    def median(self, attribute: str) -> float | None:
        values = [getattr(s, attribute) for s in self.steps_for(attribute) if getattr(s, attribute) is not None]
        return statistics.median(values) if values else None

    def share(self, attribute: str) -> float | None:
        """Total of ``attribute`` over total wall time, over the steps that measured it (all of them seen)."""
        steps = self.steps_for(attribute)
        wall = sum(s.wall_s for s in steps)
        values = [getattr(s, attribute) for s in steps]
        if not wall or any(v is None for v in values):
            return None
        return sum(values) / wall

    def per_step(self, attribute: str) -> float | None:
        """The mean of a count (``syncs``) over the steps that counted it."""
        steps = self.steps_for(attribute)
        return sum(getattr(s, attribute) for s in steps) / len(steps) if steps else None

    def noise(self) -> StepNoise | None:
        """The spread of the measured steps' wall times: the noise floor any comparison must clear."""
        return StepNoise.of([s.wall_s for s in self.measured])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema_version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "profile", hint: str | None = None) -> ProfileData:
        """The measurements from their JSON form; fields a newer gpufly added are ignored, a wrong one is named."""
        return typed_from_dict(cls, data, where, hint=hint, unknown="ignore")


def load_profile(path: str | Path) -> ProfileData:
    """A file written by `gpufly profile --save` (or ``Profiler.save``), with one-line errors for bad ones.

    Fields this version does not know (from a newer gpufly) are ignored; a field of the wrong type is an error
    that names it: ``p.json: steps[0] must be an object, got "x"``.
    """
    hint = "write one with `gpufly profile train.py --save profile.json`"
    data = read_json(Path(path), f"no profile file at {path}", hint)
    if not isinstance(data, dict) or "steps" not in data:
        what = (f"a {data['kind']} file" if isinstance(data, dict) and isinstance(data.get("kind"), str)
                else "JSON without a profile's steps")
        raise GpuflyError(f"{path} is not a gpufly profile: it is {what}", hint)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GpuflyError(f"{path} is a profile of schema_version {data.get('schema_version')!r}; this gpufly reads "
                          f"{SCHEMA_VERSION}", hint)
    return ProfileData.from_dict(data, str(path), hint)
