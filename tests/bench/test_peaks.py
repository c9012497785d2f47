"""Datasheet peaks from the catalog and the percent-of-peak arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufly.bench.peaks import memory_peak, pcie_peak, peak_for, percent_of_peak, rate_peak
from gpufly.bench.run import measure_one
from tests.bench.fakes import FakeDevice, slow_benchmark


def test_matmul_peaks_come_from_the_catalog_in_flops(catalog) -> None:
    h100 = catalog.get("H100 SXM")
    assert rate_peak(h100, "bf16") == pytest.approx(h100.bf16_tensor_tflops * 1e12)
    assert rate_peak(h100, "fp32") == pytest.approx(h100.fp32_tflops * 1e12)
    assert rate_peak(h100, "int8") == pytest.approx(h100.int8_tensor_tops * 1e12)
    assert rate_peak(h100, "fp64") is None


def test_bandwidth_peaks(catalog) -> None:
    h100 = catalog.get("H100 SXM")
    assert memory_peak(h100) == pytest.approx(h100.memory_bandwidth_gbps * 1e9)
    assert pcie_peak(replace(h100, pcie_gen=5, pcie_lanes=16)) == pytest.approx(3.938e9 * 16)
    assert pcie_peak(replace(h100, pcie_gen=None)) is None


def test_a_missing_figure_stays_missing(catalog) -> None:
    card = replace(catalog.get("H100 SXM"), fp8_tensor_tflops=None)
    assert peak_for(card, "fp8") == (None, None)
    assert peak_for(None, "bf16") == (None, None)
    assert peak_for(card, None) == (None, None)


def test_peak_names_its_source(catalog) -> None:
    peak, source = peak_for(catalog.get("H100 SXM"), "bf16")
    assert peak and source == "h100-sxm: bf16_tensor_tflops"


@pytest.mark.parametrize(("value", "peak", "expected"), [
    (500e12, 1000e12, 50.0), (3.0e12, 3.35e12, 3.0 / 3.35 * 100),
    (1.0, None, None), (None, 1.0, None), (1.0, 0.0, None),
])
def test_percent_of_peak(value, peak, expected) -> None:
    result = percent_of_peak(value, peak)
    assert result == (pytest.approx(expected) if expected is not None else None)


def test_a_measured_rate_is_set_beside_its_peak(catalog) -> None:
    device = FakeDevice(spec=catalog.get("H100 SXM"))
    half_peak_work = device.spec.bf16_tensor_tflops * 1e12 * 0.01 / 2
    result = measure_one(device, slow_benchmark(device, "gemm.bf16", 0.01, half_peak_work))
    assert result.percent_of_peak == pytest.approx(50.0)
    assert result.peak_source == "h100-sxm: bf16_tensor_tflops"


def test_a_cpu_has_no_peak() -> None:
    device = FakeDevice(spec=None, kind="cpu")
    result = measure_one(device, slow_benchmark(device, "gemm.fp32", 0.01, 1e9, peak="fp32"))
    assert result.peak is None and result.percent_of_peak is None
