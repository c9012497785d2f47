"""What a user reads: figures in their display units, beside peaks where the catalog has them."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpufly.bench.results import BenchError, BenchRun, DeviceFacts
from gpufly.bench.run import measure_one
from gpufly.cli.bench import format_value, render_run
from tests.bench.fakes import FakeDevice, slow_benchmark


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (1.082e11, "FLOP/s", "108.2 GFLOP/s"), (7.5e14, "FLOP/s", "750.0 TFLOP/s"), (1.5e15, "OP/s", "1,500 TOP/s"),
    (4.812e12, "B/s", "4,812 GB/s"), (2.5e10, "B/s", "25.0 GB/s"), (7.25e-6, "s", "7.25 µs"),
    (0.0123, "s", "12.3 ms"), (3.0, "s", "3.00 s"), (None, "B/s", "—"),
])
def test_values_in_display_units(value, unit, shown) -> None:
    assert format_value(value, unit) == shown


def _text(run: BenchRun) -> str:
    out = Console(width=160, color_system=None, record=True, file=io.StringIO())
    render_run(run, out)
    return out.export_text()


def test_a_gpu_run_shows_percent_of_peak(catalog) -> None:
    device = FakeDevice(spec=catalog.get("H100 SXM"))
    work = device.spec.bf16_tensor_tflops * 1e12 * 0.01 * 0.62
    result = measure_one(device, slow_benchmark(device, "gemm.bf16", 0.01, work))
    run = BenchRun(DeviceFacts(kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_id="h100-sxm", driver_version="550",
                               cuda_version="12.4", sm_clock_max_mhz=1980, power_limit_w=700.0),
                   "2026-01-01T00:00:00+00:00", results=[result],
                   errors=[BenchError("gemm.fp8", "gemm", "out of memory: tried to allocate 2 GiB")])
    text = _text(run)
    row = next(line for line in text.splitlines() if "gemm.bf16" in line)
    assert "613.4 TFLOP/s" in row and "989.4 TFLOP/s" in row and "62%" in row
    assert "driver 550, CUDA 12.4, SM 1980 MHz max, 700 W limit" in text
    assert "Not measured" in text and "out of memory" in text


def test_a_cpu_run_says_why_it_has_no_peaks() -> None:
    device = FakeDevice(kind="cpu")
    run = BenchRun(DeviceFacts(kind="cpu", name="AMD EPYC", cpu_model="AMD EPYC", cpu_threads=2),
                   "2026-01-01T00:00:00+00:00", results=[measure_one(device, slow_benchmark(device, "gemm.fp32", 0.01,
                                                                                           1e9, peak="fp32"))])
    text = _text(run)
    assert "% of peak" not in text and "the catalog has no CPUs" in text
    assert "100.0 GFLOP/s" in text and "CPU AMD EPYC, 2 threads" in text
