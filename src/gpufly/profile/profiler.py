"""``gpufly.Profiler``: two lines around an existing loop, cheap enough to leave on.

    prof = gpufly.Profiler()
    for batch in prof.loader(train_loader):
        with prof.step():
            loss = ...
    prof.report()

What it costs per step: a few ``perf_counter`` calls, one memory reading, and a counter bump on each
``.item()``-like call (those methods are wrapped only while the profiler is active). The step
boundary is the end of ``with prof.step()`` (or the call of ``prof.step()`` used as a marker, or an
optimizer step, or, with none of those, the next fetch from the loader).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufly.profile.records import GpuReading, LoopSettings, ProfileData, StepRecord
from gpufly.profile.rules import Finding, diagnose

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

SYNC_METHODS = ("item", "tolist", "cpu", "numpy")
"""Tensor methods that wait for the device (``cpu``/``numpy`` only count on a GPU tensor)."""

SYNC_CONVERSIONS: tuple[tuple[str, str], ...] = (
    ("__repr__", "print(tensor)"),
    ("__format__", "f-string of a tensor"),
    ("__float__", "float(tensor)"),
    ("__int__", "int(tensor)"),
    ("__bool__", "bool(tensor)"),
    ("__index__", "tensor as an index"),
)
"""Python conversions that read a tensor's value, so wait for the device like ``.item()``. Counted once, where
the user's code calls them: the ``.item()``/``.tolist()`` that printing makes inside torch is not counted again,
and torch's own ``if tensor:`` checks are not the user's to change."""


@dataclass
class _LoaderState:
    """One iterated loader: its settings, and whether optimizer steps happen while it feeds the loop."""

    settings: dict[str, Any] = field(default_factory=dict)
    fetches: int = 0
    optimizer_steps: int = 0


LOADER_SETTINGS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "batch_size")


class _StepContext:
    def __init__(self, profiler: Profiler) -> None:
        self._profiler = profiler

    def __enter__(self) -> _StepContext:
        self._profiler._pending_marker = None
        self._profiler._explicit_steps = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._profiler._boundary(time.perf_counter())


class Profiler:
    """Measures a training or inference loop and says what holds it back.

    ``warmup`` steps are recorded but left out of the statistics (compilation, allocator growth,
    cuDNN autotuning). ``trace_steps`` opens a short ``torch.profiler`` window after warm-up and keeps
    its summary. ``nvml_interval`` samples the GPU in the background when one is in use.
    """

    def __init__(self, warmup: int = 3, trace_steps: int = 0, nvml_interval: float | None = 0.5,
                 device: str | None = None) -> None:
        if warmup < 0:
            raise ValueError("warmup must be zero or more")
        self.warmup = warmup
        self.trace_steps = trace_steps
        self.nvml_interval = nvml_interval
        self.data = ProfileData(settings=LoopSettings(device=device or "cpu"))
        self._device_given = device is not None
        self._active = False
        self._last_boundary: float | None = None
        self._pending_marker: float | None = None
        self._marked_since_fetch = False
        self._fetches = 0
        self._current = StepRecord(index=0, wall_s=0.0)
        self._sync_calls: Counter[str] = Counter()
        self._patched: dict[str, Any] = {}
        self._hooks: list[Any] = []
        self._forward_start: float | None = None
        self._forward_end: float | None = None
        self._optimizer_start: float | None = None
        self._sampler: Any = None
        self._trace: Any = None
        self._trace_started_at: int | None = None
        self._trace_wall_start = 0.0
        self._cuda = False
        self._process: Any = None
        self._statm = None
        self._sync_gaps: list[float] = []
        self._last_sync_at: float | None = None
        self._loaders: dict[int, _LoaderState] = {}
        self._feeding: _LoaderState | None = None
        self._optimizer_steps = 0
        self._explicit_steps = False

    # -- the user's two lines ------------------------------------------------------------------

    def loader(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``iterable`` (a DataLoader or any iterable), timing each wait for the next batch."""
        return self._timed(iterable, lambda: iter(iterable))

    def _timed(self, source: Any, make_iterator: Any) -> Iterator[Any]:
        self._start()
        state = self._loaders.setdefault(id(source), _LoaderState())
        state.settings.update({name: getattr(source, name) for name in LOADER_SETTINGS if hasattr(source, name)})
        self._apply_loader_settings()
        iterator = make_iterator()
        while True:
            started = time.perf_counter()
            self._commit_marker()
            self._feeding = state
            if self._evaluating(state):
                self._skip_to(started)
            elif self._fetches and not self._marked_since_fetch:
                self._boundary(started)  # no step markers: one step per batch
            self._marked_since_fetch = False
            try:
                batch = next(iterator)
            except StopIteration:
                if self._evaluating(state):
                    self._skip_to(time.perf_counter())
                # The boundary above already closed the last batch's step: the next epoch's first fetch must
                # not close another, empty one (2 epochs x 16 batches are 32 steps, not 33).
                self._marked_since_fetch = True
                return
            self._current.data_wait_s += time.perf_counter() - started
            self._fetches += 1
            state.fetches += 1
            if self._current.batch_size is None:
                self._current.batch_size = _batch_size(batch)
            yield batch

    def step(self) -> _StepContext:
        """Use as ``with prof.step():`` around the step's work, or call ``prof.step()`` at the end of each step."""
        self._start()
        self._commit_marker()
        self._pending_marker = time.perf_counter()
        return _StepContext(self)

    def watch(self, model: Any = None, optimizer: Any = None) -> Profiler:
        """Optional: hook the model (forward time, dtype, autocast) and the optimizer (its step time)."""
        self._start()
        if model is not None:
            self._watch_model(model)
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._optimizer_pre))
            self._hooks.append(optimizer.register_step_post_hook(self._optimizer_post))
        return self

    def finish(self, crash: BaseException | None = None) -> ProfileData:
        """Stop measuring (restores everything it wrapped); the partial step is kept if it did work."""
        self._commit_marker()
        if crash is not None:
            self.data.crash = f"{type(crash).__name__}: {crash}"
        if self._active:
            self._stop()
        self._apply_loader_settings()
        self.data.sync_calls = dict(self._sync_calls)
        return self.data

    def findings(self) -> list[Finding]:
        return diagnose(self.finish())

    def report(self, html: str | Path | None = None, as_json: bool = False) -> list[Finding]:
        """Print the summary (step-time bar, findings first), optionally write an HTML page; returns the findings."""
        from gpufly.profile.render import emit

        return emit(self.finish(), as_json=as_json, html=html)

    def save(self, path: str | Path) -> None:
        """Write the measurements as JSON (what `gpufly report --profile` reads)."""
        from gpufly.profile.render import emit

        emit(self.finish(), save=path, quiet=True)

    def __enter__(self) -> Profiler:
        self._start()
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        self.finish(error)

    # -- boundaries ----------------------------------------------------------------------------

    def _commit_marker(self) -> None:
        if self._pending_marker is not None:
            at, self._pending_marker = self._pending_marker, None
            self._boundary(at)

    def _boundary(self, at: float) -> None:
        self._marked_since_fetch = True
        if self._last_boundary is None:
            self._last_boundary = at
            self._reset_step()
            return
        record = self._current
        record.wall_s = at - self._last_boundary
        record.warmup = record.index < self.warmup
        record.memory_bytes = self._memory_reading()
        if self._sync_gaps:
            record.sync_gap_s = statistics.median(self._sync_gaps)
            self._sync_gaps.clear()
        self._last_sync_at = None
        self.data.steps.append(record)
        self._last_boundary = at
        self._current = StepRecord(index=record.index + 1, wall_s=0.0)
        self._advance_trace()

    def _evaluating(self, state: _LoaderState) -> bool:
        """A loader that feeds no optimizer step once training has begun is evaluation, not the loop's steps.

        Without this, 40 no_grad validation batches after 20 training steps are most of the "steps", and their
        median and their loader's num_workers=0 stand for the training loop. Explicit ``prof.step()`` markers
        say what a step is themselves, so they are left alone.
        """
        return not self._explicit_steps and self._optimizer_steps > 0 and state.optimizer_steps == 0

    def _skip_to(self, at: float) -> None:
        """Drop the partial step (evaluation work) and start the next step at ``at``."""
        self._last_boundary = at
        self._current = StepRecord(index=self._current.index, wall_s=0.0)
        self._sync_gaps.clear()
        self._last_sync_at = None
        self._forward_end = None
        self._marked_since_fetch = True

    def _drop_steps_before_training(self) -> None:
        """Batch-per-step records made before the first optimizer step are not training steps: a loader that reads
        one batch ahead (accelerate's, under the HF Trainer) or a sanity-check validation before training."""
        self.data.steps.clear()
        self._current.index = 0

    def _apply_loader_settings(self) -> None:
        """The settings of the loader that feeds the optimizer steps (or, before any, the busiest one)."""
        if not self._loaders:
            return
        main = max(self._loaders.values(), key=lambda state: (state.optimizer_steps, state.fetches))
        for name, value in main.settings.items():
            if value is not None or name != "batch_size":  # None: batches come from a batch_sampler, size unknown
                setattr(self.data.settings, name, value)

    def _count_sync(self) -> None:
        """One more sync in this step, and the CPU time since the previous one (or the step's start)."""
        now = time.perf_counter()
        since = self._last_sync_at if self._last_sync_at is not None else self._last_boundary
        if since is not None:
            self._sync_gaps.append(now - since)
        self._last_sync_at = now
        self._current.syncs += 1

    def _reset_step(self) -> None:
        self._current = StepRecord(index=len(self.data.steps), wall_s=0.0,
                                   data_wait_s=self._current.data_wait_s, batch_size=self._current.batch_size)

    # -- start/stop: wrapping and restoring ----------------------------------------------------

    def _start(self) -> None:
        if self._active:
            return
        self._active = True
        import psutil
        import torch

        self._process = psutil.Process()
        try:
            self._statm: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._statm = None
        self._cuda = torch.cuda.is_available() and (not self._device_given or self.data.settings.device != "cpu")
        if self._cuda and not self._device_given:
            self.data.settings.device = f"cuda:{torch.cuda.current_device()}"
        self._read_torch_settings(torch)
        self._wrap_syncs(torch)
        if self._cuda:
            torch.cuda.reset_peak_memory_stats()
            self._start_nvml()
        if self._last_boundary is None:
            self._last_boundary = time.perf_counter()

    def _stop(self) -> None:
        import torch

        self._active = False
        for name, original in self._patched.items():
            owner, attribute = name.rsplit(".", 1)
            target = torch.cuda if owner == "cuda" else torch.Tensor
            if original is None:
                delattr(target, attribute)
            else:
                setattr(target, attribute, original)
        self._patched.clear()
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._trace is not None:
            self._close_trace(len(self.data.steps) - (self._trace_started_at or 0))
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler.backend.close()
            self._sampler = None

    def _patch_tensor(self, torch: Any, method: str, replacement: Any) -> None:
        """Replace a Tensor method until ``_stop``, remembering what to put back (None: it was inherited)."""
        self._patched[f"Tensor.{method}"] = torch.Tensor.__dict__.get(method)
        setattr(torch.Tensor, method, replacement)

    def _wrap_syncs(self, torch: Any) -> None:
        counter = self._sync_calls
        current = self

        def wrap(method: str, label: str, gpu_only: bool) -> None:
            original = getattr(torch.Tensor, method)

            def counted(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                # Only the loop's own calls: torch's internals (Adam reading its step count) are not the user's to
                # change. On a GPU run only GPU tensors wait; on a CPU run every call is one that would.
                on_device = tensor.is_cuda
                if (on_device or not (gpu_only or current._cuda)) and not _called_from_torch():
                    counter[label] += 1
                    current._count_sync()
                if not tensor.requires_grad:
                    return original(tensor, *args, **kwargs)
                return _warning_at_caller(original, tensor, *args, **kwargs)

            counted.__wrapped__ = original  # type: ignore[attr-defined]
            self._patch_tensor(torch, method, counted)

        for method in SYNC_METHODS:
            wrap(method, f".{method}()", gpu_only=method in ("cpu", "numpy"))
        for method, label in SYNC_CONVERSIONS:
            wrap(method, label, gpu_only=False)
        if self._cuda:
            self._wrap_copies(torch)
            original_sync = torch.cuda.synchronize

            def synchronize(*args: Any, **kwargs: Any) -> Any:
                counter["torch.cuda.synchronize()"] += 1
                current._count_sync()
                return original_sync(*args, **kwargs)

            self._patched["cuda.synchronize"] = original_sync
            torch.cuda.synchronize = synchronize

    def _wrap_copies(self, torch: Any) -> None:
        """Time host-to-device copies made with ``.to(...)``/``.cuda()``; note whether they are non-blocking."""
        settings = self.data.settings
        current = self

        def wrap(method: str) -> None:
            original = getattr(torch.Tensor, method)

            def timed(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                if tensor.is_cuda:
                    result = original(tensor, *args, **kwargs)
                    if not getattr(result, "is_cuda", True) and not _called_from_torch():
                        current._sync_calls[f".{method}(cpu)"] += 1  # device to host waits, like .cpu()
                        current._count_sync()
                    return result
                started = time.perf_counter()
                result = original(tensor, *args, **kwargs)
                if getattr(result, "is_cuda", False):
                    current._current.h2d_s += time.perf_counter() - started
                    blocking = not kwargs.get("non_blocking", False)
                    settings.non_blocking_copies = (settings.non_blocking_copies is not False) and not blocking
                return result

            self._patch_tensor(torch, method, timed)

        for method in ("to", "cuda"):
            wrap(method)

    # -- hooks ---------------------------------------------------------------------------------

    def _watch_model(self, model: Any) -> None:
        import torch

        settings = self.data.settings
        inner = getattr(model, "_orig_mod", model)
        settings.compiled = inner is not model
        params = list(inner.parameters())
        if params:
            settings.model_dtype = str(params[0].dtype).removeprefix("torch.")
            if not self._device_given and params[0].is_cuda:
                settings.device = str(params[0].device)
        settings.has_conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in inner.modules())
        convs = [p for p in params if p.dim() == 4]
        if convs:
            settings.channels_last = all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)

        def pre(module: Any, args: Any) -> None:
            self._forward_start = time.perf_counter()
            device_type = "cuda" if self._cuda else "cpu"
            if torch.is_autocast_enabled(device_type):
                settings.autocast = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")

        def post(module: Any, args: Any, output: Any) -> None:
            if self._forward_start is not None:
                self._current.forward_s = (self._current.forward_s or 0.0) + time.perf_counter() - self._forward_start
            self._forward_end = time.perf_counter()

        self._hooks.append(model.register_forward_pre_hook(pre))
        self._hooks.append(model.register_forward_hook(post))

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_start = time.perf_counter()
        if self._forward_end is not None:
            self._current.backward_s = (self._current.backward_s or 0.0) + self._optimizer_start - self._forward_end
            self._forward_end = None
        if self.data.settings.model_dtype is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if params:
                self.data.settings.model_dtype = str(params[0].dtype).removeprefix("torch.")

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_steps == 0 and not self._explicit_steps and self.data.steps:
            self._drop_steps_before_training()
        self._optimizer_steps += 1
        if self._feeding is not None:
            self._feeding.optimizer_steps += 1
        if self._optimizer_start is not None:
            self._current.optimizer_s = (self._current.optimizer_s or 0.0) + time.perf_counter() - self._optimizer_start

    # -- settings, memory, NVML, trace ---------------------------------------------------------

    def _read_torch_settings(self, torch: Any) -> None:
        s = self.data.settings
        s.torch_version = torch.__version__
        s.tf32_matmul = _tf32_allowed(torch.backends.cuda.matmul, torch.backends.cuda.matmul)
        s.tf32_cudnn = _tf32_allowed(getattr(torch.backends.cudnn, "conv", None), torch.backends.cudnn)
        s.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
        if self._cuda:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            s.gpu_name = props.name
            s.compute_capability = (props.major, props.minor)
            s.gpu_memory_total_bytes = int(props.total_memory)

    def _memory_reading(self) -> int | None:
        if self._cuda:
            import torch

            peak = int(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            return peak
        return self._rss()

    def _rss(self) -> int | None:
        """Resident set size: /proc/self/statm through a kept descriptor (a few µs), else psutil."""
        if self._statm is not None:
            try:
                return int(os.pread(self._statm, 64, 0).split()[1]) * _PAGE
            except OSError:
                self._statm = None
        return int(self._process.memory_info().rss) if self._process is not None else None

    def _start_nvml(self) -> None:
        if not self.nvml_interval:
            return
        from gpufly.monitor.backends.live import LiveBackend
        from gpufly.monitor.sampler import Sampler

        backend = LiveBackend()
        if backend.gpu_status is not None:
            backend.close()
            return
        index = int(self.data.settings.device.partition(":")[2] or 0)
        readings = self.data.gpu

        def keep(snapshot: Any) -> None:
            gpu = next((g for g in snapshot.gpus if g.index == index and not g.lost), None)
            if gpu is not None:
                readings.append(GpuReading(time=snapshot.time, utilization_percent=gpu.utilization_gpu_percent,
                                           memory_used_bytes=gpu.memory_used_bytes, power_w=gpu.power_w,
                                           power_limit_w=gpu.power_limit_w, sm_clock_mhz=gpu.sm_clock_mhz,
                                           sm_clock_max_mhz=gpu.sm_clock_max_mhz,
                                           slowdown_reasons=list(gpu.slowdown_reasons)))

        self._sampler = Sampler(backend, interval=self.nvml_interval, listeners=[keep]).start()

    def _advance_trace(self) -> None:
        if not self.trace_steps:
            return
        done = len(self.data.steps)
        if self._trace is None and self._trace_started_at is None and done >= self.warmup:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
            self._trace = profile(activities=activities)
            self._trace.__enter__()
            self._trace_started_at = done
            self._trace_wall_start = time.perf_counter()
        elif self._trace is not None and done - (self._trace_started_at or 0) >= self.trace_steps:
            self._close_trace(self.trace_steps)

    def _close_trace(self, steps: int) -> None:
        from gpufly.profile.trace import summarize

        trace, self._trace = self._trace, None
        window = time.perf_counter() - self._trace_wall_start
        trace.__exit__(None, None, None)
        self.data.trace = summarize(trace, max(steps, 1), window, cuda=self._cuda)


def _warning_at_caller(original: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``original`` and re-issue its warnings from the user's line, not this wrapper's: torch warns from C++
    at the calling Python frame ("Converting a tensor with requires_grad=True to a scalar"), which is now ours.
    Only tensors that require grad come here: catching warnings touches process-wide state on every call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = original(*args, **kwargs)
    frame = sys._getframe(2)  # 0 this, 1 the wrapper, 2 the user's call
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, frame.f_code.co_filename, frame.f_lineno,
                               module=frame.f_globals.get("__name__"),
                               registry=frame.f_globals.setdefault("__warningregistry__", {}),
                               module_globals=frame.f_globals)
    return result


def _called_from_torch() -> bool:
    """Whether the wrapped call came from torch itself: frame 0 is this, 1 the wrapper, 2 the caller."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return caller == "torch" or caller.startswith("torch.")


def _batch_size(batch: Any) -> int | None:
    """The leading dimension of the first tensor-like thing in the batch."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        for item in batch:
            size = _batch_size(item)
            if size is not None:
                return size
    return None


def _tf32_allowed(precision_holder: Any, legacy_holder: Any) -> bool:
    """Whether TF32 is on, read through the `fp32_precision` API first: once a script sets that API (as PyTorch
    advises), the old `allow_tf32` getter raises instead of answering. "none" defers to the old flag."""
    precision = getattr(precision_holder, "fp32_precision", None)
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(legacy_holder.allow_tf32)
    except RuntimeError:
        return False
