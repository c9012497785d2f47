"""Noise is measured, shown and acted on: a figure whose repeats spread widely is measured again, then marked noisy
with what else was running; a steady one is measured once. Every clock here is fake."""

from __future__ import annotations

import pytest

from gpufly.bench.benchmark import Benchmark, Kernel
from gpufly.bench.noise import NOISE_LIMIT, causes, measure_until_stable, too_wide
from gpufly.bench.run import measure_one, run_benchmarks
from gpufly.bench.timing import median_ranks, summarize
from tests.bench.fakes import FakeDevice, FakeHost, SpreadKernel

STEADY = [0.0100, 0.0101, 0.0099, 0.0100, 0.0100, 0.0101, 0.0099, 0.0100, 0.0100]
WILD = [0.010, 0.030, 0.011, 0.025, 0.010, 0.040, 0.012, 0.020, 0.010]
BUSY_HOST = FakeHost(at_end={"load_average_1m": 1.9, "cpu_cores": 2,
                             "busy_processes": [{"pid": 123, "name": "python", "cpu_percent": 95.0}]})


def _scripted(device: FakeDevice, attempts: list[list[float]], name: str = "gemm.fp32") -> Benchmark:
    def build() -> Kernel:
        return Kernel(SpreadKernel(device.clock, attempts, warmup=1), 1e9, {"shape": "n=1000"})

    return Benchmark(name, "gemm", "flops_per_s", build, warmup=1, repeats=len(attempts[0]))


def test_the_median_interval_comes_from_order_statistics() -> None:
    timing = summarize([0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0], warmup=0)
    assert median_ranks(10)[:2] == (2, 9)
    assert (timing.ci_low_s, timing.ci_high_s) == (0.2, 0.9)
    assert timing.ci_level == pytest.approx(0.9785, abs=1e-4)
    assert median_ranks(20)[:2] == (6, 15) and median_ranks(20)[2] >= 0.95


def test_a_steady_figure_is_measured_once_and_not_noisy() -> None:
    device = FakeDevice(kind="cpu")
    result = measure_one(device, _scripted(device, [STEADY]), BUSY_HOST)
    assert result.attempts == 1 and not result.noisy and result.noise is None
    assert result.value == pytest.approx(1e11)
    assert result.value_low == pytest.approx(1e9 / 0.0101) and result.value_high == pytest.approx(1e9 / 0.0099)


def test_a_wide_figure_is_measured_again_and_kept_when_the_second_attempt_is_steady() -> None:
    device = FakeDevice(kind="cpu")
    result = measure_one(device, _scripted(device, [WILD, STEADY]), FakeHost())
    assert result.attempts == 2 and not result.noisy
    assert result.value == pytest.approx(1e11)


def test_a_figure_that_stays_wide_is_marked_noisy_with_the_reason() -> None:
    device = FakeDevice(kind="cpu")
    result = measure_one(device, _scripted(device, [WILD]), BUSY_HOST)
    assert result.attempts == 3 and result.noisy
    assert result.noise.startswith("interval ") and "after 3 attempts (limit 10%)" in result.noise
    assert "python (pid 123) at 95% CPU; load average 1.9 on 2 cores" in result.noise
    assert result.conditions["end"]["busy_processes"][0]["name"] == "python"
    assert result.to_dict()["noisy"] is True


def test_a_noisy_figure_without_a_visible_cause_says_none_was_seen() -> None:
    device = FakeDevice(kind="cpu")
    result = measure_one(device, _scripted(device, [WILD]), FakeHost(), max_attempts=2)
    assert result.attempts == 2 and result.noise.endswith("no other busy process seen")


def test_of_several_wide_attempts_the_narrowest_is_kept() -> None:
    wider = [0.010, 0.050, 0.011, 0.045, 0.010, 0.060, 0.012, 0.040, 0.010]
    timings = iter([summarize(samples, warmup=0) for samples in (wider, WILD, wider)])
    measured = measure_until_stable(lambda: next(timings), attempts=3)
    assert measured.noisy and len(measured.attempts) == 3
    assert measured.timing is measured.attempts[1]


def test_the_limit_and_attempts_are_the_runs_settings() -> None:
    device = FakeDevice(kind="cpu")
    run = run_benchmarks(device, [_scripted(device, [WILD])], host=FakeHost(), noise_limit=5.0, max_attempts=1)
    assert not run.results[0].noisy and run.results[0].attempts == 1
    assert run.settings["noise_limit"] == 5.0 and run.settings["max_attempts"] == 1
    assert too_wide(summarize(WILD, warmup=0), NOISE_LIMIT) and not too_wide(summarize(STEADY, warmup=0))


def test_a_process_busy_before_or_during_a_figure_is_named_once_at_its_higher_share() -> None:
    start = {"busy_processes": [{"pid": 7, "name": "make", "cpu_percent": 80.0},
                                {"pid": 8, "name": "cc1", "cpu_percent": 30.0}]}
    end = {"busy_processes": [{"pid": 7, "name": "make", "cpu_percent": 40.0}]}
    assert causes(start, end) == ["make (pid 7) at 80% CPU", "cc1 (pid 8) at 30% CPU"]


def test_a_reason_names_the_three_busiest_and_counts_the_rest() -> None:
    end = {"busy_processes": [{"pid": pid, "name": f"p{pid}", "cpu_percent": 10.0 + pid} for pid in range(1, 6)]}
    assert causes({}, end) == ["p5 (pid 5) at 15% CPU", "p4 (pid 4) at 14% CPU", "p3 (pid 3) at 13% CPU",
                               "2 more busy processes"]


def test_gpu_slowdowns_and_moving_clocks_are_named() -> None:
    start = {"sm_clock_mhz": 1980, "cpu_clock_mhz": 3000, "slowdown_reasons": []}
    end = {"sm_clock_mhz": 1410, "cpu_clock_mhz": 3000, "slowdown_reasons": ["hw_thermal_slowdown"]}
    assert causes(start, end) == ["GPU clocks held back: hw_thermal_slowdown", "GPU SM clock 1,980 -> 1,410 MHz"]


def test_a_saved_run_keeps_intervals_noise_and_conditions(tmp_path) -> None:
    from gpufly.bench.results import load_run

    device = FakeDevice(kind="cpu")
    save = tmp_path / "run.json"
    run = run_benchmarks(device, [_scripted(device, [WILD], "gemm.a"), _scripted(device, [STEADY], "gemm.b")],
                         host=BUSY_HOST, save=save)
    loaded = load_run(save)
    assert loaded.to_dict() == run.to_dict()
    assert [(r.noisy, r.attempts) for r in loaded.results] == [(True, 3), (False, 1)]
    assert loaded.results[0].conditions["end"]["busy_processes"][0]["pid"] == 123
