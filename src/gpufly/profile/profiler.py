"""``gpufly.Profiler``: two lines around an existing loop, cheap enough to leave on.

    prof = gpufly.Profiler()
    for batch in prof.loader(train_loader):
        with prof.step():
            loss = ...
    prof.report()

What it costs per step: a few clock readings on every step (a step not looked inside is kept as its numbers,
made a record when ``finish`` reads the steps); on a sample of the steps (``Sampling``: the warm-up, the first
8 measured, then about 1 in 16 in windows of 16, and 1 in 64 once 64 have been looked inside), the model's
forward hooks, a counter on each ``.item()``-like call (those methods are wrapped only for the first sampled
steps and one window in four after them: ``Sampling.syncs_every``), and a memory reading at the end of each window.
The time spent in gpufly's own code is timed and reported with every result (``ProfileData.overhead``). The
step boundary is the end of ``with prof.step()`` (or the call of ``prof.step()`` used as a marker, or an
optimizer step, or, with none of those, the next fetch from the loader).

The work is done by parts with one job each, composed here: ``StepClock`` (step boundaries and loader
waits), ``SyncCounter`` (syncs and copies), ``ModelHooks`` (forward, backward, optimizer),
``MemoryReader``, ``TraceWindow`` (torch.profiler) and ``GpuWatch`` (NVML samples).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from gpufly.profile.gpuwatch import GpuWatch
from gpufly.profile.hooks import ModelHooks
from gpufly.profile.readers import MemoryReader, load_average, read_conditions, read_torch_settings
from gpufly.profile.records import LoopSettings, Overhead, ProfileData
from gpufly.profile.rules import Finding, diagnose
from gpufly.profile.sampling import DEFAULT_SAMPLING, DetailSchedule, OwnTime, Sampling
from gpufly.profile.steps import StepClock, StepContext
from gpufly.profile.syncs import SyncCounter
from gpufly.profile.trace import TraceWindow


class Profiler:
    """Measures a training or inference loop and says what holds it back.

    ``warmup`` steps are recorded but left out of the statistics (compilation, allocator growth,
    cuDNN autotuning). ``sampling`` says which steps are looked inside (syncs, copies, forward/backward,
    memory). ``trace_steps`` opens a short ``torch.profiler`` window after warm-up and keeps its summary; its steps,
    slowed by the tracing, are left out of the statistics too.
    ``nvml_interval`` samples the GPU in the background when one is in use. ``clock`` times everything
    (a fake one in tests). ``data`` is complete once ``finish()`` (which ``report`` and ``save`` call) has run:
    until then ``data.steps`` lacks the latest steps not looked inside (``steps.steps`` has them all).
    """

    def __init__(self, warmup: int = 3, trace_steps: int = 0, nvml_interval: float | None = 0.5,
                 device: str | None = None, *, sampling: Sampling = DEFAULT_SAMPLING,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if warmup < 0:
            raise ValueError("warmup must be zero or more")
        self.warmup = warmup
        self.trace_steps = trace_steps
        self.nvml_interval = nvml_interval
        self.data = ProfileData(settings=LoopSettings(device=device or "cpu"))
        self.own = OwnTime(clock)
        self.memory = MemoryReader()
        # The torch.profiler window's steps run several times slower: like warm-up, they are kept out of the figures.
        left_out = warmup + trace_steps
        self.steps = StepClock(self.data.steps, left_out, clock, read_memory=self.memory.read,
                               schedule=DetailSchedule(sampling, left_out), own=self.own)
        self.syncs = SyncCounter(on_sync=self.steps.count_sync, on_copy=self._copied, clock=clock, own=self.own)
        self.hooks = ModelHooks(self.steps, self.data.settings, device_given=device is not None, clock=clock,
                                own=self.own)
        self.trace = TraceWindow(trace_steps, warmup, clock)
        if trace_steps:
            self.steps.on_step.append(self._advance_trace)
        self.steps.on_detail.append(self._detail)
        self._sampling = sampling
        self._windows = 0
        """Runs of detailed steps opened so far: the sync counter goes in for the first and one in
        ``sampling.syncs_every`` after it."""
        self.gpu: GpuWatch | None = None
        self._context = StepContext(self.steps)
        self._device_given = device is not None
        self._active = False

    # -- the user's two lines ------------------------------------------------------------------

    def loader(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``iterable`` (a DataLoader or any iterable), timing each wait for the next batch."""
        return self.timed(iterable, lambda: iter(iterable))

    def timed(self, source: Any, make_iterator: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """The batches of ``make_iterator()``, timed as ``source``'s (whose settings are read now). The step clock's
        generator itself, not one wrapped in another: each layer costs every batch."""
        self.start()
        state = self.steps.track_loader(source)
        self._apply_loader_settings()
        return self.steps.iterate(state, make_iterator())

    def step(self) -> StepContext:
        """Use as ``with prof.step():`` around the step's work, or call ``prof.step()`` at the end of each step.

        Once measuring has started, ``prof.step`` is the step context's own ``marker`` (set on the instance by
        ``start``, taken off by ``finish``): one call a step fewer, on every step."""
        if not self._active:
            self.start()
        return self._context.marker()

    def watch(self, model: Any = None, optimizer: Any = None) -> Profiler:
        """Optional: hook the model (forward time, dtype, autocast) and the optimizer (its step time)."""
        self.start()
        if model is not None:
            self.hooks.watch_model(model)
        if optimizer is not None:
            self.hooks.watch_optimizer(optimizer)
        return self

    def finish(self, crash: BaseException | None = None) -> ProfileData:
        """Stop measuring (restores everything it wrapped); the partial step is kept if it did work."""
        self.steps.commit_marker()
        self.steps.records()  # completes data.steps: the plain steps are made records when read
        if crash is not None:
            self.data.crash = f"{type(crash).__name__}: {crash}" if str(crash) else type(crash).__name__
        if self._active:
            self._stop()
        self._apply_loader_settings()
        self.data.sync_calls = self._sync_calls()
        self.data.overhead = Overhead.of(self.data.steps, hook_calls=self.own.calls, spent_s=self.own.spent_s,
                                         left_out=self.trace.left_out())
        if not self.data.steps and self.data.no_step_reason is None:
            self.data.no_step_reason = (f"the loop stopped before its first step ended: {self.data.crash}"
                                        if self.data.crash else "no step ended before the profiler stopped")
        return self.data

    def _sync_calls(self) -> dict[str, int]:
        """The sync calls by label over the steps the per-step figure counts (``data.steps_for("syncs")``): not the
        warm-up's, nor those of evaluation batches dropped from the steps."""
        counted = {id(step) for step in self.data.steps_for("syncs")}
        calls: Counter[str] = Counter()
        for step, labels in self.steps.sync_calls:
            if id(step) in counted:
                calls.update(labels)
        return dict(calls)

    def findings(self) -> list[Finding]:
        return diagnose(self.finish())

    def report(self, html: str | Path | None = None, as_json: bool = False) -> list[Finding]:
        """Print the summary (step-time bar, findings first), optionally write an HTML page; returns the findings."""
        from gpufly.profile.render import emit

        return emit(self.finish(), as_json=as_json, html=html)

    def save(self, path: str | Path) -> None:
        """Write the measurements as JSON (what `gpufly report --profile` reads), atomically."""
        from gpufly.profile.render import emit

        emit(self.finish(), save=path, quiet=True)

    def __enter__(self) -> Profiler:
        self.start()
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        self.finish(error)

    # -- start and stop ------------------------------------------------------------------------

    def start(self) -> None:
        """Start measuring (once): read the settings, wrap the sync methods, start the GPU watch."""
        if self._active:
            return
        self._active = True
        cuda = self.open_framework()
        self.data.conditions = read_conditions()
        if cuda and self.nvml_interval:
            self._start_gpu_watch(self.nvml_interval)
        self.steps.start()
        self.step = self._context.marker  # type: ignore[method-assign]

    def open_framework(self) -> bool:
        """Read torch's device and settings and get the parts that use torch ready; True on a GPU run.

        The one place the profiler meets torch: ``gpufly.keras``'s profiler reads TensorFlow here instead."""
        import torch

        settings = self.data.settings
        cuda = torch.cuda.is_available() and (not self._device_given or settings.device != "cpu")
        if cuda and not self._device_given:
            settings.device = f"cuda:{torch.cuda.current_device()}"
        self.memory.open(cuda)
        self.hooks.cuda = self.trace.cuda = cuda
        read_torch_settings(settings, torch, cuda)
        self.syncs.start(torch, cuda)
        return cuda

    def _detail(self, detailed: bool) -> None:
        """The steps from now on are looked inside (wrappers and forward hooks on), or no longer are."""
        if detailed:
            counting = self._windows % self._sampling.syncs_every == 0 and self.syncs.arm()
            self._windows += 1
            self.steps.counting_syncs = counting
            self.hooks.arm()
            self.memory.arm()
        else:
            self.syncs.disarm()
            self.hooks.disarm()

    def _stop(self) -> None:
        self._active = False
        self.__dict__.pop("step", None)  # back to the method, which starts measuring again
        self.syncs.disarm()
        self.hooks.disarm()
        if self.data.conditions is not None:
            self.data.conditions.load_average_end = load_average()
        self.trace.close(len(self.data.steps))
        self.data.trace = self.trace.summary
        self.memory.close()
        if self.gpu is not None:
            self.gpu.stop()
            self.gpu = None

    def _start_gpu_watch(self, interval: float) -> None:
        index = int(self.data.settings.device.partition(":")[2] or 0)
        watch = GpuWatch(index, interval, self.data.gpu)
        if watch.start():
            self.gpu = watch

    # -- glue between the parts ----------------------------------------------------------------

    def _advance_trace(self, done: int) -> None:
        """Open or close the torch.profiler window; closing it summarizes the trace (tens to hundreds of ms), which
        belongs to no step of the loop: the step under way restarts after it."""
        was_open = self.trace.summary is None
        # Opening torch.profiler and summarizing its trace (tens of ms) is the trace's cost, said with it: taken back
        # out of gpufly's own time, which the step clock's caller adds up around this listener.
        self.own.step_s -= self.trace.advance(done)
        if was_open and self.trace.summary is not None:
            self.steps.restart()

    def _copied(self, seconds: float, blocking: bool) -> None:
        """A host-to-device copy in this step; the run's copies are non-blocking only if every one is."""
        self.steps.current.h2d_s += seconds
        settings = self.data.settings
        settings.non_blocking_copies = (settings.non_blocking_copies is not False) and not blocking

    def _apply_loader_settings(self) -> None:
        for name, value in self.steps.main_loader_settings().items():
            if value is not None or name != "batch_size":  # None: batches come from a batch_sampler, size unknown
                setattr(self.data.settings, name, value)
