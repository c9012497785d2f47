"""Predict from what a card measured (`gpufly bench --save`) instead of its datasheet.

The engines' efficiencies (estimate/engines.py) are shares of datasheet peaks, fitted on healthy
cards. A bench run says how this card compares with a healthy one: a card that reaches the typical
share of its datasheet keeps its figures, a throttled one (a low power limit, a narrow link, a hot
case) is scaled down by what it lacks. So a measured ceiling replaces a datasheet figure as
``measured / typical share``, never above the datasheet: a card that measures more than the typical share is
healthy, and its datasheet is what the efficiencies were fitted against. The typical GEMM share is the card's own
measured matmul ceiling where one is published (data/matmul_ceilings.json: an A100 SXM reaches 0.869 of its bf16
rate), else TYPICAL_GEMM_SHARE.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpufly.bench.results import BenchRun
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError

TYPICAL_GEMM_SHARE = 0.75
"""Share of the dense tensor (or FP32) rate a large square GEMM reaches on a healthy card with
cuBLAS (NVIDIA's own GEMM results on A100/H100 land between 0.7 and 0.85 of peak)."""
TYPICAL_COPY_SHARE = 0.85
"""Share of datasheet bandwidth a large device-to-device copy reaches (HBM and GDDR alike)."""
RATE_BENCHMARKS = {
    "fp32_tflops": "gemm.fp32",
    "tf32_tensor_tflops": "gemm.tf32",
    "fp16_tensor_tflops": "gemm.fp16",
    "bf16_tensor_tflops": "gemm.bf16",
    "fp8_tensor_tflops": "gemm.fp8",
}


def calibrated_gpu(gpu: GpuSpec, run: BenchRun) -> tuple[GpuSpec, list[str]]:
    """``gpu`` with its rates and bandwidth replaced by the run's measured ceilings, and what changed."""
    if run.device.kind == "cpu":
        raise GpuflyError("these bench results were measured on a CPU", hint="calibrate with a run on the GPU: "
                          "gpufly bench --device cuda:0 --save results.json")
    if run.device.catalog_id and run.device.catalog_id != gpu.id:
        raise GpuflyError(f"the bench results are for the {run.device.name}, not the {gpu.name}",
                          hint=f"--gpu {run.device.catalog_id} predicts for the card measured; for the {gpu.name}, "
                               "pass results measured on it")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    gemm_share = typical_gemm_share(gpu)
    for field, name in RATE_BENCHMARKS.items():
        result = run.result(name)
        if result is not None and result.value > 0:
            changes[field], note = _scaled(getattr(gpu, field), result.value / 1e12, gemm_share, "TFLOPS")
            notes.append(f"{field}: {note}")
    copy = run.result("memory.copy")
    if copy is not None and copy.value > 0:
        changes["memory_bandwidth_gbps"], note = _scaled(gpu.memory_bandwidth_gbps, copy.value / 1e9,
                                                         TYPICAL_COPY_SHARE, "GB/s")
        notes.append(f"memory_bandwidth_gbps: {note}")
    if not changes:
        raise GpuflyError("the bench results hold no GEMM or memory figure to calibrate with",
                          hint="run gpufly bench --only gemm,memory --save results.json")
    return dataclasses.replace(gpu, **changes), notes


def typical_gemm_share(gpu: GpuSpec) -> float:
    """The share of its datasheet rate a healthy ``gpu``'s best GEMM reaches: its published matmul ceiling
    (data/matmul_ceilings.json, measured per card) where there is one, else TYPICAL_GEMM_SHARE."""
    from gpufly.estimate.speed import measured_matmul_share

    return measured_matmul_share(gpu) or TYPICAL_GEMM_SHARE


def _scaled(datasheet: float | None, measured: float, share: float, unit: str) -> tuple[float, str]:
    """The figure a measurement stands for (``measured / share``, capped at ``datasheet``), and the note saying so."""
    implied = measured / share
    shown = f"{datasheet or 0:g} -> "
    how = f"measured {measured:,.1f} {unit} / {share:g}"
    if datasheet is not None and implied >= datasheet:
        return datasheet, f"{shown}{datasheet:g} ({how} = {implied:,.1f}: at or above a healthy card's share, the " \
                          "datasheet is kept)"
    return implied, f"{shown}{implied:,.1f} ({how})"
