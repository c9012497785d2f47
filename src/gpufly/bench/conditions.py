"""What else the machine was doing while a figure was timed: load average, the other busy processes, the CPU clock.

Read at the start (the processes busy just before) and the end (those busy during it) of each benchmark (the
GPU's clocks and slowdown reasons come from the device, bench/cuda.py), so a figure that came out noisy can say
why, and a saved run shows the conditions of each number.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

BUSY_PERCENT = 10.0
"""A process besides ours using more CPU than this over a measurement is named as busy (the issue's threshold:
on a 2-core machine one such process takes a tenth of a core the benchmark may have wanted)."""
BUSY_SHOWN = 5
"""At most this many busy processes are recorded, the busiest first."""
START_WINDOW_S = 0.2
"""How long ``start`` watches the other processes before a measurement: 20 ticks of the kernel's 10 ms CPU
accounting, so one stray tick reads 5%, under the busy threshold."""


@dataclass(frozen=True)
class BusyProcess:
    """Another process that used the CPU while a figure was timed."""

    pid: int
    name: str
    cpu_percent: float

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "cpu_percent": self.cpu_percent}


class HostProbe(Protocol):
    """What the runner reads around each benchmark (``HostWatch``, or a fake in tests)."""

    def start(self) -> dict[str, Any]: ...
    def end(self) -> dict[str, Any]: ...


def busiest(percents: Iterable[tuple[int, str, float]], own_pid: int, threshold: float = BUSY_PERCENT,
            shown: int = BUSY_SHOWN) -> list[BusyProcess]:
    """The processes other than ``own_pid`` above ``threshold`` percent CPU, busiest first.

    >>> [p.name for p in busiest([(1, "idle", 0.5), (2, "python", 95.0), (3, "me", 200.0), (4, "make", 30.0)], 3)]
    ['python', 'make']
    """
    busy = [BusyProcess(pid, name, round(percent, 1)) for pid, name, percent in percents
            if pid != own_pid and percent > threshold]
    return sorted(busy, key=lambda p: -p.cpu_percent)[:shown]


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


class HostWatch:
    """Load average, CPU clock and busy processes through psutil.

    ``start`` reads the load and clock and the processes busy over the ``window_s`` before the measurement;
    ``end`` reads them again with the CPU each other process used since ``start``: the processes that competed
    with the measurement.
    """

    def __init__(self, own_pid: int | None = None, load_average: Callable[[], float | None] = _load_average,
                 window_s: float = START_WINDOW_S, sleep: Callable[[float], None] = time.sleep) -> None:
        import psutil

        self._psutil = psutil
        self._own_pid = os.getpid() if own_pid is None else own_pid
        self._load_average = load_average
        self._window_s, self._sleep = window_s, sleep
        self.cores = psutil.cpu_count(logical=True)

    def _cpu_clock_mhz(self) -> int | None:
        try:
            frequency = self._psutil.cpu_freq()
        except (OSError, RuntimeError, NotImplementedError):
            return None
        return round(frequency.current) if frequency and frequency.current else None

    def _percents(self) -> list[tuple[int, str, float]]:
        """Each process's CPU percent since the previous call (psutil keeps the process objects between calls)."""
        found = []
        for process in self._psutil.process_iter(["name"]):
            try:
                found.append((process.pid, process.info["name"] or "?", process.cpu_percent(None)))
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess):
                continue
        return found

    def _common(self) -> dict[str, Any]:
        values = {"load_average_1m": self._load_average(), "cpu_cores": self.cores,
                  "cpu_clock_mhz": self._cpu_clock_mhz()}
        return {key: value for key, value in values.items() if value is not None}

    def _busy(self) -> list[dict[str, Any]]:
        return [process.to_dict() for process in busiest(self._percents(), self._own_pid)]

    def start(self) -> dict[str, Any]:
        self._percents()
        self._sleep(self._window_s)
        return {**self._common(), "busy_processes": self._busy()}

    def end(self) -> dict[str, Any]:
        return {**self._common(), "busy_processes": self._busy()}
