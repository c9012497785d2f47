"""The sampler and the history it keeps.

The sampler calls a backend (live NVML or a replay) every ``interval`` seconds and hands each snapshot
to ``History`` and to any listeners (the logger, the exporter, a terminal printer). It runs on its own
thread (``start``/``stop``: `top`, `serve`, the profiler) or in the foreground (``run(count=...)``:
`watch`), on an injected clock and wait so tests step time by hand. History is
a ring buffer per GPU and metric, so memory stays bounded however long it runs; it also keeps the
running totals that a single sample cannot give: energy since start, time spent throttled, and XID events
counted once each (a GPU's samples carry its recent XIDs for minutes; ``XidEvent.seq`` tells a new one).
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpufly.hw import GpuSample
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.xids import label as xid_label

HISTORY_METRICS: tuple[str, ...] = (
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
"""The per-GPU figures kept as history (sparklines, web charts)."""

HOST_METRICS: tuple[str, ...] = ("cpu_percent", "memory_used_bytes")


class Backend(Protocol):
    """Anything that produces snapshots: ``LiveBackend``, ``ReplayBackend``, a fake in tests."""

    @property
    def gpu_status(self) -> str | None: ...

    def snapshot(self) -> Snapshot: ...

    def close(self) -> None: ...


Point = tuple[float, float]


class History:
    """Ring buffers of (time, value) per GPU and metric, plus energy and throttle totals since start."""

    def __init__(self, capacity: int = 600) -> None:
        self.capacity = capacity
        self.latest: Snapshot | None = None
        self.samples = 0
        self._gpu: dict[tuple[int, str], deque[Point]] = defaultdict(lambda: deque(maxlen=capacity))
        self._host: dict[str, deque[Point]] = defaultdict(lambda: deque(maxlen=capacity))
        self._energy_start: dict[int, float] = {}
        self._energy_integrated: dict[int, float] = defaultdict(float)
        self._throttle_s: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._xid_seq: dict[int, int] = {}
        self._xids: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._lock = threading.Lock()

    def add(self, snapshot: Snapshot) -> None:
        with self._lock:
            previous = self.latest
            for gpu in snapshot.gpus:
                self._add_gpu(gpu, snapshot.time, previous)
            for metric in HOST_METRICS:
                value = getattr(snapshot.host, metric)
                if value is not None:
                    self._host[metric].append((snapshot.time, float(value)))
            self.latest = snapshot
            self.samples += 1

    def _add_gpu(self, gpu: GpuSample, now: float, previous: Snapshot | None) -> None:
        if gpu.lost:
            return
        for metric in HISTORY_METRICS:
            value = getattr(gpu, metric)
            if value is not None:
                self._gpu[(gpu.index, metric)].append((now, float(value)))
        if gpu.energy_j is not None:
            self._energy_start.setdefault(gpu.index, gpu.energy_j)
        self._count_xids(gpu)
        before = _same_gpu(previous, gpu.index)
        if before is None or before.lost:
            return
        elapsed = now - (previous.time if previous else now)
        if elapsed <= 0:
            return
        if gpu.power_w is not None and before.power_w is not None:
            self._energy_integrated[gpu.index] += (gpu.power_w + before.power_w) / 2 * elapsed
        for reason in before.slowdown_reasons:
            self._throttle_s[gpu.index][reason] += elapsed

    def _count_xids(self, gpu: GpuSample) -> None:
        """Count the XIDs not counted yet (a sequence number past the last one seen); a sequence that went back
        (a new reader, a replay starting over) starts a fresh count of its events."""
        if not gpu.xid_events:
            return
        last = self._xid_seq.get(gpu.index, 0)
        newest = max(event.seq for event in gpu.xid_events)
        if newest < last:
            last = 0
        for event in gpu.xid_events:
            if event.seq > last and event.kind == "xid":
                self._xids[gpu.index][xid_label(event.xid)] += 1
        self._xid_seq[gpu.index] = newest

    def xid_counts(self, gpu_index: int) -> dict[str, int]:
        """XID events since start by the exporter's ``xid`` label (the code, or ``other`` outside gpufly's table)."""
        with self._lock:
            return dict(self._xids.get(gpu_index, {}))

    def series(self, gpu_index: int, metric: str) -> list[Point]:
        with self._lock:
            return list(self._gpu.get((gpu_index, metric), ()))

    def host_series(self, metric: str) -> list[Point]:
        with self._lock:
            return list(self._host.get(metric, ()))

    def energy_since_start_j(self, gpu_index: int) -> float | None:
        """Joules since the first sample: NVML's energy counter where it has one, else power integrated."""
        with self._lock:
            latest = _same_gpu(self.latest, gpu_index)
            if latest is not None and latest.energy_j is not None and gpu_index in self._energy_start:
                return latest.energy_j - self._energy_start[gpu_index]
            if gpu_index in self._energy_integrated:
                return self._energy_integrated[gpu_index]
            return None

    def throttle_seconds(self, gpu_index: int) -> dict[str, float]:
        """Seconds each slowdown reason was active, counted over the intervals it was seen at their start."""
        with self._lock:
            return dict(self._throttle_s.get(gpu_index, {}))


def _same_gpu(snapshot: Snapshot | None, index: int) -> GpuSample | None:
    if snapshot is None:
        return None
    return next((g for g in snapshot.gpus if g.index == index), None)


Listener = Callable[[Snapshot], object]


class Sampler:
    """Samples a backend every ``interval`` seconds, on a thread (``start``) or in the foreground (``run``).

    ``clock`` and ``wait`` are injected (``time.monotonic`` and the stop event's wait by default), so a test
    steps time by hand; ``wait(seconds)`` returns early when ``stop()`` is called. ``cpu_seconds`` is the CPU
    time the samples took (for the overhead benchmark).
    """

    def __init__(self, backend: Backend, interval: float = 1.0, history: History | None = None,
                 listeners: list[Listener] | None = None, clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], object] | None = None) -> None:
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError("interval must be positive and finite")
        self.backend = backend
        self.interval = interval
        self.history = history or History()
        self.listeners = list(listeners or [])
        self.cpu_seconds = 0.0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._clock = clock
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None

    def sample_once(self) -> Snapshot:
        """One snapshot, into the history and to every listener; a listener's error propagates."""
        started = time.thread_time()
        snapshot = self.backend.snapshot()
        self.history.add(snapshot)
        for listener in self.listeners:
            listener(snapshot)
        self.cpu_seconds += time.thread_time() - started
        return snapshot

    def run(self, count: int | None = None) -> int:
        """Sample in this thread until ``count`` samples (None: until ``stop()``); returns how many were taken.

        The schedule keeps to the interval (a slow sample shortens the next wait), no wait follows the last
        sample, and an error from the backend or a listener (a full disk) ends the run: the caller reports it.
        """
        taken = 0
        next_at = self._clock()
        while not self._stop.is_set() and (count is None or taken < count):
            self.sample_once()
            taken += 1
            if count is not None and taken >= count:
                break
            next_at += self.interval
            self._wait(max(0.0, next_at - self._clock()))
        return taken

    def start(self) -> Sampler:
        """Sample on a daemon thread until ``stop()``; errors are kept in ``errors`` and sampling goes on."""
        self._thread = threading.Thread(target=self._run_in_background, name="gpufly-sampler", daemon=True)
        self._thread.start()
        return self

    def _run_in_background(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a listener's disk-full must not kill the monitor; keep the reason
                self.errors.append(f"{type(exc).__name__}: {exc}")
            next_at += self.interval
            self._wait(max(0.0, next_at - self._clock()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def cost_per_sample_s(self) -> float | None:
        return self.cpu_seconds / self.history.samples if self.history.samples else None


def open_backend(replay: Path | None = None, loop: bool = True) -> Backend:
    """The replay of a recording when one is given, else this machine."""
    if replay is not None:
        from gpufly.monitor.backends.replay import ReplayBackend

        return ReplayBackend(replay, loop=loop)
    from gpufly.monitor.backends.live import LiveBackend

    return LiveBackend()
