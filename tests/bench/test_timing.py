"""The harness measures: it synchronizes before each clock read, discards warm-up, takes medians."""

from __future__ import annotations

import pytest

from gpufly.bench.run import measure_one
from gpufly.bench.timing import calls_per_sample, measure, summarize
from tests.bench.fakes import AsyncKernel, FakeClock, FakeDevice, slow_benchmark


def test_a_fake_slow_kernel_gives_its_time() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=0.02)
    timing = measure(kernel, warmup=2, repeats=7, sync=kernel.sync, clock=clock)
    assert timing.median_s == pytest.approx(0.02)
    assert timing.repeats == 7 and timing.warmup == 2
    assert kernel.calls == 9


def test_without_sync_an_asynchronous_kernel_looks_free() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=0.02)
    assert measure(kernel, warmup=1, repeats=5, clock=clock).median_s == 0.0


def test_warmup_is_discarded() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=0.01, slow_s=1.0, slow_calls=3)
    timing = measure(kernel, warmup=3, repeats=5, sync=kernel.sync, clock=clock)
    assert timing.max_s == pytest.approx(0.01)
    assert len(timing.samples_s) == 5


def test_work_queued_before_the_timed_region_is_not_counted() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=0.01, slow_s=5.0, slow_calls=1)
    timing = measure(kernel, warmup=1, repeats=3, sync=kernel.sync, clock=clock)
    assert timing.median_s == pytest.approx(0.01)


def test_inner_calls_are_divided_out() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=1e-6)
    timing = measure(kernel, warmup=0, repeats=4, inner=1000, sync=kernel.sync, clock=clock)
    assert timing.median_s == pytest.approx(1e-6)
    assert timing.inner == 1000 and kernel.calls == 4000


def test_median_and_deciles_of_uneven_samples() -> None:
    timing = summarize([0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1], warmup=0)
    assert timing.median_s == pytest.approx(0.6)
    assert (timing.min_s, timing.max_s) == (0.1, 1.1)
    assert timing.p10_s == pytest.approx(0.2) and timing.p90_s == pytest.approx(1.0)
    assert timing.spread == pytest.approx(0.8 / 0.6)


def test_one_outlier_does_not_move_the_median() -> None:
    assert summarize([0.010, 0.011, 0.009, 0.010, 3.0], warmup=0).median_s == pytest.approx(0.010)


@pytest.mark.parametrize("kwargs", [{"repeats": 0}, {"inner": 0}, {"warmup": -1}])
def test_nonsense_counts_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        measure(lambda: None, **kwargs)


def test_calls_per_sample_fills_the_target() -> None:
    clock = FakeClock()
    kernel = AsyncKernel(clock, fast_s=2e-6)
    assert calls_per_sample(kernel, target_s=2e-3, sync=kernel.sync, clock=clock) == 1000
    assert calls_per_sample(kernel, target_s=2e-3, limit=50, sync=kernel.sync, clock=clock) == 50


def test_a_benchmark_on_a_fake_slow_kernel_reports_work_over_time() -> None:
    device = FakeDevice()
    result = measure_one(device, slow_benchmark(device, "gemm.fake", seconds=0.004, work=2e12))
    assert result.value == pytest.approx(5e14)
    assert result.unit == "FLOP/s"
    assert result.timing.median_s == pytest.approx(0.004)
    assert result.params["flop_per_call"] == 2e12
    assert result.conditions == {"start": {"sm_clock_mhz": 1980}, "end": {"sm_clock_mhz": 1980}}
    assert result.value_low == result.value_high == pytest.approx(5e14) and not result.noisy


def test_a_latency_benchmark_reports_seconds() -> None:
    device = FakeDevice()
    result = measure_one(device, slow_benchmark(device, "launch.fake", 5e-6, 1, metric="seconds", peak=None))
    assert result.value == pytest.approx(5e-6) and result.unit == "s"
    assert "flop_per_call" not in result.params
