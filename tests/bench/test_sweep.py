"""Ceilings from a sweep: the best size of a fake kernel whose speed depends on size is found, measured again, and
a size whose call would take too long is never run."""

from __future__ import annotations

import pytest

from gpufly.bench.benchmark import Benchmark, Kernel
from gpufly.bench.run import measure_one
from gpufly.bench.sweep import sweep_sizes
from gpufly.bench.timing import measure
from tests.bench.fakes import FakeClock, FakeDevice, FakeHost

RATE_AT = {256: 50e9, 512: 120e9, 1024: 300e9, 2048: 220e9, 4096: 280e9}
"""FLOP/s of the fake matmul at each size: fastest at 1024 (it fits the cache), slower above."""


def _matmul(clock: FakeClock, built: list[int]):
    def build(n: int) -> Kernel:
        built.append(n)
        flops = 2.0 * n**3
        return Kernel(lambda: clock.advance(flops / RATE_AT[n]), flops, {"shape": f"n={n}"})

    return build


def test_the_sweep_keeps_the_size_with_the_best_median() -> None:
    clock, built = FakeClock(), []
    kernel, points = sweep_sizes(_matmul(clock, built), (4096, 256, 1024, 512, 2048),
                                 lambda k: measure(k.fn, warmup=1, repeats=3, clock=clock), max_call_s=10.0)
    assert kernel.params["shape"] == "n=1024"
    assert [p.size for p in points] == [256, 512, 1024, 2048, 4096] == built
    assert [round(p.value / 1e9) for p in points] == [50, 120, 300, 220, 280]


def test_the_sweep_stops_before_a_size_whose_call_would_take_too_long() -> None:
    clock, built = FakeClock(), []
    # 2048 takes 2 * 2048**3 / 220e9 = 78 ms a call; 4096 would take about 8 x that, over the 0.5 s limit.
    _, points = sweep_sizes(_matmul(clock, built), (256, 512, 1024, 2048, 4096),
                            lambda k: measure(k.fn, warmup=1, repeats=3, clock=clock), max_call_s=0.5)
    assert built == [256, 512, 1024, 2048] and points[-1].size == 2048


def test_a_swept_benchmark_reports_the_best_size_measured_again_with_its_sweep() -> None:
    device = FakeDevice(kind="cpu")
    built: list[int] = []
    benchmark = Benchmark("gemm.fp32", "gemm", "flops_per_s", _matmul(device.clock, built), warmup=1, repeats=9,
                          sizes=(256, 512, 1024, 2048, 4096), sweep_repeats=3, max_call_s=10.0)
    result = measure_one(device, benchmark, FakeHost())
    assert result.value == pytest.approx(300e9) and result.params["shape"] == "n=1024"
    assert result.timing.repeats == 9 and not result.noisy
    assert [p["size"] for p in result.params["sweep"]] == [256, 512, 1024, 2048, 4096]
    assert result.params["sizing"] == ("best median of 5 sizes (256-4096, 3 repeats each), measured again at "
                                       "that size")


def test_a_latency_cannot_be_swept() -> None:
    with pytest.raises(ValueError, match="highest rate"):
        Benchmark("launch.x", "launch", "seconds", lambda n: Kernel(lambda: None, 1), sizes=(1, 2))


def test_the_cpu_plan_sweeps_every_gemm_and_says_fp8_is_not_supported() -> None:
    pytest.importorskip("torch")
    from gpufly.bench.benchmark import Unsupported
    from gpufly.bench.cpu import QUICK_GEMM_SIZES, CpuDevice

    plan = {b.name: b for b in CpuDevice().plan(quick=True)}
    assert all(plan[f"gemm.{d}"].sizes == QUICK_GEMM_SIZES for d in ("fp32", "bf16", "fp16", "int8"))
    with pytest.raises(Unsupported, match="fp8 matmul needs fp8 tensor cores"):
        plan["gemm.fp8"].build(512)
