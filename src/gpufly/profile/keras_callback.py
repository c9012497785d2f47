"""The profiler in a Keras ``fit``: ``model.fit(ds, callbacks=[gpufly.keras.ProfilerCallback()])``.

Each train batch is a step (each ``steps_per_execution`` batches, when Keras runs several a call); the input
wait is timed by ``TimedTrainFunction`` (see ``keras_profiler``). Validation between epochs is not a step:
each epoch's first step starts at ``on_epoch_begin``. The class subclasses ``keras.callbacks.Callback``, so
it is built on first use and importing gpufly needs neither Keras nor TensorFlow.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.jsonfile import check_writable
from gpufly.profile.keras_profiler import KerasProfiler, TimedTrainFunction, read_model_settings
from gpufly.profile.render import emit
from gpufly.profile.sampling import DEFAULT_SAMPLING, Sampling


def check_keras(version: str, backend: str) -> None:
    """The callback times the input inside Keras 3's TensorFlow train function; other setups are named, not guessed.

    >>> check_keras("3.15.1", "tensorflow")
    >>> check_keras("2.15.0", "tensorflow")
    Traceback (most recent call last):
    ...
    gpufly.errors.GpuflyError: gpufly.keras needs Keras 3, found Keras 2.15.0
    """
    if int(version.split(".")[0]) < 3:
        raise GpuflyError(f"gpufly.keras needs Keras 3, found Keras {version}",
                          "pip install 'gpufly[keras]' (TensorFlow 2.16 and newer ship Keras 3 as tf.keras); "
                          "unset TF_USE_LEGACY_KERAS")
    if backend != "tensorflow":
        raise GpuflyError(f"gpufly.keras profiles Keras on TensorFlow, this Keras runs on {backend}",
                          "set KERAS_BACKEND=tensorflow, or profile a PyTorch loop with gpufly.Profiler")


def check_outputs(html: str | Path | None = None, save: str | Path | None = None) -> None:
    """The check `gpufly profile` makes of --html and --save before it runs anything, made of the callback's ``html``
    and ``save`` when it is made: a path that cannot be written is a GpuflyError before ``fit``, not after it (where
    it would also lose ``fit``'s History)."""
    for name, path in (("html", html), ("save", save)):
        if path is not None:
            check_writable(f"ProfilerCallback({name}=...)", Path(path),
                           example="profile.json" if name == "save" else "profile.html")


@functools.cache
def callback_class() -> type:
    """``gpufly.keras.ProfilerCallback``, a ``keras.callbacks.Callback`` (the same class as ``tf.keras``'s)."""
    import keras  # type: ignore[import-untyped]

    class ProfilerCallback(keras.callbacks.Callback):
        """Profiles ``fit`` from its first batch to its end, then prints the report (and writes ``html``/``save``).

        The measurements and findings are in ``callback.profiler`` (a ``gpufly.Profiler``): ``.findings()``,
        ``.report(as_json=True)``, ``.save(path)``. ``warmup`` batches (tracing and compiling the step) are left
        out of the statistics.
        """

        def __init__(self, warmup: int = 3, report: bool = True, html: str | Path | None = None,
                     save: str | Path | None = None, nvml_interval: float | None = 0.5, device: str | None = None,
                     sampling: Sampling = DEFAULT_SAMPLING) -> None:
            check_outputs(html=html, save=save)  # before the fit, not after it: a typo must not cost the run
            super().__init__()
            self.profiler = KerasProfiler(warmup, nvml_interval, device, sampling=sampling)
            self.report = report
            self.html = html
            self.save = save
            self._timed: TimedTrainFunction | None = None

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            check_keras(keras.__version__, keras.backend.backend())
            model = self.model
            read_model_settings(self.profiler.data.settings, model)
            per_call = int(getattr(model, "steps_per_execution", 1) or 1)
            function = model.train_function
            if isinstance(function, TimedTrainFunction):  # left by a fit that raised before its end
                function = function.function
            self._timed = TimedTrainFunction(function, self.profiler, per_call)
            model.train_function = self._timed
            self.profiler.start()

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.profiler.steps.restart()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self.profiler.steps.end_step()

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            if self._timed is not None:
                self._timed.active = False
                if self.model.train_function is self._timed:
                    self.model.train_function = self._timed.function
                self._timed = None
            # The files first, then the report; a path that failed after all (a full disk) is raised after both.
            emit(self.profiler.finish(), html=self.html, save=self.save, quiet=not self.report)

    return ProfilerCallback
