"""``gpufly.keras``: the profiler in a Keras 3 ``fit`` on TensorFlow (``keras`` or ``tf.keras``).

    import gpufly.keras

    model.fit(dataset, epochs=2, callbacks=[gpufly.keras.ProfilerCallback()])

Prints the same step profile and findings as ``gpufly.Profiler`` when ``fit`` ends. Importing this module
loads neither Keras nor TensorFlow; the callback class is built the first time it is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufly.profile.keras_profiler import KerasProfiler

    ProfilerCallback: type
    """A ``keras.callbacks.Callback`` subclass, built on first use (``gpufly.profile.keras_callback``)."""

__all__ = ["KerasProfiler", "ProfilerCallback"]


def __getattr__(name: str) -> Any:
    """``ProfilerCallback`` subclasses ``keras.callbacks.Callback``, so Keras is imported when it is first used."""
    if name == "ProfilerCallback":
        from gpufly.profile.keras_callback import callback_class

        return callback_class()
    if name == "KerasProfiler":
        from gpufly.profile.keras_profiler import KerasProfiler

        return KerasProfiler
    raise AttributeError(f"module 'gpufly.keras' has no attribute {name!r}")
