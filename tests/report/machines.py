"""Recorded machines for the report's tests: a two-GPU host through the fake NVML, a host without a driver, the
doctor's recorded scenarios, and a bench run of an H100 with peaks and intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml

from gpufly.bench import BenchResult, BenchRun, DeviceFacts, Timing
from gpufly.doctor import Facts, facts_from_dict
from gpufly.hw import Nvml
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.hw.host import HostFacts
from gpufly.report import MachineReport, probe_machine
from tests.fakes.nvml import FIXTURES, fake_nvml

HOST = HostFacts(os="Debian GNU/Linux 12 (bookworm)", kernel="Linux 6.1.0", machine="x86_64",
                 python="3.11.7", cpu_model="AMD EPYC 9454 48-Core Processor", cpu_physical_cores=48,
                 cpu_logical_cores=96, memory_total_bytes=512 * 2**30, memory_available_bytes=480 * 2**30)


def two_gpus() -> MachineReport:
    """An H100 SXM and an A100 80GB SXM on driver 550."""
    return probe_machine(Nvml(fake_nvml("nvml_two_gpus.json")), host=HOST)


def no_driver() -> MachineReport:
    return probe_machine(Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)), host=HOST)


def scenario(name: str) -> Facts:
    """The facts of a recorded doctor scenario (tests/fixtures/doctor/scenarios/NAME.json)."""
    path = FIXTURES / "doctor" / "scenarios" / f"{name}.json"
    return facts_from_dict(json.loads(path.read_text())["facts"], where=str(path))


def _timing(median_s: float) -> Timing:
    return Timing(median_s=median_s, min_s=median_s * 0.97, max_s=median_s * 1.1, p10_s=median_s * 0.98,
                  p90_s=median_s * 1.05, repeats=10, warmup=3, ci_low_s=median_s * 0.99, ci_high_s=median_s * 1.02,
                  ci_level=0.98)


def h100_bench() -> BenchRun:
    """A bench run of an H100 SXM: bf16 matmul at 66% of its 989 TFLOPS, memory copy at 30% of 3,350 GB/s (low
    enough to be an action), a launch latency without a peak; each with the interval of its median."""
    device = DeviceFacts(kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_id="h100-sxm", driver_version="550.54.15",
                         cuda_version="12.4", torch_version="2.5.1+cu124")
    results = [
        BenchResult("gemm.bf16", "gemm", "flops_per_s", 653e12, "FLOP/s", {"shape": "8192^3"}, _timing(1.68e-3),
                    peak=989e12, peak_source="catalog h100-sxm bf16_tensor_tflops", percent_of_peak=66.0,
                    value_low=640e12, value_high=660e12),
        BenchResult("memory.copy", "memory", "bytes_per_s", 1005e9, "B/s", {}, _timing(2.1e-3), peak=3350e9,
                    peak_source="catalog h100-sxm memory_bandwidth_gbps", percent_of_peak=30.0, value_low=990e9,
                    value_high=1010e9),
        BenchResult("launch.op_dispatch", "launch", "seconds", 6.5e-6, "s", {}, _timing(6.5e-6), value_low=6.3e-6,
                    value_high=6.9e-6),
    ]
    return BenchRun(device=device, started_at="2026-01-01T00:00:00+00:00", settings={"quick": True},
                    results=results)


def save(run: BenchRun, folder: Path) -> Path:
    path = folder / "bench.json"
    run.save(path)
    return path
