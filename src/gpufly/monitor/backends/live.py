"""The live backend: one ``Snapshot`` per call, from the hardware layer (``gpufly.hw``) and psutil.

The GPU figures come from ``GpuReader``, the one NVML reader every stage shares: a field the card does
not support reads as None and a GPU that falls off the bus is marked lost while the others go on. What
the monitor adds is the OS side of each GPU process (user, command, CPU%, RSS, container), joined here
through psutil; a process that exits between NVML listing it and psutil reading it is skipped.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from gpufly.hw import GpuReader, GpuSample, Nvml, ProcessSample, read_host
from gpufly.monitor.sample import Snapshot

FIRST_CPU_INTERVAL_S = 0.1
"""The shortest interval the first snapshot's CPU figures are measured over (psutil needs two readings)."""

_CONTAINER_PATTERNS = (
    re.compile(r"docker[-/]([0-9a-f]{12,64})"),
    re.compile(r"cri-containerd[-:]([0-9a-f]{12,64})"),
    re.compile(r"libpod-([0-9a-f]{12,64})"),
    re.compile(r"crio-([0-9a-f]{12,64})"),
    re.compile(r"kubepods.*?([0-9a-f]{64})"),
)


def container_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The short (12 hex digit) id of the container a process runs in, from /proc/PID/cgroup.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "7").mkdir()
    >>> _ = (root / "7" / "cgroup").write_text("0::/system.slice/docker-4f1c2a3e8d55b1e9f0a2b7c41d0e91112345.scope\\n")
    >>> container_of(7, root)
    '4f1c2a3e8d55'
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return None
    for pattern in _CONTAINER_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1)[:12]
    return None


class ProcessJoiner:
    """Joins NVML's (pid, memory) with psutil's user, command, CPU% and RSS.

    psutil measures CPU% between two calls on the same ``Process`` object, so the objects are kept
    between snapshots; the first sight of a process reads 0% CPU, as in top.
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._known: dict[int, psutil.Process] = {}
        self._proc_root = proc_root

    def join(self, sample: ProcessSample) -> ProcessSample | None:
        """Fill in the OS facts; None when the process has exited since NVML listed it."""
        try:
            proc = self._known.get(sample.pid) or psutil.Process(sample.pid)
            self._known[sample.pid] = proc
            with proc.oneshot():
                sample.name = proc.name()
                sample.cmdline = " ".join(proc.cmdline()) or sample.name
                sample.cpu_percent = proc.cpu_percent()
                sample.rss_bytes = int(proc.memory_info().rss)
                sample.user = _user_of(proc)
        except psutil.NoSuchProcess:
            self._known.pop(sample.pid, None)
            return None
        except psutil.AccessDenied:
            pass
        sample.container = container_of(sample.pid, self._proc_root)
        return sample

    def forget_except(self, pids: set[int]) -> None:
        for pid in set(self._known) - pids:
            del self._known[pid]


def _user_of(proc: psutil.Process) -> str | None:
    try:
        return proc.username()
    except (KeyError, psutil.Error):
        return None


class LiveBackend:
    """Samples this machine. ``lib`` injects a fake pynvml; ``hostname`` overrides the label."""

    def __init__(self, lib: ModuleType | Any | None = None, hostname: str | None = None,
                 proc_root: Path = Path("/proc"), clock: Callable[[], float] = time.time) -> None:
        self._nvml = Nvml(lib)
        self._status = self._nvml.open()
        self._reader = GpuReader(self._nvml)
        self._hostname = hostname or socket.gethostname()
        self._clock = clock
        self._joiner = ProcessJoiner(proc_root)
        self._driver = self._nvml.driver_version() if self._status.available else None
        self._cuda = self._nvml.cuda_driver_version() if self._status.available else None
        read_host()  # prime psutil's CPU counters so the first snapshot measures an interval
        self._primed_at: float | None = time.monotonic()

    @property
    def gpu_status(self) -> str | None:
        """None when NVML is up; otherwise why there are no GPUs, in words."""
        return None if self._status.available else self._status.reason

    def snapshot(self) -> Snapshot:
        if self._primed_at is not None:  # psutil reads 0% CPU over an interval this short
            time.sleep(max(0.0, FIRST_CPU_INTERVAL_S - (time.monotonic() - self._primed_at)))
            self._primed_at = None
        gpus = self._read_gpus() if self._status.available else []
        return Snapshot(
            time=self._clock(),
            hostname=self._hostname,
            gpus=gpus,
            host=read_host(),
            driver_version=self._driver,
            cuda_driver_version=self._cuda,
            gpu_status=self._describe_absence(gpus),
        )

    def _describe_absence(self, gpus: list[GpuSample]) -> str | None:
        if not self._status.available:
            return self._status.reason
        return None if gpus else "the NVIDIA driver is loaded but lists no GPU"

    def close(self) -> None:
        self._nvml.close()

    def _read_gpus(self) -> list[GpuSample]:
        gpus = [self._reader.sample(index) for index in range(self._reader.count())]
        for gpu in gpus:
            joined = (self._joiner.join(process) for process in gpu.processes)
            gpu.processes = [process for process in joined if process is not None]
        self._joiner.forget_except({p.pid for g in gpus for p in g.processes})
        return gpus
