"""What the profiler reads rather than times: torch's settings, versions and the machine's load at the start,
memory at each detailed step's end."""

from __future__ import annotations

import os
import platform
from typing import Any

from gpufly import __version__
from gpufly.profile.records import Conditions, LoopSettings

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_torch_settings(settings: LoopSettings, torch: Any, cuda: bool) -> None:
    """Fill in the torch version, TF32 and cuDNN flags, and on a GPU run the device's name, capability and memory."""
    from gpufly.hw import probe_host

    settings.torch_version = torch.__version__
    settings.python_version = platform.python_version()
    settings.gpufly_version = __version__
    settings.cpu_name = probe_host().cpu_model
    settings.cpu_threads = int(torch.get_num_threads())
    settings.tf32_matmul = tf32_allowed(torch.backends.cuda.matmul, torch.backends.cuda.matmul)
    settings.tf32_cudnn = tf32_allowed(getattr(torch.backends.cudnn, "conv", None), torch.backends.cudnn)
    settings.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        settings.gpu_name = props.name
        settings.compute_capability = (props.major, props.minor)
        settings.gpu_memory_total_bytes = int(props.total_memory)


def tf32_allowed(precision_holder: Any, legacy_holder: Any) -> bool:
    """Whether TF32 is on, read through the `fp32_precision` API first: once a script sets that API (as PyTorch
    advises), the old `allow_tf32` getter raises instead of answering. "none" defers to the old flag."""
    precision = getattr(precision_holder, "fp32_precision", None)
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(legacy_holder.allow_tf32)
    except RuntimeError:
        return False


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def read_conditions() -> Conditions:
    """The machine's state as the loop starts (the end's load is added when it stops)."""
    return Conditions(load_average_start=load_average(), cpu_count=os.cpu_count())


class MemoryReader:
    """A step's memory: the peak GPU memory allocated since the last reading (CUDA), else the process RSS.

    The RSS comes from /proc/self/statm through a descriptor kept open (a few µs a reading), else from psutil.
    """

    def __init__(self) -> None:
        self.cuda = False
        self._statm: int | None = None
        self._process: Any = None

    def open(self, cuda: bool) -> None:
        import psutil

        self.cuda = cuda
        self._process = psutil.Process()
        try:
            self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._statm = None
        if cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def arm(self) -> None:
        """Detailed steps begin again: the next GPU peak is this step's, not the unwatched steps' before it."""
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def read(self) -> int | None:
        if self.cuda:
            import torch

            peak = int(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            return peak
        return self._rss()

    def close(self) -> None:
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None

    def _rss(self) -> int | None:
        if self._statm is not None:
            try:
                return int(os.pread(self._statm, 64, 0).split()[1]) * PAGE_SIZE
            except OSError:
                self._statm = None
        return int(self._process.memory_info().rss) if self._process is not None else None
