"""Fakes for the profiler's parts: a clock that moves only when told, and a GPU that reads from a script."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any


class FakeClock:
    """Time that moves only when the test (or the fake work it drives) says so, as Rich's ``MockClock`` does."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def gpu_sample(lost: bool = False, utilization: float = 90.0, reasons: tuple[str, ...] = (),
               energy_j: float | None = None) -> Any:
    """What ``gpufly.hw.GpuReader.sample`` returns, with the fields the profiler reads."""
    return SimpleNamespace(lost=lost, utilization_gpu_percent=None if lost else utilization,
                           memory_used_bytes=None if lost else 8 * 1024**3, power_w=None if lost else 300.0,
                           power_limit_w=None if lost else 700.0, sm_clock_mhz=None if lost else 1980.0,
                           sm_clock_max_mhz=None if lost else 1980.0, slowdown_reasons=list(reasons),
                           energy_j=None if lost else energy_j)


class FakeGpuSource:
    """A GPU source that plays ``samples`` in turn (the last one again once they run out) and counts its reads."""

    def __init__(self, *samples: Any) -> None:
        self.samples = list(samples) or [gpu_sample()]
        self.indexes: list[int] = []
        self.closed = False
        self._read = threading.Condition()

    def sample(self, index: int) -> Any:
        with self._read:
            self.indexes.append(index)
            self._read.notify_all()
            return self.samples[min(len(self.indexes), len(self.samples)) - 1]

    def wait_for_reads(self, count: int) -> bool:
        """Whether ``count`` reads happened (waiting for the sampling thread; a minute is only the limit)."""
        with self._read:
            return self._read.wait_for(lambda: len(self.indexes) >= count, timeout=60)

    def close(self) -> None:
        self.closed = True
