"""The machine around the GPUs, through psutil and the platform module: static facts and a moving sample.

``probe_host()`` gives what does not change while gpufly runs (OS, CPU model, core counts, RAM);
``read_host()`` gives what does (CPU per core, memory, swap, load), once per monitor sample.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class HostFacts:
    """The machine around the GPUs. Counts and bytes are None where the OS will not say."""

    os: str
    kernel: str
    machine: str
    python: str
    cpu_model: str
    cpu_physical_cores: int | None
    cpu_logical_cores: int | None
    memory_total_bytes: int
    memory_available_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name: /proc/cpuinfo on Linux, the platform module elsewhere."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def os_name() -> str:
    try:
        release = platform.freedesktop_os_release()
        return release.get("PRETTY_NAME") or release.get("NAME") or "Linux"
    except OSError:
        return f"{platform.system()} {platform.release()}".strip() or "unknown OS"


def probe_host() -> HostFacts:
    memory = psutil.virtual_memory()
    return HostFacts(
        os=os_name(),
        kernel=f"{platform.system()} {platform.release()}",
        machine=platform.machine(),
        python=platform.python_version(),
        cpu_model=cpu_model(),
        cpu_physical_cores=psutil.cpu_count(logical=False),
        cpu_logical_cores=psutil.cpu_count(logical=True),
        memory_total_bytes=int(memory.total),
        memory_available_bytes=int(memory.available),
    )


@dataclass
class HostSample:
    """The host's moving figures at one moment, from psutil."""

    cpu_percent: float | None = None
    cpu_percent_per_core: list[float] = field(default_factory=list)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    load_average: list[float] | None = None


def read_host() -> HostSample:
    """CPU per core, memory, swap and load; the first call's CPU figures are since boot (psutil's rule)."""
    per_core = psutil.cpu_percent(percpu=True)
    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()
    try:
        load = [round(x, 2) for x in psutil.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return HostSample(
        cpu_percent=round(sum(per_core) / len(per_core), 1) if per_core else None,
        cpu_percent_per_core=per_core,
        memory_used_bytes=int(memory.total - memory.available),
        memory_total_bytes=int(memory.total),
        swap_used_bytes=int(swap.used),
        swap_total_bytes=int(swap.total),
        load_average=load,
    )
