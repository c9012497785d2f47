"""What the profiler measured, as plain data: per-step records, the loop's settings, GPU samples.

Pure dataclasses with a JSON form (``to_dict``/``from_dict``), so the rules run on recorded
measurements in tests, ``--save`` writes what ``gpufly report --profile`` reads, and nothing here
needs torch.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class StepRecord:
    """One step: from the end of the previous step (or the first fetch) to the end of this one."""

    index: int
    wall_s: float
    data_wait_s: float = 0.0
    """Time blocked in the DataLoader's ``next()`` for this step's batch."""
    forward_s: float | None = None
    backward_s: float | None = None
    """From the end of the forward pass to the optimizer step: the backward pass and the loss."""
    optimizer_s: float | None = None
    h2d_s: float = 0.0
    """Time in ``Tensor.to``/``.cuda`` calls that moved data from the host to the GPU."""
    syncs: int = 0
    """Calls that make the host wait for the device: ``.item()``, ``.tolist()``, ``.cpu()``/``.numpy()`` of a
    GPU tensor, ``torch.cuda.synchronize()``."""
    sync_gap_s: float | None = None
    """Median CPU-side time between consecutive syncs in the step (from its start to the first, then between);
    short gaps mean the host keeps stopping to wait instead of queuing work ahead."""
    memory_bytes: int | None = None
    """Peak GPU memory allocated during the step (CUDA), or the process RSS at its end (CPU)."""
    batch_size: int | None = None
    warmup: bool = False


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


@dataclass
class TraceSummary:
    """A short torch.profiler window, summarized: kernel (or CPU op) counts and where the time went."""

    steps: int
    window_s: float
    device_busy_s: float | None = None
    kernels: int = 0
    median_kernel_us: float | None = None
    top: list[tuple[str, float, int]] = field(default_factory=list)
    """(name, total ms, calls), largest first."""

    @property
    def idle_share(self) -> float | None:
        if self.device_busy_s is None or self.window_s <= 0:
            return None
        return max(0.0, 1.0 - self.device_busy_s / self.window_s)

    @property
    def kernels_per_step(self) -> float:
        return self.kernels / self.steps if self.steps else 0.0


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

    @property
    def measured(self) -> list[StepRecord]:
        """The steps after warm-up (all of them when the run was too short to drop any)."""
        kept = [s for s in self.steps if not s.warmup]
        return kept or list(self.steps)

    def median(self, attribute: str) -> float | None:
        values = [getattr(s, attribute) for s in self.measured if getattr(s, attribute) is not None]
        return statistics.median(values) if values else None

    def share(self, attribute: str) -> float | None:
        """Total of ``attribute`` over total wall time, over the measured steps."""
        steps = self.measured
        wall = sum(s.wall_s for s in steps)
        values = [getattr(s, attribute) for s in steps]
        if not wall or any(v is None for v in values):
            return None
        return sum(values) / wall

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema_version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileData:
        settings = dict(data.get("settings") or {})
        if settings.get("compute_capability") is not None:
            settings["compute_capability"] = tuple(settings["compute_capability"])
        trace = data.get("trace")
        return cls(
            steps=[StepRecord(**_known(StepRecord, s)) for s in data.get("steps") or []],
            settings=LoopSettings(**_known(LoopSettings, settings)),
            gpu=[GpuReading(**_known(GpuReading, g)) for g in data.get("gpu") or []],
            trace=None if trace is None else TraceSummary(**{**_known(TraceSummary, trace),
                                                             "top": [tuple(t) for t in trace.get("top") or []]}),
            sync_calls=dict(data.get("sync_calls") or {}),
            crash=data.get("crash"),
            exit_code=data.get("exit_code"),
            command=data.get("command"),
        )


def _known(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    """Only the fields this version knows: a newer file still loads."""
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in data.items() if k in names}


def load_profile(path: Any) -> ProfileData:
    """A file written by `gpufly profile --save` (or ``Profiler.save``), with one-line errors for bad ones."""
    from pathlib import Path

    from gpufly.errors import GpuflyError
    from gpufly.jsonfile import read_json

    hint = "write one with `gpufly profile train.py --save profile.json`"
    data = read_json(Path(path), f"no profile file at {path}", hint)
    if not isinstance(data, dict) or "steps" not in data or data.get("schema_version") != SCHEMA_VERSION:
        raise GpuflyError(f"{path} is not a gpufly profile (schema_version {SCHEMA_VERSION})", hint)
    for name, kind in (("steps", list), ("settings", dict), ("gpu", list), ("trace", dict), ("sync_calls", dict)):
        if data.get(name) is not None and not isinstance(data[name], kind):
            raise GpuflyError(f"{path} is not a gpufly profile: {name!r} should be a {kind.__name__}, "
                              f"not {type(data[name]).__name__}", hint)
    try:
        return ProfileData.from_dict(data)
    except (TypeError, ValueError, AttributeError) as exc:  # a hand-edited or foreign file, field by field
        raise GpuflyError(f"{path} is not a gpufly profile: {exc}", hint) from None
