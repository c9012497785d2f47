"""Module and optimizer hooks: forward, backward and optimizer time per step, and what the model says of itself.

``prof.watch(model, optimizer)`` installs them; `gpufly profile` uses the optimizer half through torch's
global optimizer hooks. The backward time is what lies between the end of the forward pass and the
optimizer step (the loss and the backward pass). The hooks of ``watch`` are on only during the profiler's
detailed steps: a hooked module takes ``nn.Module``'s slower call path on every call, and two hook calls a step
cost a 1 ms step about 0.1-0.4%.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufly.profile.records import LoopSettings
from gpufly.profile.sampling import OwnTime
from gpufly.profile.steps import StepClock


class ModelHooks:
    """Times the parts of each step into ``steps.current`` and notes dtype, autocast, compilation and layout.

    ``cuda`` is set when the profiler starts: it says which device's autocast state to read. ``own`` is told
    the time spent in the hooks.
    """

    def __init__(self, steps: StepClock, settings: LoopSettings, device_given: bool,
                 clock: Callable[[], float] = time.perf_counter, own: OwnTime | None = None) -> None:
        self.steps = steps
        self.settings = settings
        self.device_given = device_given
        self.cuda = False
        self._clock = clock
        self._own = own or OwnTime(clock)
        self._models: list[Any] = []
        self._optimizers: list[Any] = []
        self._handles: list[Any] = []
        self._armed = False
        self._autocast_reader: Callable[[], str | None] = lambda: None
        self._forward_start: float | None = None
        self._forward_end: float | None = None
        self._optimizer_start: float | None = None
        self._every_optimizer = False
        steps.on_skip.append(self.forget_forward)

    def watch_model(self, model: Any) -> None:
        """Read the model's settings, and time its forward pass on the detailed steps."""
        self._read_model(model)
        self._models.append(model)
        if self._armed:
            self._hook(model)

    def watch_optimizer(self, optimizer: Any) -> None:
        """Time this optimizer's steps (and the backward pass before each), on the detailed steps."""
        self._optimizers.append(optimizer)
        if self._armed:
            self._hook_optimizer(optimizer)

    def time_every_optimizer(self) -> None:
        """`gpufly profile`: time every optimizer's steps on the detailed steps, through torch's global pre-hook (its
        global post-hook, which ends each step, `attached` keeps on throughout). The pre-hook is put on only for the
        detailed steps: a hook call a step is a microsecond or two of a 1 ms step, and the optimizer time it gives is
        a detailed-only figure."""
        self._every_optimizer = True
        if self._armed:
            self._hook_every_optimizer()

    def arm(self) -> None:
        """A detailed step begins: put the forward and the optimizer hooks on."""
        if not self._armed:
            self._armed = True
            for model in self._models:
                self._hook(model)
            for optimizer in self._optimizers:
                self._hook_optimizer(optimizer)
            if self._every_optimizer:
                self._hook_every_optimizer()

    def disarm(self) -> None:
        """Take the hooks off (`gpufly profile`'s global optimizer hooks, which mark the steps, are not these)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._armed = False
        self._forward_start = self._forward_end = None

    def forget_forward(self) -> None:
        """A dropped (evaluation) step's forward pass is no start for the next step's backward time."""
        self._forward_end = None

    def before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_start = entered = self._clock()
        if self._forward_end is not None:
            current = self.steps.current
            current.backward_s = (current.backward_s or 0.0) + entered - self._forward_end
            self._forward_end = None
        if self.settings.model_dtype is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if params:
                self.settings.model_dtype = _dtype_name(params[0].dtype)
        own = self._own  # own.since(entered), inline: under `gpufly profile` this runs on every step
        own.step_s += self._clock() - entered
        own.calls += 1

    def after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        entered = self._clock()
        self._optimizer_stepped(entered)
        self._own.since(entered)

    def after_optimizer_step_ending_the_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """`gpufly profile`'s post hook: the optimizer step also ends the loop's step, where this hook was entered
        (one clock reading and one call for both, on every step; ``_optimizer_stepped``'s work done here)."""
        entered = self._clock()
        if self._optimizer_start is not None:
            current = self.steps.current
            current.optimizer_s = (current.optimizer_s or 0.0) + entered - self._optimizer_start
            self._optimizer_start = None
        self.steps.optimizer_ended_step(entered)

    def _optimizer_stepped(self, at: float) -> None:
        if self._optimizer_start is not None:
            current = self.steps.current
            current.optimizer_s = (current.optimizer_s or 0.0) + at - self._optimizer_start
            self._optimizer_start = None
        self.steps.optimizer_stepped()

    def _hook(self, model: Any) -> None:
        self._handles.append(model.register_forward_pre_hook(self._before_forward))
        self._handles.append(model.register_forward_hook(self._after_forward))

    def _hook_optimizer(self, optimizer: Any) -> None:
        self._handles.append(optimizer.register_step_pre_hook(self.before_optimizer_step))
        self._handles.append(optimizer.register_step_post_hook(self.after_optimizer_step))

    def _hook_every_optimizer(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(self.before_optimizer_step))

    def _read_model(self, model: Any) -> None:
        import torch

        settings = self.settings
        inner = getattr(model, "_orig_mod", model)
        settings.compiled = inner is not model
        params = list(inner.parameters())
        if params:
            settings.model_dtype = _dtype_name(params[0].dtype)
            if not self.device_given and params[0].is_cuda:
                settings.device = str(params[0].device)
        settings.has_conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in inner.modules())
        convs = [p for p in params if p.dim() == 4]
        if convs:
            settings.channels_last = all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
        device_type = "cuda" if self.cuda else "cpu"
        enabled, dtype = torch.is_autocast_enabled, torch.get_autocast_dtype
        self._autocast_reader = lambda: _dtype_name(dtype(device_type)) if enabled(device_type) else None

    def _before_forward(self, module: Any, args: Any) -> None:
        entered = self._clock()
        autocast = self._autocast_reader()
        if autocast is not None:
            self.settings.autocast = autocast
        self._forward_start = left = self._clock()
        self._own.add(left - entered)

    def _after_forward(self, module: Any, args: Any, output: Any) -> None:
        self._forward_end = entered = self._clock()
        if self._forward_start is not None:
            current = self.steps.current
            current.forward_s = (current.forward_s or 0.0) + entered - self._forward_start
        self._own.since(entered)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
