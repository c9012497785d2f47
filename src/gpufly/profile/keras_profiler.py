"""The profiler's view of a Keras ``fit``: TensorFlow's device and settings, and the input wait of each step.

Keras 3 on TensorFlow fetches each batch inside its compiled train function (``iterator.get_next()`` in the
graph), so no Python hook sees the wait. ``TimedTrainFunction`` takes the fetch out: it calls ``next()`` on
the tf.data iterator itself, timed (the call returns when the pipeline has the batch ready, which is the
wait), and hands the batch to Keras's own train function, which takes a list of batches on its eager path
(the one it uses for inputs that are not tf.data iterators) and runs the same compiled step on it. The
step's wall time runs from the end of one ``on_train_batch_end`` to the next; Keras turns the logs into
numbers before calling a callback like this one, so the device has finished the step by then.

Nothing here imports TensorFlow at module level: the module object is passed in where it is needed.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpufly import __version__
from gpufly.profile.profiler import Profiler
from gpufly.profile.readers import MemoryReader
from gpufly.profile.records import LoopSettings
from gpufly.profile.sampling import DEFAULT_SAMPLING, OwnTime, Sampling
from gpufly.profile.steps import StepClock, batch_size_of

PY_FUNCTION_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless"})
"""The graph ops of ``tf.py_function`` and ``tf.numpy_function``: Python inside the pipeline, under the GIL."""


class KerasProfiler(Profiler):
    """A ``gpufly.Profiler`` whose framework is TensorFlow: same steps, rules and report, no torch.

    ``device`` is found from TensorFlow's visible GPUs unless given ("cpu" profiles a CPU run on a GPU host). Its own
    time is timed on every step: a Keras step's bookkeeping (the batches' fetch, the callback) is timed as one piece,
    and its clock readings are nothing beside a Keras step.
    """

    def __init__(self, warmup: int = 3, nvml_interval: float | None = 0.5, device: str | None = None, *,
                 sampling: Sampling = DEFAULT_SAMPLING, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(warmup, trace_steps=0, nvml_interval=nvml_interval, device=device,
                         sampling=replace(sampling, own_share=1.0), clock=clock)
        self.memory = TfMemoryReader()
        self.steps.read_memory = self.memory.read
        self.data.settings.framework = "keras"

    def open_framework(self) -> bool:
        import tensorflow as tf  # type: ignore[import-untyped]

        settings = self.data.settings
        gpus = tf.config.list_logical_devices("GPU")
        cuda = bool(gpus) and (not self._device_given or settings.device != "cpu")
        if cuda and not self._device_given:
            settings.device = "cuda:0"
        self.memory.open(cuda)
        read_tensorflow_settings(settings, tf, cuda)
        return cuda


class TfMemoryReader(MemoryReader):
    """A step's memory: TensorFlow's peak allocation on the GPU since the last reading, else the process RSS."""

    def open(self, cuda: bool) -> None:
        super().open(False)
        self.cuda = cuda
        self.arm()

    def arm(self) -> None:
        if self.cuda:
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats("GPU:0")

    def read(self) -> int | None:
        if not self.cuda:
            return super().read()
        import tensorflow as tf

        peak = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
        tf.config.experimental.reset_memory_stats("GPU:0")
        return peak


def read_tensorflow_settings(settings: LoopSettings, tf: Any, cuda: bool) -> None:
    """Versions, threads and TF32, and on a GPU run the device's name, capability and memory."""
    import keras  # type: ignore[import-untyped]

    from gpufly.hw import probe_host

    settings.tensorflow_version = tf.__version__
    settings.keras_version = keras.__version__
    settings.python_version = platform.python_version()
    settings.gpufly_version = __version__
    settings.cpu_name = probe_host().cpu_model
    settings.cpu_threads = tf.config.threading.get_intra_op_parallelism_threads() or _usable_cpus()
    settings.tf32_matmul = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    if cuda:
        gpu = tf.config.list_physical_devices("GPU")[0]
        details = tf.config.experimental.get_device_details(gpu)
        settings.gpu_name = details.get("device_name")
        if details.get("compute_capability"):
            settings.compute_capability = tuple(details["compute_capability"])
        settings.gpu_memory_total_bytes = _gpu_memory_total(0)


def _usable_cpus() -> int | None:
    """TensorFlow's default intra-op pool (0 threads asked for): one thread per CPU the process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _gpu_memory_total(index: int) -> int | None:
    """The card's memory from NVML (TensorFlow does not say), or None without NVML."""
    from gpufly.profile.gpuwatch import open_nvml

    source = open_nvml()
    if source is None:
        return None
    try:
        return getattr(source.sample(index), "memory_total_bytes", None)
    finally:
        source.close()


def read_model_settings(settings: LoopSettings, model: Any) -> None:
    """The model's precision (its dtype policy: "mixed_bfloat16" computes in bfloat16 over float32 variables, as
    autocast does), loss scaling, XLA, and whether it has convolutions."""
    policy = getattr(model, "dtype_policy", None)
    variable = getattr(policy, "variable_dtype", None) or "float32"
    compute = getattr(policy, "compute_dtype", None) or variable
    settings.model_dtype = str(variable)
    settings.autocast = str(compute) if compute != variable else None
    settings.grad_scaler = "LossScale" in type(getattr(model, "optimizer", None)).__name__
    settings.compiled = getattr(model, "jit_compile", None) is True
    settings.has_conv = any("Conv" in type(layer).__name__ for layer in _layers(model))


def _layers(model: Any) -> list[Any]:
    try:
        return list(model._flatten_layers(include_self=False))
    except (AttributeError, TypeError):
        return list(getattr(model, "layers", []))


def describe_pipeline(iterator: Any) -> str | None:
    """A tf.data iterator's transformations, source first ("TensorSlice -> Map[py_function] -> Batch -> Prefetch"),
    or None for anything else. Read from tf.data's own objects (private attributes, hence the care)."""
    dataset = getattr(iterator, "_dataset", None)
    stages: list[str] = []
    while dataset is not None and len(stages) < 64:
        name = type(dataset).__name__.strip("_").removesuffix("Dataset")
        if name not in ("Options", "Variant", ""):
            stages.append(name + ("[py_function]" if _runs_python(dataset) else ""))
        dataset = getattr(dataset, "_input_dataset", None)
    return " -> ".join(reversed(stages)) or None


def _runs_python(dataset: Any) -> bool:
    """Whether a map stage's function calls back into Python (tf.py_function, tf.numpy_function)."""
    function = getattr(getattr(dataset, "_map_func", None), "function", None)
    graph = getattr(function, "graph", None)
    if graph is None:
        return False
    try:
        return any(op.type in PY_FUNCTION_OPS for op in graph.get_operations())
    except (AttributeError, TypeError, ValueError):
        return False


class TimedTrainFunction:
    """Stands in for ``model.train_function``: fetches the step's batches itself, timing the wait, then runs
    Keras's train function on them (``steps_per_execution`` batches a call, as Keras would).

    While the profiler is not active (after a crash left it in place) it passes the iterator straight through.
    """

    def __init__(self, function: Callable[[Any], Any], profiler: Profiler, per_call: int = 1) -> None:
        self.function = function
        self.profiler = profiler
        self.per_call = max(1, per_call)
        self.active = True
        self._pipeline_read = False

    def __call__(self, iterator: Any) -> Any:
        if not self.active:
            return self.function(iterator)
        steps, own = self.profiler.steps, self.profiler.own
        batches = self._fetch(iterator, steps, own)
        return self.function(batches)

    def _fetch(self, iterator: Any, steps: StepClock, own: OwnTime) -> list[Any]:
        clock = steps.clock
        started = clock()
        if not self._pipeline_read:
            self._pipeline_read = True
            self.profiler.data.settings.input_pipeline = describe_pipeline(iterator)
        batches: list[Any] = []
        waited = 0.0
        for _ in range(self.per_call):
            fetching = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                if not batches:
                    raise  # Keras ends the epoch here, as its own function would
                break
            finally:
                waited += clock() - fetching
            batches.append(batch)
        sizes = [batch_size_of(batch) for batch in batches]
        steps.fed(waited, None if None in sizes else sum(size or 0 for size in sizes))
        settings = self.profiler.data.settings
        if settings.batch_size is None:
            settings.batch_size = sizes[0]
        own.add(clock() - started - waited)
        return batches
