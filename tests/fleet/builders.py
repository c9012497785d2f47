"""Generated fleets: doctor facts and bench runs for N identical nodes, with one thing changed where a test asks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufly.bench import BenchResult, BenchRun, DeviceFacts, Timing
from gpufly.doctor import DriverFact, Facts, FrameworkFact, GpuFact

H100 = "NVIDIA H100 80GB HBM3"
GEMM_FLOP_PER_CALL = 2 * 8192**3
MEMORY_BYTES_PER_CALL = 2 * 2**30
FIGURES = {"gemm.bf16": ("gemm", "flops_per_s", "FLOP/s", 750e12, GEMM_FLOP_PER_CALL, "n=8192"),
           "memory.copy": ("memory", "bytes_per_s", "B/s", 2.9e12, MEMORY_BYTES_PER_CALL, "2.0 GiB"),
           "transfer.h2d.pinned": ("transfer", "bytes_per_s", "B/s", 55e9, 2**30, "1.0 GiB"),
           "launch.empty": ("launch", "seconds", "s", 4.5e-6, 1, "")}
"""name: (group, metric, unit, a healthy H100's figure, work per call, shape)."""


def gpu(index: int, **changes: Any) -> GpuFact:
    healthy = GpuFact(index=index, name=H100, compute_capability="9.0", memory_total_bytes=80 * 2**30,
                      pcie_gen_current=5, pcie_gen_max=5, pcie_width_current=16, pcie_width_max=16, mig_mode=False,
                      persistence_mode=True)
    return dataclasses.replace(healthy, **changes)


def facts(gpus: int = 2, driver: str = "550.54.15", torch: str = "2.5.1+cu124") -> Facts:
    return Facts(driver=DriverFact(found=True, version=driver, cuda_version="12.4", source="nvml"),
                 gpus=tuple(gpu(i) for i in range(gpus)),
                 frameworks=(FrameworkFact(name="torch", installed=True, version=torch, cuda_version="12.4",
                                           cudnn_version="9.1.0", nccl_version="2.21.5", gpu_available=True,
                                           device_count=gpus),),
                 collected_at="2026-12-03T12:00:00+00:00")


def timing(median_s: float, spread: float = 0.01) -> Timing:
    """Ten samples whose p10 and p90 lie ``spread`` either side of the median."""
    return Timing(median_s=median_s, min_s=median_s * (1 - 2 * spread), max_s=median_s * (1 + 2 * spread),
                  p10_s=median_s * (1 - spread), p90_s=median_s * (1 + spread), repeats=10, warmup=3)


def result(name: str, scale: float = 1.0, spread: float = 0.01, conditions: dict[str, Any] | None = None,
           interval: float | None = None, noise: str | None = None) -> BenchResult:
    """A figure ``scale`` times a healthy GPU's speed (0.8: 20% slow), with its timing to match; ``interval``
    gives it a 95% interval that far either side (as `gpufly bench` records), ``noise`` marks it noisy."""
    group, metric, unit, healthy, work, shape = FIGURES[name]
    if metric == "seconds":
        value = healthy / scale
        median_s = value
    else:
        value = healthy * scale
        median_s = work / value
    measured = timing(median_s, spread)
    if interval is not None:
        measured = dataclasses.replace(measured, ci_low_s=median_s * (1 - interval),
                                       ci_high_s=median_s * (1 + interval), ci_level=0.95)
    return BenchResult(name=name, group=group, metric=metric, value=value, unit=unit,
                       value_low=value * (1 - interval) if interval is not None else None,
                       value_high=value * (1 + interval) if interval is not None else None,
                       noisy=noise is not None, noise=noise,
                       params={"shape": shape, "dtype": "bf16"} if shape else {}, timing=measured,
                       conditions={"start": {"sm_clock_mhz": 1980, "temperature_c": 40, "load_1m": 0.1},
                                   "end": {"sm_clock_mhz": 1980, "temperature_c": 55, "clocks_event_reasons": [],
                                           **(conditions or {})}})


def run(index: int, results: list[BenchResult] | None = None, **device: Any) -> BenchRun:
    facts_of_device = DeviceFacts(kind="cuda", name=H100, index=index, driver_version="550.54.15",
                                  cuda_version="12.4", torch_version="2.5.1+cu124", power_limit_w=700.0,
                                  sm_clock_max_mhz=1980, memory_clock_max_mhz=2619)
    return BenchRun(device=dataclasses.replace(facts_of_device, **device), started_at="2026-12-03T12:01:00+00:00",
                    settings={"device": f"cuda:{index}", "quick": True, "only": []},
                    results=results if results is not None else [result(name) for name in FIGURES],
                    finished_at="2026-12-03T12:02:00+00:00")


Change = Callable[[str, Facts, list[BenchRun]], tuple[Facts, list[BenchRun]]]


def write_fleet(folder: Path, nodes: int = 4, gpus: int = 2, change: dict[str, Change] | None = None,
                facts_name: str = "{node}.facts.json", bench_name: str = "{node}.bench.cuda{index}.json") -> list[str]:
    """Save ``nodes`` identical nodes (node01...) into ``folder``; ``change[node]`` alters one node's files."""
    names = [f"node{i + 1:02d}" for i in range(nodes)]
    for name in names:
        node_facts, runs = facts(gpus), [run(index) for index in range(gpus)]
        if change and name in change:
            node_facts, runs = change[name](name, node_facts, runs)
        path = folder / facts_name.format(node=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        node_facts.save(path)
        for bench in runs:
            bench.save(folder / bench_name.format(node=name, index=bench.device.index))
    return names
