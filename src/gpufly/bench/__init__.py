"""Microbenchmarks: measure the ceilings that decide AI speed and set them beside the catalog's peaks.

The harness (``measure``) warms up, synchronizes around the clock, repeats and reports the median with its
interval; a figure whose interval is too wide is re-measured, then marked noisy with what else was running
(``measure_until_stable``, ``HostWatch``); GEMM ceilings are the best over a sweep of sizes (``sweep_sizes``).
Each benchmark declares its work per call (bench/work.py) so rates are work over time.
"""

from __future__ import annotations

from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.compare import Comparison, compare_runs
from gpufly.bench.conditions import HostWatch
from gpufly.bench.kernels import copy_bandwidth
from gpufly.bench.noise import MAX_ATTEMPTS, NOISE_LIMIT, Measured, measure_until_stable
from gpufly.bench.peaks import percent_of_peak
from gpufly.bench.results import SCHEMA_VERSION, BenchError, BenchResult, BenchRun, DeviceFacts, load_run
from gpufly.bench.run import GROUPS, open_device, parse_only, run_benchmarks, select
from gpufly.bench.sweep import SweepPoint, sweep_sizes
from gpufly.bench.timing import Timing, measure

__all__ = [
    "GROUPS",
    "MAX_ATTEMPTS",
    "NOISE_LIMIT",
    "SCHEMA_VERSION",
    "BenchError",
    "BenchResult",
    "BenchRun",
    "Benchmark",
    "Comparison",
    "DeviceFacts",
    "HostWatch",
    "Kernel",
    "Measured",
    "SweepPoint",
    "Timing",
    "Unsupported",
    "compare_runs",
    "copy_bandwidth",
    "load_run",
    "measure",
    "measure_until_stable",
    "open_device",
    "parse_only",
    "percent_of_peak",
    "run_benchmarks",
    "select",
    "sweep_sizes",
]
