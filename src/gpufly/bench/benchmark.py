"""What one benchmark declares: its name and group, what it measures, and how to build its kernel."""

from __future__ import annotations

import contextlib
import time
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

    ``build`` allocates random inputs and returns the Kernel; ``settings`` is held while it builds
    and runs (a thread count, a matmul precision) and restores what it changed. ``peak`` names the
    datasheet figure it is set beside ("bf16", "memory", "pcie") or is None. ``timer`` is "device"
    (time the device's own timeline), "graph" (the device's timeline over calls replayed as one CUDA
    graph, for kernels shorter than a launch; eager where capture fails) or "host" (wall clock with
    synchronization: for latencies that the host's launch overhead is part of).
    """

    name: str
    group: str
    metric: str
    build: Callable[[], Kernel]
    params: dict[str, Any] = field(default_factory=dict)
    peak: str | None = None
    warmup: int = 3
    repeats: int = 10
    timer: str = "device"
    settings: Callable[[], AbstractContextManager[Any]] = _unchanged

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}")

    @property
    def unit(self) -> str:
        return METRICS[self.metric]

    def value(self, work: float, median_s: float) -> float:
        """The figure: work per second for a rate, seconds per call for a latency."""
        return median_s if self.metric == "seconds" else work / median_s


def grow(build: Callable[[int], Kernel], sizes: tuple[int, ...], *, target_s: float, max_s: float | None = None,
         exponent: float = 3.0, clock: Callable[[], float] | None = None) -> Kernel:
    """The kernel at the first size whose single call takes at least ``target_s`` (else the largest), stopping
    early where the next size would take over ``max_s`` (default 4 x target), its time scaling as size**exponent.

    Sizes a matmul to the machine: a CPU without bf16 units runs bf16 a hundred times slower than
    fp32, and one fixed size would be either too small for one or take minutes for the other.
    """
    clock = clock or time.perf_counter
    limit = 4 * target_s if max_s is None else max_s
    kernel = None
    for size, following in zip(sizes, (*sizes[1:], None), strict=True):
        kernel = build(size)
        kernel.fn()
        start = clock()
        kernel.fn()
        once = clock() - start
        if once >= target_s or (following is not None and once * (following / size) ** exponent > limit):
            break
    if kernel is None:
        raise ValueError("no sizes to try")
    return kernel


class Unsupported(Exception):
    """This device cannot run the benchmark (a precision it lacks); recorded as an error, the run goes on."""
