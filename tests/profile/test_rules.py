"""Each rule on recorded measurements: it fires past its threshold, stays quiet below it."""

from __future__ import annotations

from dataclasses import replace

from gpufly.profile.records import GpuReading, LoopSettings, ProfileData, StepRecord, TraceSummary
from gpufly.profile.rules import THRESHOLDS, diagnose

GIB = 1024**3
H100 = LoopSettings(device="cuda:0", gpu_name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                    gpu_memory_total_bytes=80 * GIB, model_dtype="bfloat16", autocast="bfloat16", batch_size=64,
                    num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=2, tf32_matmul=True,
                    non_blocking_copies=True)


def _run(steps: int = 20, wall: float = 0.1, wait: float = 0.0, syncs: int = 0, memory: int | None = 60 * GIB,
         h2d: float = 0.0, settings: LoopSettings = H100, util: float | None = 95.0,
         reasons: list[str] | None = None, trace: TraceSummary | None = None) -> ProfileData:
    records = [StepRecord(index=i, wall_s=wall, data_wait_s=wait, syncs=syncs, memory_bytes=memory, h2d_s=h2d,
                          batch_size=settings.batch_size, warmup=i < 3) for i in range(steps)]
    gpu = [GpuReading(time=float(i), utilization_percent=util, memory_used_bytes=memory, power_w=500.0,
                      power_limit_w=700.0, sm_clock_mhz=1400.0, sm_clock_max_mhz=1980.0,
                      slowdown_reasons=list(reasons or [])) for i in range(10)] if util is not None else []
    return ProfileData(steps=records, settings=settings, gpu=gpu, trace=trace,
                       sync_calls={".item()": syncs * steps} if syncs else {})


def _rules(data: ProfileData) -> list[str]:
    return [f.rule for f in diagnose(data)]


def test_a_healthy_gpu_run_has_no_finding() -> None:
    assert _rules(_run()) == []


def test_input_bound_fires_past_its_share_and_says_by_how_much() -> None:
    below = THRESHOLDS.input_bound_share * 0.9
    assert "input_bound" not in _rules(_run(wait=0.1 * below))
    short = THRESHOLDS.input_bound_wait_s * 0.9
    assert "input_bound" not in _rules(_run(wall=2 * short, wait=short)), "half the step, but under the floor"
    finding = diagnose(_run(wait=0.05, util=40.0))[0]
    assert finding.rule == "input_bound" and "50%" in finding.seen
    assert finding.gain == "up to 2.0x if loading fully overlaps compute"
    assert "low_utilization" not in _rules(_run(wait=0.05, util=40.0)), "the input explains the low utilization"


def test_fp32_on_tensor_cores_suggests_bf16_on_ampere_and_fp16_with_a_scaler_on_volta() -> None:
    fp32 = replace(H100, model_dtype="float32", autocast=None, tf32_matmul=False)
    finding = next(f for f in diagnose(_run(settings=fp32)) if f.rule == "fp32_tensor_cores")
    assert "bfloat16" in finding.change and "allow_tf32" in finding.change
    v100 = replace(fp32, gpu_name="Tesla V100", compute_capability=(7, 0))
    change = next(f for f in diagnose(_run(settings=v100)) if f.rule == "fp32_tensor_cores").change
    assert "float16" in change and "GradScaler" in change
    pascal = replace(fp32, compute_capability=(6, 1))
    assert "fp32_tensor_cores" not in _rules(_run(settings=pascal)), "no tensor cores, no advice"
    assert "fp32_tensor_cores" not in _rules(_run(settings=replace(fp32, device="cpu"))), "not on a CPU run"


def test_small_batch_needs_both_spare_memory_and_low_utilization() -> None:
    finding = next(f for f in diagnose(_run(memory=8 * GIB, util=45.0)) if f.rule == "small_batch")
    assert "10%" in finding.seen and "about 576 would fit" in finding.change
    assert "small_batch" not in _rules(_run(memory=8 * GIB, util=95.0))
    assert "small_batch" not in _rules(_run(memory=60 * GIB, util=45.0))


def test_launch_bound_reads_the_trace() -> None:
    tiny = TraceSummary(steps=5, window_s=0.5, device_busy_s=0.1, kernels=5000, median_kernel_us=6.0)
    finding = next(f for f in diagnose(_run(util=50.0, trace=tiny)) if f.rule == "launch_bound")
    assert "1000 kernels per step" in finding.seen and "torch.compile" in finding.change
    busy = replace(tiny, device_busy_s=0.48)
    assert "launch_bound" not in _rules(_run(trace=busy))
    long_kernels = replace(tiny, median_kernel_us=300.0)
    assert "launch_bound" not in _rules(_run(trace=long_kernels))


def test_blocking_copies_fire_without_pinned_memory() -> None:
    unpinned = replace(H100, pin_memory=False, non_blocking_copies=False)
    assert "blocking_copies" in _rules(_run(h2d=0.02, settings=unpinned))
    assert "blocking_copies" not in _rules(_run(h2d=0.02)), "pinned and non_blocking: overlapped"
    assert "blocking_copies" not in _rules(_run(h2d=0.005, settings=unpinned)), "5% is below the threshold"


def test_throttling_names_the_reason_and_the_clock() -> None:
    finding = next(f for f in diagnose(_run(reasons=["sw_power_cap"])) if f.rule == "throttling")
    assert "sw_power_cap active in 100% of 10 NVML samples" in finding.seen and "71%" in finding.seen
    thermal = next(f for f in diagnose(_run(reasons=["hw_thermal_slowdown"])) if f.rule == "throttling")
    assert "cooling" in thermal.change


def test_throttling_stays_quiet_below_its_share_of_samples() -> None:
    data = _run(reasons=["sw_power_cap"])
    slowed = int(THRESHOLDS.throttle_share * len(data.gpu)) - 1  # just under the share (1 of 10)
    for reading in data.gpu[slowed:]:
        reading.slowdown_reasons = []
    assert "throttling" not in _rules(data)
    for reading in data.gpu[: slowed + 2]:  # 3 of 10: past it
        reading.slowdown_reasons = ["hw_thermal_slowdown"]
    assert "throttling" in _rules(data)
    assert "throttling" not in _rules(_run(util=None)), "no NVML samples, no throttling claim"


def test_sync_points_fire_from_one_per_step_and_name_the_calls() -> None:
    assert "sync_points" not in _rules(_run(syncs=0))
    finding = next(f for f in diagnose(_run(syncs=2)) if f.rule == "sync_points")
    assert finding.seen.startswith("2.0 sync calls per step over 17 sampled steps (.item() x40)")
    assert finding.gain, "every finding says what it is worth"
    assert "on a GPU each one stalls" not in finding.why, "a GPU run: the stall is real, not a CPU caveat"
    cpu = next(f for f in diagnose(_run(syncs=1, settings=replace(H100, device="cpu"), util=None))
               if f.rule == "sync_points")
    assert "on a GPU each one stalls" in cpu.why and cpu.weight < finding.weight
    sparse = _run(syncs=0)
    for step in sparse.steps[::2]:
        step.syncs = 1  # every other step: 0.5 per step on average
    assert "sync_points" not in _rules(sparse)


def test_bool_syncs_point_at_the_check_that_makes_them() -> None:
    plain = next(f for f in diagnose(_run(syncs=2)) if f.rule == "sync_points")
    assert "logging_nan_inf_filter" not in plain.change
    trainer = _run(syncs=2)
    trainer.sync_calls = {"bool(tensor)": 40}
    finding = next(f for f in diagnose(trainer) if f.rule == "sync_points")
    assert "logging_nan_inf_filter=False" in finding.change


def test_low_utilization_only_when_nothing_else_explains_it() -> None:
    assert _rules(_run(util=30.0)) == ["low_utilization"]
    assert "low_utilization" not in _rules(_run(util=30.0, syncs=4))


def test_memory_creep_needs_steady_growth_past_the_threshold() -> None:
    data = _run()
    for step in data.steps:
        step.memory_bytes = 10 * GIB + step.index * 8 * 1024**2
    assert "memory_creep" in _rules(data)
    noisy = _run()
    for step in noisy.steps:
        step.memory_bytes = 10 * GIB + (step.index % 2) * 512 * 1024**2  # up and down, no trend
    assert "memory_creep" not in _rules(noisy)
    slow = _run()
    for step in slow.steps:  # steady, but 17 measured steps x 2 MiB = 34 MiB, under the threshold
        step.memory_bytes = 10 * GIB + step.index * 2 * 1024**2
    assert THRESHOLDS.memory_creep_mib > 17 * 2
    assert "memory_creep" not in _rules(slow)
    short = _run(steps=10)
    for step in short.steps:  # fast growth, but 7 measured steps are too few to call a trend
        step.memory_bytes = 10 * GIB + step.index * 64 * 1024**2
    assert "memory_creep" not in _rules(short)


def test_findings_come_largest_first_and_round_trip_through_json() -> None:
    data = _run(wait=0.06, syncs=3, util=30.0)
    assert _rules(data)[0] == "input_bound"
    again = ProfileData.from_dict(data.to_dict())
    assert again == data and _rules(again) == _rules(data)
