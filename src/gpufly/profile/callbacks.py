"""The profiler inside the loops people already use: a Hugging Face Trainer callback, a Lightning callback.

Both attach the profiler the way `gpufly profile` does (DataLoader iteration timed, each optimizer
step a step) from the start of training to its end, then print the report. The classes are built
on first use, so importing gpufly needs neither library.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gpufly.profile.profiler import Profiler


class _Attachment:
    """Start/stop of ``attached(profiler)`` across two callback calls."""

    def __init__(self, profiler: Profiler | None, report: bool, html: str | Path | None) -> None:
        self.profiler = profiler or Profiler()
        self.report = report
        self.html = html
        self._stack: ExitStack | None = None

    def begin(self) -> None:
        from gpufly.profile.attach import attached

        self._stack = ExitStack()
        self._stack.enter_context(attached(self.profiler))

    def end(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
        if self.report:
            self.profiler.report(html=self.html)
        else:
            self.profiler.finish()


def hf_callback(profiler: Profiler | None = None, report: bool = True, html: str | Path | None = None) -> Any:
    """A ``transformers.TrainerCallback``: ``Trainer(..., callbacks=[gpufly.profile.callbacks.hf_callback()])``."""
    from transformers import TrainerCallback

    class GpuflyTrainerCallback(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.attachment = _Attachment(profiler, report, html)
            self.profiler = self.attachment.profiler

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            model = kwargs.get("model")
            if model is not None:
                self.profiler.data.settings.model_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
            self.profiler.data.settings.batch_size = getattr(args, "per_device_train_batch_size", None)
            self.attachment.begin()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.attachment.end()

    return GpuflyTrainerCallback()


def lightning_callback(profiler: Profiler | None = None, report: bool = True, html: str | Path | None = None) -> Any:
    """A Lightning ``Callback``: ``Trainer(callbacks=[gpufly.profile.callbacks.lightning_callback()])``."""
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback

    class GpuflyLightningCallback(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.attachment = _Attachment(profiler, report, html)
            self.profiler = self.attachment.profiler

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.profiler.watch(model=pl_module)
            self.attachment.begin()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.attachment.end()

    return GpuflyLightningCallback()
