"""The diagnosis: pure rules over a ``ProfileData``, each with its thresholds in ``THRESHOLDS``.

Every finding says what was seen (with the numbers), why it matters, the change to make, and the
gain to expect where the measurements allow an estimate. Rules that need a GPU look at NVML samples
and the loop's settings, so they are tested on recorded measurements as well as live.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gpufly.profile.records import LoopSettings, ProfileData

MIB = 1024**2


@dataclass(frozen=True)
class Thresholds:
    """Where each rule fires. One place, so the rules and their tests agree."""

    input_bound_share: float = 0.20
    """Data wait above this share of step time: the loop waits for its input..."""
    input_bound_wait_s: float = 0.001
    """...and the median wait per batch at least this long. Below it the wait is the bare cost of handing over
    an in-memory batch, and worker processes cost about as much to pass a batch back (pickling, a queue round
    trip) as they would save: a tiny model over a TensorDataset measured 0.3 ms of 1.4 ms, and got slower with
    num_workers=2."""
    syncs_per_step: float = 1.0
    """At least this many host-device syncs per step on average."""
    memory_creep_mib: float = 64.0
    """Memory grown by more than this over the measured steps..."""
    memory_creep_correlation: float = 0.9
    """...steadily: the correlation of memory with the step number above this."""
    small_batch_memory_share: float = 0.5
    """Peak GPU memory under this share of the card, while..."""
    small_batch_utilization: float = 80.0
    """...GPU utilization is under this (%)."""
    launch_bound_kernel_us: float = 20.0
    """Median kernel shorter than this (µs)..."""
    launch_bound_kernels_per_step: float = 500.0
    """...and more kernels per step than this."""
    launch_bound_idle_share: float = 0.3
    """...and the GPU idle more than this share of the traced window."""
    h2d_share: float = 0.10
    """Host-to-device copies above this share of step time, made blocking."""
    low_utilization: float = 60.0
    """Median GPU utilization under this (%) with nothing else explaining it."""
    throttle_share: float = 0.2
    """A power or thermal slowdown active in more than this share of the NVML samples."""


THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    seen: str
    why: str
    change: str
    gain: str | None = None
    weight: float = 0.0
    """Where the finding ranks (0..1): findings are ordered by it, largest first. For some rules the measured share
    of the step, for others a priority."""
    explains: float | None = None
    """The measured share of the step the finding explains (0..1), where one was measured: what a bound on its gain,
    1 / (1 - explains), rests on. None where ``weight`` is only a priority."""


Rule = Callable[[ProfileData, Thresholds], Finding | None]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ms(x: float | None) -> str:
    return "N/A" if x is None else f"{1000 * x:.1f} ms"


def input_bound(data: ProfileData, t: Thresholds) -> Finding | None:
    share = data.share("data_wait_s")
    wait = data.median("data_wait_s")
    if share is None or share < t.input_bound_share or wait is None or wait < t.input_bound_wait_s:
        return None
    s = data.settings
    if s.framework == "keras":
        changes, loader = _tf_data_changes(s.input_pipeline), f"tf.data: {s.input_pipeline or 'not a tf.data input'}"
    else:
        changes, loader = _dataloader_changes(s), f"num_workers={s.num_workers}, pin_memory={s.pin_memory}"
    return Finding(
        "input_bound", "The loop waits for its input",
        f"{_pct(share)} of step time is spent waiting for the next batch "
        f"(median {_ms(wait)} of {_ms(data.median('wall_s'))} per step; {loader})",
        "while the loop waits, the device does nothing; no compute optimization helps until the input keeps up",
        "; ".join(changes),
        f"up to {1 / (1 - share):.1f}x if loading fully overlaps compute" if share < 0.99 else None,
        share, explains=share,
    )


def _dataloader_changes(s: LoopSettings) -> list[str]:
    changes = []
    if (s.num_workers or 0) == 0:
        changes.append("DataLoader(num_workers=4 or more) so batches are prepared in parallel")
    if s.pin_memory is False and s.device.startswith("cuda"):
        changes.append("pin_memory=True")
    if (s.num_workers or 0) > 0 and not s.persistent_workers:
        changes.append("persistent_workers=True")
    if (s.num_workers or 0) > 0:
        changes.append(f"prefetch_factor=4 (now {s.prefetch_factor})")
    changes.append("move decoding and augmentation out of __getitem__ (pre-decode, or batch it in collate_fn)")
    return changes


def _tf_data_changes(pipeline: str | None) -> list[str]:
    """The tf.data equivalents: parallel map calls and a prefetch are what num_workers and prefetch_factor are to a
    DataLoader; a py_function runs Python under the GIL, one element at a time whatever the parallelism."""
    stages = [stage.partition("[")[0] for stage in (pipeline or "").split(" -> ")]
    changes = []
    if "Map" in stages:
        changes.append("dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE) so the map runs in parallel")
    if "[py_function]" in (pipeline or ""):
        changes.append("rewrite the tf.py_function/numpy_function in TensorFlow ops (Python runs under the GIL)")
    if "Batch" in stages and any(stage.endswith("Map") for stage in stages[:stages.index("Batch")]):
        changes.append("batch before the map where its function allows it (one call per batch, not per element)")
    if stages[-1] != "Prefetch":
        changes.append("end the pipeline with .prefetch(tf.data.AUTOTUNE) so the next batch is made during the step")
    changes.append(".cache() after the expensive decode when the data fits in memory or on local disk")
    return changes


BOOL_SYNC_ADVICE = ("; bool(tensor) comes from `if tensor:` or `torch.isnan(loss)` checks, such as the Hugging Face "
                    "Trainer's NaN/Inf loss filter (turn it off with TrainingArguments(logging_nan_inf_filter=False))")
"""The Trainer checks every step's loss with `torch.isnan(loss) or torch.isinf(loss)`: two syncs no .item() advice
reaches."""


def sync_points(data: ProfileData, t: Thresholds) -> Finding | None:
    per_step = data.per_step("syncs")
    if per_step is None or per_step < t.syncs_per_step:
        return None
    counted = len(data.steps_for("syncs"))
    calls = ", ".join(f"{name} x{count}" for name, count in sorted(data.sync_calls.items(), key=lambda kv: -kv[1]))
    on_gpu = data.settings.device.startswith("cuda")
    gap = data.median("sync_gap_s")
    between = f"; median {_ms(gap)} of CPU work between syncs" if gap is not None else ""
    stalled = data.share("sync_wait_s") or 0.0
    if on_gpu:
        gain = (f"up to {1 / (1 - stalled):.2f}x if the host no longer waits: {_pct(stalled)} of the step is spent "
                "inside these calls" if 0 < stalled < 0.99 else "the stalls they cause on the GPU")
    else:
        gain = (f"little on this CPU run (the calls take {100 * stalled:.1f}% of the step); on a GPU, the time the "
                "host would wait in each")
    return Finding(
        "sync_points", "Host-device syncs in the loop",
        f"{per_step:.1f} sync calls per step over {counted} sampled steps ({calls}){between}",
        "each one makes the CPU wait until the GPU has finished all queued work, so the CPU cannot queue the "
        "next kernels ahead" + ("" if on_gpu else "; on this CPU run they are cheap, on a GPU each one stalls"),
        "keep losses and metrics as tensors and call .item() every N steps (or accumulate with "
        "loss.detach() and read once per log interval); drop print(tensor) and .cpu() from the step"
        + (BOOL_SYNC_ADVICE if "bool(tensor)" in data.sync_calls else ""),
        gain, 0.1 if not on_gpu else max(0.3, stalled), explains=stalled if on_gpu else None,
    )


def memory_creep(data: ProfileData, t: Thresholds) -> Finding | None:
    points = [(s.index, s.memory_bytes) for s in data.measured if s.memory_bytes is not None]
    if len(points) < 8:
        return None
    xs = [float(i) for i, _ in points]
    ys = [float(m) for _, m in points]
    if len(set(ys)) < 2:
        return None
    fit = statistics.linear_regression(xs, ys)
    correlation = statistics.correlation(xs, ys)
    measured = data.measured
    span = measured[-1].index - measured[0].index  # memory is read on the detailed steps; the trend spans them all
    growth = fit.slope * span
    if growth < t.memory_creep_mib * MIB or correlation < t.memory_creep_correlation:
        return None
    where = "GPU memory" if data.settings.device.startswith("cuda") else "process memory (RSS)"
    return Finding(
        "memory_creep", "Memory grows step over step",
        f"{where} grew {fit.slope / MIB:.2f} MiB per step, about {growth / MIB:.0f} MiB over the {span + 1} "
        f"measured steps (from {len(points)} readings, correlation {correlation:.2f})",
        "something keeps every step alive; the run will end out of memory, and each step holds more than it needs",
        "store loss.item() or loss.detach() (not the loss tensor, which keeps the whole graph) in lists and "
        "logs; wrap evaluation in torch.no_grad(); look for tensors appended to a list each step",
        "no speed gain by itself: the run no longer ends out of memory, and the memory freed allows a larger batch",
        0.5,
    )


def _gpu_medians(data: ProfileData) -> tuple[float | None, float | None]:
    util = [g.utilization_percent for g in data.gpu if g.utilization_percent is not None]
    memory = [g.memory_used_bytes for g in data.gpu if g.memory_used_bytes is not None]
    return (statistics.median(util) if util else None, max(memory) if memory else None)


def small_batch(data: ProfileData, t: Thresholds) -> Finding | None:
    s = data.settings
    if not s.device.startswith("cuda") or not s.gpu_memory_total_bytes:
        return None
    util, _ = _gpu_medians(data)
    peaks = [st.memory_bytes for st in data.measured if st.memory_bytes is not None]
    if not peaks or util is None:
        return None
    peak = max(peaks)
    share = peak / s.gpu_memory_total_bytes
    if share >= t.small_batch_memory_share or util >= t.small_batch_utilization:
        return None
    batch = s.batch_size or data.measured[0].batch_size
    fits = f"; about {int(batch * 0.9 * s.gpu_memory_total_bytes / peak)} would fit" if batch else ""
    where = " (model.fit(batch_size=...) or dataset.batch(...))" if s.framework == "keras" else ""
    return Finding(
        "small_batch", "Small batch, memory to spare",
        f"peak memory {peak / MIB:.0f} MiB is {_pct(share)} of the card, GPU utilization {util:.0f}%, "
        f"batch {batch or 'unknown'}",
        "a small batch launches small kernels that leave most of the GPU idle",
        f"raise the batch size{where} (scale the learning rate with it){fits}, or `gpufly fit` the model for the "
        "largest batch at your context length",
        "often 1.5-3x samples/s until utilization is high", 0.3,
    )


def fp32_on_tensor_cores(data: ProfileData, t: Thresholds) -> Finding | None:
    s = data.settings
    if not s.device.startswith("cuda") or not s.tensor_cores or s.autocast or s.model_dtype not in (None, "float32"):
        return None
    ampere = s.compute_capability is not None and s.compute_capability >= (8, 0)
    if s.framework == "keras":
        change = (f"keras.mixed_precision.set_global_policy('mixed_{'bfloat16' if ampere else 'float16'}') before "
                  "building the model (compile() adds the loss scaling float16 needs), with a float32 output layer")
        if ampere and not s.tf32_matmul:
            change += "; at least tf.config.experimental.enable_tensor_float_32_execution(True) (TF32 matmuls)"
    else:
        change = ("torch.autocast('cuda', dtype=torch.bfloat16) around the forward pass and the loss" if ampere else
                  "torch.autocast('cuda', dtype=torch.float16) with torch.amp.GradScaler('cuda')")
        if ampere and not s.tf32_matmul:
            change += "; at least torch.backends.cuda.matmul.allow_tf32 = True (TF32 matmuls)"
    return Finding(
        "fp32_tensor_cores", "fp32 on a GPU with tensor cores",
        f"the model runs in {s.model_dtype or 'float32'} without {_mixed(s)} on {s.gpu_name} "
        f"(compute capability {'.'.join(map(str, s.compute_capability or ()))}), TF32 matmul {s.tf32_matmul}",
        "tensor cores run fp16/bf16 (and TF32) matmuls many times faster than fp32, and halve activation memory",
        change, "typically 1.5-3x on matmul-heavy models", 0.4,
    )


def _mixed(s: LoopSettings) -> str:
    return "a mixed-precision policy" if s.framework == "keras" else "autocast"


def launch_bound(data: ProfileData, t: Thresholds) -> Finding | None:
    trace = data.trace
    if trace is None or trace.median_kernel_us is None or not data.settings.device.startswith("cuda"):
        return None
    idle = trace.idle_share
    if (trace.median_kernel_us > t.launch_bound_kernel_us or trace.kernels_per_step < t.launch_bound_kernels_per_step
            or idle is None or idle < t.launch_bound_idle_share):
        return None
    return Finding(
        "launch_bound", "Launch-bound: many tiny kernels",
        f"{trace.kernels_per_step:.0f} kernels per step, median {trace.median_kernel_us:.1f} µs each; the GPU was idle "
        f"{_pct(idle)} of the traced window",
        "each kernel launch costs the CPU several microseconds; when kernels are shorter than that, the GPU waits "
        "for the CPU",
        "torch.compile(model) to fuse kernels (mode='reduce-overhead' adds CUDA graphs when shapes are static), "
        "or capture the step with torch.cuda.graphs; a larger batch makes each kernel longer",
        f"up to {1 / (1 - idle):.1f}x if the idle time goes", idle,
    )


def blocking_copies(data: ProfileData, t: Thresholds) -> Finding | None:
    s = data.settings
    share = data.share("h2d_s")
    if not s.device.startswith("cuda") or share is None or share < t.h2d_share:
        return None
    if s.pin_memory and s.non_blocking_copies:
        return None
    return Finding(
        "blocking_copies", "Host-to-device copies are not overlapped",
        f"{_pct(share)} of step time is spent in .to(device)/.cuda() (pin_memory={s.pin_memory}, "
        f"non_blocking={s.non_blocking_copies})",
        "a copy from pageable memory blocks the CPU and cannot overlap with compute",
        "DataLoader(pin_memory=True) and batch.to(device, non_blocking=True)",
        f"up to {_pct(share)} of step time", share, explains=share,
    )


def throttling(data: ProfileData, t: Thresholds) -> Finding | None:
    if not data.gpu:
        return None
    slowed = [g for g in data.gpu if g.slowdown_reasons]
    share = len(slowed) / len(data.gpu)
    if share < t.throttle_share:
        return None
    reasons = sorted({r for g in slowed for r in g.slowdown_reasons})
    clocks = [g.sm_clock_mhz / g.sm_clock_max_mhz for g in slowed if g.sm_clock_mhz and g.sm_clock_max_mhz]
    clock = f", SM clock at {_pct(statistics.median(clocks))} of its maximum" if clocks else ""
    thermal = any("thermal" in r for r in reasons)
    ratio = statistics.median(clocks) if clocks else None
    gain = (f"up to {1 / ratio:.2f}x at full clocks" if ratio and ratio < 1 else
            "unknown: NVML gave no clock to compare with its maximum")
    return Finding(
        "throttling", "The GPU is throttling",
        f"{', '.join(reasons)} active in {_pct(share)} of {len(data.gpu)} NVML samples{clock}",
        "the card lowers its clocks to stay within its power or temperature limit, so it runs below its peak",
        ("improve cooling and airflow (check fans, dust, the case), or lower the clocks on purpose" if thermal else
         "check `nvidia-smi -q -d POWER` for a lowered power limit (nvidia-smi -pl raises it, within the card's "
         "maximum); at the card's own limit this is the ceiling, and fewer wasted FLOPs (AMP) is the way up"),
        gain, 0.2,
    )


def low_utilization(data: ProfileData, t: Thresholds, explained: bool) -> Finding | None:
    util, _ = _gpu_medians(data)
    if util is None or util >= t.low_utilization or explained:
        return None
    return Finding(
        "low_utilization", "Low GPU utilization, nothing else explaining it",
        f"median GPU utilization {util:.0f}% over {len(data.gpu)} NVML samples",
        "the GPU waits for something the other rules do not see: Python work in the step, logging, "
        "checkpointing, or another process",
        "run with --trace 5 for the kernel and idle breakdown; move per-step Python work (logging, metrics, "
        "checkpoints) out of the step or to every N steps",
        f"up to {100 / util:.1f}x if the GPU were kept busy (an upper bound)" if util > 0 else None, 0.2,
    )


RULES: tuple[Rule, ...] = (input_bound, sync_points, memory_creep, small_batch, fp32_on_tensor_cores, launch_bound,
                           blocking_copies, throttling)


def diagnose(data: ProfileData, thresholds: Thresholds = THRESHOLDS) -> list[Finding]:
    """All findings, the one that explains most of the step first."""
    findings = [f for rule in RULES if (f := rule(data, thresholds)) is not None]
    explains = {"input_bound", "sync_points", "small_batch", "launch_bound", "blocking_copies", "throttling"}
    low = low_utilization(data, thresholds, explained=any(f.rule in explains for f in findings))
    if low is not None:
        findings.append(low)
    return sorted(findings, key=lambda f: -f.weight)
