"""Module and optimizer hooks: forward, backward and optimizer time per step, and what the model says of itself.

``prof.watch(model, optimizer)`` installs them; `gpufly profile` uses the optimizer half through torch's
global optimizer hooks. The backward time is what lies between the end of the forward pass and the
optimizer step (the loss and the backward pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufly.profile.records import LoopSettings
from gpufly.profile.steps import StepClock


class ModelHooks:
    """Times the parts of each step into ``steps.current`` and notes dtype, autocast, compilation and layout.

    ``cuda`` is set when the profiler starts: it says which device's autocast state to read.
    """

    def __init__(self, steps: StepClock, settings: LoopSettings, device_given: bool,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.steps = steps
        self.settings = settings
        self.device_given = device_given
        self.cuda = False
        self._clock = clock
        self._handles: list[Any] = []
        self._forward_start: float | None = None
        self._forward_end: float | None = None
        self._optimizer_start: float | None = None
        steps.on_skip.append(self.forget_forward)

    def watch_model(self, model: Any) -> None:
        """Read the model's settings and time its forward pass."""
        self._read_model(model)
        self._handles.append(model.register_forward_pre_hook(self._before_forward))
        self._handles.append(model.register_forward_hook(self._after_forward))

    def watch_optimizer(self, optimizer: Any) -> None:
        """Time this optimizer's steps (and the backward pass before each)."""
        self._handles.append(optimizer.register_step_pre_hook(self.before_optimizer_step))
        self._handles.append(optimizer.register_step_post_hook(self.after_optimizer_step))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def forget_forward(self) -> None:
        """A dropped (evaluation) step's forward pass is no start for the next step's backward time."""
        self._forward_end = None

    def before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_start = self._clock()
        current = self.steps.current
        if self._forward_end is not None:
            current.backward_s = (current.backward_s or 0.0) + self._optimizer_start - self._forward_end
            self._forward_end = None
        if self.settings.model_dtype is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if params:
                self.settings.model_dtype = _dtype_name(params[0].dtype)

    def after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps.optimizer_stepped()
        if self._optimizer_start is not None:
            current = self.steps.current
            current.optimizer_s = (current.optimizer_s or 0.0) + self._clock() - self._optimizer_start

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

    def _before_forward(self, module: Any, args: Any) -> None:
        import torch

        self._forward_start = self._clock()
        device_type = "cuda" if self.cuda else "cpu"
        if torch.is_autocast_enabled(device_type):
            self.settings.autocast = _dtype_name(torch.get_autocast_dtype(device_type))

    def _after_forward(self, module: Any, args: Any, output: Any) -> None:
        if self._forward_start is not None:
            current = self.steps.current
            current.forward_s = (current.forward_s or 0.0) + self._clock() - self._forward_start
        self._forward_end = self._clock()


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
