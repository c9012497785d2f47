"""Microbenchmarks: measure the ceilings that decide AI speed and set them beside the catalog's peaks.

The harness (``measure``) warms up, synchronizes around the clock, repeats and reports the median and
spread; each benchmark declares its work per call (bench/work.py) so rates are work over time.
"""

from __future__ import annotations

from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.compare import Comparison, compare_runs
from gpufly.bench.peaks import percent_of_peak
from gpufly.bench.results import SCHEMA_VERSION, BenchError, BenchResult, BenchRun, DeviceFacts, load_run
from gpufly.bench.run import GROUPS, open_device, parse_only, run_benchmarks, select
from gpufly.bench.timing import Timing, measure

__all__ = [
    "GROUPS",
    "SCHEMA_VERSION",
    "BenchError",
    "BenchResult",
    "BenchRun",
    "Benchmark",
    "Comparison",
    "DeviceFacts",
    "Kernel",
    "Timing",
    "Unsupported",
    "compare_runs",
    "load_run",
    "measure",
    "open_device",
    "parse_only",
    "percent_of_peak",
    "run_benchmarks",
    "select",
]
