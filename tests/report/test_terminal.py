"""The terminal report, rendered at a fixed width without colour, as a person reads it."""

from __future__ import annotations

from rich.console import Console

from gpufly.cli.report import render_report
from gpufly.report import Report, compose

from .machines import h100_bench, no_driver, scenario, two_gpus


def rendered(report: Report, width: int = 140) -> str:
    out = Console(width=width, record=True, color_system=None)
    render_report(report, out)
    return out.export_text()


def test_a_gpu_machine_reads_section_by_section() -> None:
    text = rendered(compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False,
                            bench=h100_bench(), bench_source="bench.json"))
    order = ["This machine", "On the ladder: H100 SXM: #", "On the ladder: A100 80GB SXM: #", "Set-up: 1 failed",
             "What it reaches:", "What fits and how fast on H100 SXM", "What to do next"]
    positions = [text.index(heading) for heading in order]
    assert positions == sorted(positions)
    assert "> H100 SXM" in text, "this GPU is marked on its ladder"
    assert "fail: PyTorch 2.5.1+cpu is a CPU-only build" in text
    assert "PyTorch for this machine: pip install torch" in text
    assert "gemm.bf16" in text and "640-660 TFLOP/s" in text and "66%" in text
    assert "interval: 98% interval of the median" in text
    assert "1. PyTorch 2.5.1+cpu is a CPU-only build" in text and "[unblocks the GPU stack]" in text


def test_a_machine_without_a_gpu_says_why_and_what_to_get() -> None:
    text = rendered(compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False))
    assert "no NVIDIA GPU: NVML library not found" in text
    assert "On the ladder" not in text
    assert "No catalog GPU here: the fastest to get within $2,000" in text
    assert "What it reaches: not measured (`gpufly report --bench`" in text


def test_a_budget_on_a_gpu_machine_adds_gpus_to_get() -> None:
    text = rendered(compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False, budget_usd=5000))
    assert "What fits and how fast on H100 SXM" in text
    assert "GPUs to get within $5,000" in text and "No catalog GPU here" not in text
