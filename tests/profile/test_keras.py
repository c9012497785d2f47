"""``gpufly.keras.ProfilerCallback`` in real Keras 3 ``fit`` runs on TensorFlow (CPU), tiny models, few steps.

The fits run in one child process (this file run as a script): TensorFlow is a large import with its own thread
pools, and a tf.py_function still running when an interpreter exits can hang it, so the child writes what it
measured and leaves with ``os._exit``; the tests read the profiles back as a user would (``load_profile``).
Each loop is made dramatically what it is (a 40 ms sleep in the input of a 1 ms step, or a prefetched input to
steps of tens of milliseconds), so the tests assert the findings, never exact timings.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from gpufly.profile import GpuReading, ProfileData, diagnose, load_profile
from gpufly.profile.render import emit

STEPS_PER_EPOCH = 6
INPUT_BOUND_STEPS = 16
"""tf.data puts a prefetch after the map by itself (autotune); it fills while the first step compiles, and the loop
drains it in the next few."""


# -- the loops, as a user writes them (run in the child) ------------------------------------------------------


def _model(keras: Any, width: int = 16, depth: int = 1) -> Any:
    hidden = [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
    model = keras.Sequential([keras.Input((8,)), *hidden, keras.layers.Dense(1, dtype="float32")])
    model.compile(optimizer="adam", loss="mse")
    return model


def _arrays(n: int) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.random((n, 8), dtype="float32"), rng.random((n, 1), dtype="float32")


def input_bound_fit(tf: Any, keras: Any, save: Path) -> None:
    """A py_function that sleeps 40 ms per batch, no parallel map, no prefetch: the step waits for its input."""
    import time

    def slow_decode(x: Any, y: Any) -> tuple[Any, Any]:
        time.sleep(0.04)
        return x, y

    def decode(x: Any, y: Any) -> tuple[Any, Any]:
        x, y = tf.py_function(slow_decode, [x, y], [tf.float32, tf.float32])
        x.set_shape([None, 8])
        y.set_shape([None, 1])
        return x, y

    data = tf.data.Dataset.from_tensor_slices(_arrays(8 * INPUT_BOUND_STEPS)).batch(8).map(decode)
    callback = gpufly_keras().ProfilerCallback(warmup=2, report=False, save=save)
    model = _model(keras)
    model.fit(data, epochs=1, verbose=0, callbacks=[callback])
    assert type(model.train_function).__name__ != "TimedTrainFunction", "Keras's own function is back after fit"


def fast_fit_with_slow_validation(tf: Any, keras: Any, save: Path) -> None:
    """A cached, prefetched in-memory input feeding steps of tens of milliseconds, 2 epochs, and a validation set
    that takes 0.8 s each epoch."""
    import time

    def slow(x: Any, y: Any) -> tuple[Any, Any]:
        time.sleep(0.4)
        return x, y

    def slow_map(x: Any, y: Any) -> tuple[Any, Any]:
        x, y = tf.py_function(slow, [x, y], [tf.float32, tf.float32])
        x.set_shape([None, 8])
        y.set_shape([None, 1])
        return x, y

    train = tf.data.Dataset.from_tensor_slices(_arrays(256 * STEPS_PER_EPOCH)).batch(256).cache()
    train = train.prefetch(tf.data.AUTOTUNE)
    validation = tf.data.Dataset.from_tensor_slices(_arrays(64)).batch(32).map(slow_map)
    callback = gpufly_keras().ProfilerCallback(warmup=2, report=False, save=save)

    class ValidationClock(keras.callbacks.Callback):  # type: ignore[misc]
        """When each validation began and ended, and when each epoch's first step ended, on the profiler's clock
        (perf_counter). Listed after the profiler, its batch-end hook runs after the profiler closed the step."""

        def on_test_begin(self, logs: Any = None) -> None:
            clock["validation_began"].append(time.perf_counter())

        def on_test_end(self, logs: Any = None) -> None:
            clock["validation_ended"].append(time.perf_counter())

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 0:
                clock["first_step_ended"].append(time.perf_counter())

    clock: dict[str, list[float]] = {"validation_began": [], "validation_ended": [], "first_step_ended": []}
    _model(keras, width=1024, depth=3).fit(train, validation_data=validation, epochs=2, verbose=0,
                                           callbacks=[callback, ValidationClock()])
    save.with_suffix(".validation.json").write_text(json.dumps(clock))


def mixed_precision_fit(tf: Any, keras: Any, save: Path) -> None:
    """Written against tf.keras: NumPy arrays (Keras builds the tf.data input), a mixed_bfloat16 policy, 2 batches
    per execution."""
    keras = tf.keras
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = _model(keras)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.compile(optimizer="adam", loss="mse", steps_per_execution=2)
    x, y = _arrays(16 * STEPS_PER_EPOCH)
    callback = gpufly_keras().ProfilerCallback(warmup=1, report=False, save=save)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])


LOOPS = {"input_bound": input_bound_fit, "fast": fast_fit_with_slow_validation, "mixed": mixed_precision_fit}


def gpufly_keras() -> Any:
    import gpufly.keras

    return gpufly.keras


def unwritable_outputs(folder: Path) -> dict[str, str | None]:
    """What making the callback with a --html or --save path that cannot be written raises (its message), before any
    fit: it was accepted, the whole fit ran, and then fit raised at its end, losing the History."""
    from gpufly.errors import GpuflyError

    raised: dict[str, str | None] = {}
    for name, path in (("html", folder / "no_such_dir" / "x.html"), ("save", folder)):
        try:
            gpufly_keras().ProfilerCallback(report=False, **{name: path})
        except GpuflyError as exc:
            raised[name] = exc.message
        else:
            raised[name] = None
    return raised


def _child(folder: Path) -> None:
    """Run every loop, each saving its profile in ``folder``; then leave at once (see the module's docstring)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras  # type: ignore[import-untyped]
    import tensorflow as tf  # type: ignore[import-untyped]

    try:
        (folder / "unwritable.json").write_text(json.dumps(unwritable_outputs(folder)))
        for name, loop in LOOPS.items():
            loop(tf, keras, folder / f"{name}.json")
        (folder / "done.json").write_text(json.dumps(sorted(LOOPS)))
    except BaseException:
        traceback.print_exc()
        code = 1
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# -- the tests (in the parent) ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The folder of the loops' profiles, run once per test run: pytest-xdist workers share one folder, and the
    first to take its lock runs the child (TensorFlow twice at once would double the time on a 2-core machine)."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the run's folder, above each worker's own
    folder = root / "keras_profiles"
    with open(root / "keras_profiles.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done.json").exists():
            folder.mkdir(exist_ok=True)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
            done = subprocess.run([sys.executable, __file__, str(folder)], capture_output=True, text=True,
                                  timeout=600, env=env)
            assert done.returncode == 0 and (folder / "done.json").exists(), done.stderr[-4000:]
    return folder


@pytest.fixture(scope="module")
def profiles(keras_runs: Path) -> dict[str, ProfileData]:
    return {name: load_profile(keras_runs / f"{name}.json") for name in LOOPS}


def test_an_input_bound_tf_data_pipeline_is_found_with_tf_data_advice(profiles: dict[str, ProfileData]) -> None:
    data = profiles["input_bound"]
    assert len(data.steps) == INPUT_BOUND_STEPS and len(data.measured) == INPUT_BOUND_STEPS - 2
    assert {step.batch_size for step in data.steps} == {8}
    s = data.settings
    assert s.framework == "keras" and s.keras_version and s.tensorflow_version and s.torch_version is None
    assert s.input_pipeline == "TensorSlice -> Batch -> Map[py_function]"
    findings = {f.rule: f for f in diagnose(data)}
    assert "input_bound" in findings
    change = findings["input_bound"].change
    assert "num_parallel_calls=tf.data.AUTOTUNE" in change and ".prefetch(tf.data.AUTOTUNE)" in change
    assert "py_function" in change and "DataLoader" not in change
    assert "tf.data: TensorSlice -> Batch -> Map[py_function]" in findings["input_bound"].seen


def test_a_fed_loop_is_not_input_bound_and_validation_is_no_step(profiles: dict[str, ProfileData],
                                                                 keras_runs: Path) -> None:
    data = profiles["fast"]
    assert len(data.steps) == 2 * STEPS_PER_EPOCH
    # Fed from a cache through a prefetch, a step waits microseconds for its batch (about 2% of step time on a quiet
    # machine, so no input-bound finding); a busy machine can starve tf.data's prefetch thread for a while, so what
    # is asserted is the wait set against the input-bound loop's, whose input alone takes 40 ms a batch.
    starved = profiles["input_bound"].median("data_wait_s")
    assert starved is not None and data.median("data_wait_s") < starved / 4, (data.median("data_wait_s"), starved)
    assert data.share("data_wait_s") < profiles["input_bound"].share("data_wait_s") / 4
    assert data.settings.input_pipeline is not None and data.settings.input_pipeline.endswith("Prefetch")
    # The validation between the epochs (0.8 s of sleep at least) is in no step, even the second epoch's first: that
    # step began after the validation ended, so its wall time fits between the validation's end and the step's end,
    # both read on the profiler's clock. An ordering, not a race: it holds however slow the machine is.
    clock = json.loads((keras_runs / "fast.validation.json").read_text())
    began, ended = clock["validation_began"], clock["validation_ended"]
    assert len(began) == len(ended) == 2 and min(e - b for b, e in zip(began, ended, strict=True)) >= 0.8
    second_epoch_first_step_ended = clock["first_step_ended"][1]
    assert ended[0] < second_epoch_first_step_ended
    assert data.steps[STEPS_PER_EPOCH].wall_s <= second_epoch_first_step_ended - ended[0] + 1e-6
    assert data.overhead is not None and data.overhead.steps == 2 * STEPS_PER_EPOCH


def test_the_dtype_policy_is_read_as_mixed_precision(profiles: dict[str, ProfileData]) -> None:
    data = profiles["mixed"]
    s = data.settings
    assert s.model_dtype == "float32" and s.autocast == "bfloat16"
    assert profiles["input_bound"].settings.autocast is None
    # steps_per_execution=2: one step is one call of the train function, two batches of 16.
    assert len(data.steps) == STEPS_PER_EPOCH // 2 and {step.batch_size for step in data.steps} == {32}
    assert s.batch_size == 16


def _as_if_on_a_gpu(data: ProfileData) -> ProfileData:
    """The same measurements with the facts a run on an A100 adds (the GPU rules look at nothing else): a peak of
    200 MiB of 80 GiB, the GPU 30% busy."""
    s = data.settings
    s.device, s.gpu_name, s.compute_capability = "cuda:0", "NVIDIA A100-SXM4-80GB", (8, 0)
    s.gpu_memory_total_bytes = 80 * 1024**3
    for step in data.steps:
        step.memory_bytes = 200 * 1024**2
    data.gpu = [GpuReading(time=float(i), utilization_percent=30.0) for i in range(10)]
    return data


def test_small_batches_without_mixed_precision_get_keras_advice(profiles: dict[str, ProfileData]) -> None:
    findings = {f.rule: f for f in diagnose(_as_if_on_a_gpu(profiles["fast"]))}
    assert "keras.mixed_precision.set_global_policy('mixed_bfloat16')" in findings["fp32_tensor_cores"].change
    assert "mixed-precision policy" in findings["fp32_tensor_cores"].seen
    assert "model.fit(batch_size=...)" in findings["small_batch"].change
    assert "batch 256" in findings["small_batch"].seen
    mixed = {f.rule for f in diagnose(_as_if_on_a_gpu(profiles["mixed"]))}
    assert "fp32_tensor_cores" not in mixed and "small_batch" in mixed


def test_the_report_is_the_profilers_text_json_and_page(profiles: dict[str, ProfileData], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = profiles["input_bound"]
    emit(data, as_json=True, html=tmp_path / "keras.html")
    document = json.loads(capsys.readouterr().out)
    assert document["findings"][0]["rule"] == "input_bound"
    assert document["settings"]["framework"] == "keras" and document["breakdown"]["data wait"] > 0.5
    assert "The loop waits for its input" in (tmp_path / "keras.html").read_text()
    emit(data)
    assert "The loop waits for its input" in capsys.readouterr().out


def test_an_unwritable_html_or_save_path_is_refused_when_the_callback_is_made(keras_runs: Path,
                                                                             tmp_path: Path) -> None:
    """The check `gpufly profile` makes before it runs the script, made when the callback is made: before ``fit``."""
    from gpufly.errors import GpuflyError
    from gpufly.profile.keras_callback import check_outputs

    raised = json.loads((keras_runs / "unwritable.json").read_text())
    assert raised["html"] is not None and raised["html"].startswith("cannot write ProfilerCallback(html=...) ")
    assert raised["html"].endswith("no_such_dir is not a folder")
    assert raised["save"] is not None and raised["save"].endswith("is a folder")
    with pytest.raises(GpuflyError, match="is not a folder") as caught:
        check_outputs(html=tmp_path / "no_such_dir" / "x.html")
    assert caught.value.hint and "existing folder" in caught.value.hint
    check_outputs(html=tmp_path / "ok.html", save=tmp_path / "ok.json")
    assert list(tmp_path.iterdir()) == [], "the check leaves no file behind"


def test_importing_gpufly_keras_loads_neither_keras_nor_tensorflow() -> None:
    script = ("import sys, gpufly, gpufly.keras\n"
              "print(sorted(m for m in ('keras', 'tensorflow', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import gpufly.keras

    with pytest.raises(AttributeError, match="no attribute 'Profiler'"):
        gpufly.keras.Profiler  # noqa: B018


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
