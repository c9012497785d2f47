"""Fakes for the bench tests: a clock that only moves when told, a kernel whose work lands at sync,
and a device that runs benchmarks on that clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufly.bench.benchmark import Benchmark, Kernel
from gpufly.bench.results import DeviceFacts
from gpufly.bench.timing import Timing, measure
from gpufly.catalog import GpuSpec


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class AsyncKernel:
    """Like a GPU kernel: a call only queues work; the time passes when someone synchronizes.

    The first ``slow_calls`` calls take ``slow_s`` (compilation, caches filling), the rest ``fast_s``.
    """

    def __init__(self, clock: FakeClock, fast_s: float, slow_s: float = 0.0, slow_calls: int = 0) -> None:
        self.clock, self.fast_s, self.slow_s, self.slow_calls = clock, fast_s, slow_s, slow_calls
        self.calls = 0
        self.queued = 0.0

    def __call__(self) -> None:
        self.calls += 1
        self.queued += self.slow_s if self.calls <= self.slow_calls else self.fast_s

    def sync(self) -> None:
        self.clock.advance(self.queued)
        self.queued = 0.0


@dataclass
class FakeDevice:
    """A device whose benchmarks run on a fake clock; ``spec`` supplies the peaks."""

    spec: GpuSpec | None = None
    kind: str = "cuda"
    label: str = "cuda:0"
    groups: tuple[str, ...] = ("gemm", "memory", "launch")
    clock: FakeClock = field(default_factory=FakeClock)
    recovered: int = 0

    def facts(self) -> DeviceFacts:
        return DeviceFacts(kind=self.kind, name=self.spec.name if self.spec else "Fake GPU",
                           catalog_id=self.spec.id if self.spec else None, torch_version="0.0-fake")

    def plan(self, quick: bool = False) -> list[Benchmark]:
        return []

    def time(self, benchmark: Benchmark, kernel: Kernel) -> Timing:
        sync = getattr(kernel.fn, "sync", None)
        return measure(kernel.fn, warmup=benchmark.warmup, repeats=benchmark.repeats, inner=kernel.inner,
                       sync=sync, clock=self.clock)

    def conditions(self) -> dict[str, Any]:
        return {"sm_clock_mhz": 1980}

    def recover(self) -> None:
        self.recovered += 1

    def environment(self) -> dict[str, str]:
        return {}


def slow_benchmark(device: FakeDevice, name: str, seconds: float, work: float, *, metric: str = "flops_per_s",
                   group: str = "gemm", peak: str | None = "bf16") -> Benchmark:
    """A benchmark whose kernel takes ``seconds`` per call on the device's fake clock."""
    def build() -> Kernel:
        kernel = AsyncKernel(device.clock, fast_s=seconds, slow_s=10 * seconds, slow_calls=2)
        return Kernel(kernel, work, {"shape": "fake"})

    return Benchmark(name, group, metric, build, peak=peak, warmup=2, repeats=5)


class SpreadKernel:
    """A kernel on the fake clock whose call times follow a script: each attempt at measuring it (a warm-up and
    its repeats) takes the next list of per-call seconds, the last list again once the script runs out."""

    def __init__(self, clock: FakeClock, attempts: list[list[float]], warmup: int) -> None:
        self.clock, self.warmup = clock, warmup
        self.calls = [seconds for attempt in attempts for seconds in [attempt[0]] * warmup + attempt]
        self.tail = [attempts[-1][0]] * warmup + attempts[-1]
        self.done = 0

    def __call__(self) -> None:
        script = self.calls if self.done < len(self.calls) else self.tail
        index = self.done if self.done < len(self.calls) else (self.done - len(self.calls)) % len(self.tail)
        self.clock.advance(script[index])
        self.done += 1


@dataclass
class FakeHost:
    """The machine's conditions as a test sets them: what ``start`` and ``end`` report around each figure."""

    at_start: dict[str, Any] = field(default_factory=lambda: {"load_average_1m": 0.2, "cpu_cores": 2})
    at_end: dict[str, Any] = field(default_factory=lambda: {"load_average_1m": 0.3, "cpu_cores": 2,
                                                            "busy_processes": []})

    def start(self) -> dict[str, Any]:
        return dict(self.at_start)

    def end(self) -> dict[str, Any]:
        return dict(self.at_end)
