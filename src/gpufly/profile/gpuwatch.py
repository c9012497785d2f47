"""NVML samples of the profiled GPU, taken on a background thread while the loop runs.

The GPU rules (throttling, low utilization, small batch) read these. The samples come through gpufly's
hardware layer (``gpufly.hw``); the source is injected, so tests drive the watch with a fake one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpufly.profile.records import GpuReading


class GpuSource(Protocol):
    """Reads one GPU's state: ``gpufly.hw.GpuReader`` over an open NVML, or a fake in tests."""

    def sample(self, index: int) -> Any:
        """A ``gpufly.hw.GpuSample`` (``lost`` when the GPU fell off the bus)."""
        ...

    def close(self) -> None: ...


class NvmlSource:
    """``gpufly.hw.GpuReader`` over an NVML handle this source owns and closes."""

    def __init__(self, nvml: Any) -> None:
        from gpufly.hw import GpuReader

        self._nvml = nvml
        self._reader = GpuReader(nvml)

    def sample(self, index: int) -> Any:
        return self._reader.sample(index)

    def close(self) -> None:
        self._nvml.close()


def open_nvml() -> GpuSource | None:
    """An NVML source, or None where NVML is not there (no driver, no library): the loop is profiled without it."""
    from gpufly.hw import Nvml

    nvml = Nvml()
    if not nvml.open().available:
        return None
    return NvmlSource(nvml)


class GpuWatch:
    """Appends a ``GpuReading`` of GPU ``index`` to ``readings`` every ``interval`` seconds on its own thread.

    ``connect`` opens the source (None: no NVML, nothing is sampled); ``clock`` stamps each reading.
    """

    def __init__(self, index: int, interval: float, readings: list[GpuReading], *,
                 connect: Callable[[], GpuSource | None] = open_nvml, clock: Callable[[], float] = time.time) -> None:
        self.index = index
        self.interval = interval
        self.readings = readings
        self._connect = connect
        self._clock = clock
        self._source: GpuSource | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start sampling; False when there is no NVML to sample."""
        self._source = self._connect()
        if self._source is None:
            return False
        self._thread = threading.Thread(target=self._run, name="gpufly-profile-gpu", daemon=True)
        self._thread.start()
        return True

    def sample_once(self) -> None:
        """Read the GPU now and keep the reading, unless the GPU is lost."""
        if self._source is None:
            return
        gpu = self._source.sample(self.index)
        if gpu.lost:
            return
        self.readings.append(GpuReading(
            time=self._clock(), utilization_percent=gpu.utilization_gpu_percent,
            memory_used_bytes=gpu.memory_used_bytes, power_w=gpu.power_w, power_limit_w=gpu.power_limit_w,
            sm_clock_mhz=gpu.sm_clock_mhz, sm_clock_max_mhz=gpu.sm_clock_max_mhz,
            slowdown_reasons=list(gpu.slowdown_reasons), energy_j=gpu.energy_j))

    def stop(self) -> None:
        """Stop the thread and close the source; the readings stay."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._source is not None:
            self._source.close()
            self._source = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.sample_once()
            self._stopping.wait(self.interval)
