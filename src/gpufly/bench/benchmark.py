"""What one benchmark declares: its name and group, what it measures, and how to build its kernel."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

METRICS = {"flops_per_s": "FLOP/s", "ops_per_s": "OP/s", "bytes_per_s": "B/s", "seconds": "s"}
"""Each metric and its unit. Rates divide the work per call by the median seconds per call;
latencies are the median seconds per call."""


@dataclass
class Kernel:
    """A built benchmark: the call to time, the work each call does, and the sizes it settled on."""

    fn: Callable[[], object]
    work: float
    params: dict[str, Any] = field(default_factory=dict)
    inner: int = 1
    note: str | None = None


@contextlib.contextmanager
def _unchanged() -> Iterator[None]:
    yield


@dataclass(frozen=True)
class Benchmark:
    """One figure to measure.

    ``build`` allocates random inputs and returns the Kernel; with ``sizes`` it takes the size, and the figure is
    the best over a sweep of those sizes (bench/sweep.py: ``sweep_repeats`` each, none whose single call would
    take over ``max_call_s``), measured again at the best size with ``repeats``. ``settings`` is held while it builds
    and runs (a thread count, a matmul precision) and restores what it changed. ``peak`` names the
    datasheet figure it is set beside ("bf16", "memory", "pcie") or is None. ``timer`` is "device"
    (time the device's own timeline), "graph" (the device's timeline over calls replayed as one CUDA
    graph, for kernels shorter than a launch; eager where capture fails) or "host" (wall clock with
    synchronization: for latencies that the host's launch overhead is part of). ``unsupported`` says why this
    device cannot run it, where the plan knows before building (fp8 on a CPU): it is recorded as not measured
    without being built, and `--only` refuses to select nothing but such benchmarks.
    """

    name: str
    group: str
    metric: str
    build: Callable[..., Kernel]
    params: dict[str, Any] = field(default_factory=dict)
    peak: str | None = None
    warmup: int = 3
    repeats: int = 10
    timer: str = "device"
    settings: Callable[[], AbstractContextManager[Any]] = _unchanged
    sizes: tuple[int, ...] = ()
    sweep_repeats: int = 3
    max_call_s: float = 1.0
    unsupported: str | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}")
        if self.sizes and self.metric == "seconds":
            raise ValueError("a sweep looks for the highest rate; a latency has none")

    @property
    def unit(self) -> str:
        return METRICS[self.metric]

    def value(self, work: float, median_s: float) -> float:
        """The figure: work per second for a rate, seconds per call for a latency."""
        return median_s if self.metric == "seconds" else work / median_s

    def interval(self, work: float, low_s: float | None, high_s: float | None) -> tuple[float | None, float | None]:
        """The figure's interval (low, high) from the seconds' interval: a rate's bounds swap, as work / seconds."""
        if low_s is None or high_s is None or low_s <= 0:
            return None, None
        return (low_s, high_s) if self.metric == "seconds" else (work / high_s, work / low_s)


class Unsupported(Exception):
    """This device cannot run the benchmark (a precision it lacks); recorded as an error, the run goes on."""
